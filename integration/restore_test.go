package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/pgcluster"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

// restoreEffects are the effects TestRestoreFromBackup runs, one of each
// guarantee: charge deduplicated (Stripe's key), ticket reconcilable
// (Zendesk's external_id), email at most once (SMTP).
var restoreEffects = []string{"charge", "ticket", "email"}

// TestRestoreFromBackup takes a base backup of a cluster that archives its
// WAL, then runs intents: some ended before the restore point, some
// recorded before it and sent after it, some created after it. The cluster
// is then restored twice to the restore point (pg_basebackup's copy, WAL
// replayed to recovery_target_time), once without and once with outboxd
// recover, and serve runs on each against the same providers, which
// remember what they did. It counts the effects each restored cluster
// makes again, and the ids and provider keys handed out again to the
// agents' retries of the intents the restore lost.
func TestRestoreFromBackup(t *testing.T) {
	t.Parallel()
	runRestoreFromBackup(t, &baseBackupMethod{})
}

// restoreMethod is how runRestoreFromBackup's cluster is backed up and
// restored: pg_basebackup with WAL copied by archive_command
// (baseBackupMethod), or pgBackRest (pgBackRestMethod).
type restoreMethod interface {
	// name is the method, for the figure line.
	name() string
	// archiveSettings are the primary's settings that archive its WAL.
	archiveSettings(t *testing.T) []string
	// prepare runs once the primary runs and its schema is migrated,
	// before any intent.
	prepare(t *testing.T, primary *pgcluster.Cluster)
	// backup runs while the first intents run, before the restore point.
	backup(t *testing.T, primary *pgcluster.Cluster) error
	// restore returns the i-th cluster restored to point, started, once
	// the primary is stopped.
	restore(t *testing.T, i int, primary *pgcluster.Cluster, point time.Time) *pgcluster.Cluster
}

// baseBackupMethod is pg_basebackup's copy, taken before any intent, and
// WAL copied into a directory by archive_command, replayed to
// recovery_target_time by restore_command.
type baseBackupMethod struct {
	archive string
	backups []*pgcluster.Cluster
}

func (m *baseBackupMethod) name() string { return "pg_basebackup" }

func (m *baseBackupMethod) archiveSettings(t *testing.T) []string {
	var err error
	m.archive, err = pgcluster.MakeArchiveDir()
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(m.archive) })
	return []string{"archive_mode=on", "archive_command=cp %p " + m.archive + "/%f"}
}

func (m *baseBackupMethod) prepare(t *testing.T, primary *pgcluster.Cluster) {
	// Two copies of one moment, one for each restore.
	for range 2 {
		b, err := primary.BaseBackup(context.Background())
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Stop(context.Background()) })
		m.backups = append(m.backups, b)
	}
}

func (m *baseBackupMethod) backup(*testing.T, *pgcluster.Cluster) error { return nil }

func (m *baseBackupMethod) restore(t *testing.T, i int, _ *pgcluster.Cluster, point time.Time) *pgcluster.Cluster {
	b := m.backups[i]
	require.NoError(t, b.StartRecovery(context.Background(),
		"restore_command=cp "+m.archive+"/%f %p",
		"recovery_target_time="+point.UTC().Format("2006-01-02 15:04:05.999999")+"+00"))
	return b
}

// runRestoreFromBackup is TestRestoreFromBackup with method's backup and
// restore.
func runRestoreFromBackup(t *testing.T, method restoreMethod) {
	ctx := context.Background()
	primary, err := pgcluster.Start(ctx, &pgcluster.Config{CrashSafe: true, Settings: method.archiveSettings(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop(context.Background()) })
	const schema = "outbox"
	pool, err := pgxpool.New(ctx, primary.URL())
	require.NoError(t, err)
	defer pool.Close()
	m, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	method.prepare(t, primary)

	sb, err := sandbox.Start(&sandbox.Config{StripeAPIKey: "sk_test_integration", ZendeskEmail: "agent@example.com", ZendeskToken: "zendesk-token"})
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	e := restoreEnv(t, sb, primary.URL(), pool)

	args := func(effect string, i int) map[string]any {
		a := map[string]any{}
		for k, v := range effectArgs[effect] {
			a[k] = v
		}
		switch effect {
		case "charge":
			a["amount"] = 1000 + i
		case "ticket":
			a["subject"] = fmt.Sprintf("Refund %d", i)
		case "email":
			a["subject"] = fmt.Sprintf("Order %d", i)
		}
		return a
	}
	type keyed struct {
		effect string
		i      int
	}
	actions := map[string]keyed{}
	enqueueAll := func(prefix string, n int) []string {
		var keys []string
		for _, effect := range restoreEffects {
			for i := range n {
				key := fmt.Sprintf("%s-%s-%03d", prefix, effect, i)
				e.enqueue(t, key, effect, args(effect, i))
				keys = append(keys, key)
				actions[key] = keyed{effect, i}
			}
		}
		return keys
	}
	// Before the restore point: ended, while the backup is taken.
	backedUp := make(chan error, 1)
	go func() { backedUp <- method.backup(t, primary) }()
	server := e.serve()
	ended := enqueueAll("ended", 3)
	for _, key := range ended {
		require.Equal(t, outbox.StateSucceeded, e.waitIntent(t, key, 60*time.Second).State)
	}
	require.NoError(t, <-backedUp)
	stopGracefully(t, server)
	// A restored sequence resumes from the value last written to WAL, up
	// to 32 past its last id, and where that falls depends on where the
	// last checkpoint fell: a backup taken while intents run puts one
	// anywhere. A checkpoint here, then an id taken (as a rolled-back
	// enqueue takes one), make it the same in every run, whatever the
	// method: the restored sequence resumes 32 past the restore point's
	// last id. (After exactly 33 ids since a checkpoint it would resume at
	// the last one, and the agents' retries below, in the same order, would
	// get the very ids, and so provider keys, of the intents they retry.)
	_, err = pool.Exec(ctx, `CHECKPOINT`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT nextval(pg_get_serial_sequence('outbox.outbox_intent', 'id'))`)
	require.NoError(t, err)
	// Recorded before the restore point, with no serve running: pending
	// there, sent after it.
	sentAfter := enqueueAll("sent-after", 10)
	// And three charges older than Stripe's 24 h window: a provider would
	// no longer recognise their key (the sandbox's Stripe does, forever).
	var pastWindow []string
	for i := range 3 {
		key := fmt.Sprintf("past-window-charge-%03d", i)
		e.enqueue(t, key, "charge", args("charge", 100+i))
		actions[key] = keyed{"charge", 100 + i}
		pastWindow = append(pastWindow, key)
	}
	// An UPDATE, not testfactory.Intent: the intents serve recorded.
	_, err = pool.Exec(ctx, `UPDATE outbox.outbox_intent SET created_at = created_at - interval '25 hours' WHERE key LIKE 'past-window-%'`)
	require.NoError(t, err)
	sentAfter = append(sentAfter, pastWindow...)
	var restorePoint time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&restorePoint))
	time.Sleep(100 * time.Millisecond)
	server = e.serve()
	for _, key := range sentAfter {
		require.Equal(t, outbox.StateSucceeded, e.waitIntent(t, key, 60*time.Second).State)
	}
	// Created after the restore point: 40 a guarantee, more than the 32
	// values PostgreSQL logs a sequence ahead, so that the restored
	// sequence hands some of their ids out again.
	createdAfter := enqueueAll("created-after", 40)
	oldIDs, oldKeys := map[int64]bool{}, map[string]bool{}
	for _, key := range createdAfter {
		intent := e.waitIntent(t, key, 60*time.Second)
		require.Equal(t, outbox.StateSucceeded, intent.State)
		oldIDs[intent.ID] = true
	}
	stopGracefully(t, server)
	// Every provider key the providers saw.
	rows, err := pool.Query(ctx, `SELECT provider_key FROM outbox.outbox_intent`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		oldKeys[k] = true
	}
	require.NoError(t, rows.Err())
	// The WAL past the restore point reaches the archive.
	var segment string
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_walfile_name(pg_switch_wal())`).Scan(&segment))
	require.Eventually(t, func() bool {
		var last string
		_ = pool.QueryRow(ctx, `SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver`).Scan(&last)
		return last >= segment
	}, 30*time.Second, 50*time.Millisecond, "WAL segment %s never archived", segment)
	pool.Close()
	require.NoError(t, primary.Stop(ctx))

	standIns := map[string]standIn{"charge": sb.Stripe, "ticket": sb.Zendesk, "email": sb.SMTP}
	type restoreRun struct {
		again      int
		restoredIn time.Duration
	}
	run := func(i int, recover bool) restoreRun {
		start := time.Now()
		b := method.restore(t, i, primary, restorePoint)
		restoredIn := time.Since(start)
		rpool, err := pgxpool.New(ctx, b.URL())
		require.NoError(t, err)
		defer rpool.Close()
		re := restoreEnv(t, sb, b.URL(), rpool)
		// The restore is at the point: sent-after pending, created-after
		// gone.
		for _, key := range sentAfter {
			intent, err := re.client.Get(ctx, "", key)
			require.NoError(t, err)
			require.Equal(t, outbox.StatePending, intent.State, "%s at the restore point", key)
		}
		for _, key := range createdAfter {
			_, err := re.client.Get(ctx, "", key)
			require.ErrorIs(t, err, outbox.ErrNotFound)
		}
		recovered := ""
		if recover {
			// A point before the database's last change is refused: the
			// operator's time, or the database, is not the one meant.
			_, stderr, code := re.run("recover", "--restore-point", restorePoint.Add(-time.Hour).Format(time.RFC3339Nano))
			require.NotZero(t, code)
			require.Contains(t, stderr, "not a restore to that point")
			out, stderr, code := re.run("recover", "--restore-point", restorePoint.Format(time.RFC3339Nano))
			require.Zero(t, code, "outboxd recover: %s%s", out, stderr)
			recovered = strings.ReplaceAll(strings.TrimSpace(out), "\n", "; ")
		}
		before := map[string]int{}
		requestsBefore := map[string]int{}
		for effect, s := range standIns {
			before[effect], requestsBefore[effect] = s.Effects(), s.Requests()
		}
		pastWindowKeys := map[string]int{}
		for _, key := range pastWindow {
			intent, err := re.client.Get(ctx, "", key)
			require.NoError(t, err)
			pastWindowKeys[intent.ProviderKey] = sb.Stripe.RequestsFor(intent.ProviderKey)
		}
		server := re.serve()
		if recover {
			// Never while serve runs: its workers would take intents
			// while they are marked.
			_, stderr, code := re.run("recover", "--restore-point", restorePoint.Format(time.RFC3339Nano))
			require.NotZero(t, code)
			require.Contains(t, stderr, "stop every serve")
		}
		states := map[string]int{}
		for _, key := range append(append([]string{}, ended...), sentAfter...) {
			intent := re.waitIntent(t, key, 60*time.Second)
			states[string(intent.State)]++
		}
		// The agents retry the keys the restore lost: new intents.
		idsAgain, keysAgain := 0, 0
		for _, key := range createdAfter {
			a := actions[key]
			intent := re.enqueue(t, key, a.effect, args(a.effect, a.i))
			if oldIDs[intent.ID] {
				idsAgain++
			}
			if oldKeys[intent.ProviderKey] {
				keysAgain++
			}
		}
		for _, key := range createdAfter {
			re.waitIntent(t, key, 60*time.Second)
		}
		stopGracefully(t, server)
		// Sent again under a key older than the provider's window: a real
		// provider may have forgotten it and act again.
		pastWindowResent := 0
		for pk, n := range pastWindowKeys {
			pastWindowResent += sb.Stripe.RequestsFor(pk) - n
		}
		again := map[string]int{}
		resent := map[string]int{}
		for effect, s := range standIns {
			again[effect] = s.Effects() - before[effect]
			resent[effect] = s.Requests() - requestsBefore[effect]
		}
		// The retries of the lost keys are new actions to the providers
		// (new provider keys): 40 effects each, not counted as again.
		for _, effect := range restoreEffects {
			again[effect] -= 40
		}
		label := "without recover"
		if recover {
			label = "with recover"
		}
		t.Logf("%s (%s) %s: restored in %s; intents at the restore point %d (%d pending, sent after it); effects made again: charge %d, ticket %d, email %d (requests: charge %d, ticket %d, email %d, retries of lost keys included); charges past Stripe's window sent again under their old key %d of %d; states %v; agents' retries of %d lost keys: ids handed out again %d, provider keys seen before %d; %s",
			t.Name(), method.name(), label, restoredIn.Round(10*time.Millisecond), len(ended)+len(sentAfter), len(sentAfter), again["charge"], again["ticket"], again["email"],
			resent["charge"], resent["ticket"], resent["email"], pastWindowResent, len(pastWindow), states, len(createdAfter), idsAgain, keysAgain, recovered)
		if recover {
			require.Zero(t, again["charge"]+again["ticket"]+again["email"], "effects made again after outboxd recover")
			require.Zero(t, idsAgain, "ids handed out again after outboxd recover")
			require.Zero(t, pastWindowResent, "a charge past the provider's window sent again after outboxd recover")
			require.Equal(t, 13, states["unknown"], "the at-most-once intents, and the deduplicated ones past their window, sent after the restore point end unknown")
		} else {
			// What recover is for: the restored cluster sends the
			// reconcilable and at-most-once intents again.
			require.Positive(t, again["ticket"]+again["email"], "the restored cluster made no effect again: the run shows nothing")
			require.Positive(t, idsAgain, "the restored sequence handed out no id again")
		}
		require.Zero(t, keysAgain, "a provider key the providers saw, handed to a new intent")
		return restoreRun{again: again["charge"] + again["ticket"] + again["email"] + pastWindowResent, restoredIn: restoredIn}
	}
	without := run(0, false)
	with := run(1, true)
	// One line of figures: effects made again are the restore's
	// duplicates; intents lost are those created after the restore point.
	t.Logf("%s: faults 2 (restores to a point in time by %s), intents %d before the point, %d after it (lost by the restore, recorded again by the agents' retries); "+
		"effects made twice: %d without recover, %d with it; acknowledged intents before the point lost 0; restored in %s and %s",
		t.Name(), method.name(), len(ended)+len(sentAfter), len(createdAfter), without.again, with.again,
		without.restoredIn.Round(10*time.Millisecond), with.restoredIn.Round(10*time.Millisecond))
}

// restoreEnv is an env for serve on url's schema outbox, with sb's Stripe,
// Zendesk and SMTP.
func restoreEnv(t *testing.T, sb *sandbox.Sandbox, url string, pool *pgxpool.Pool) *providerEnv {
	t.Helper()
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: "outbox"})
	require.NoError(t, err)
	e := &env{t: t, client: client, pool: pool, schema: "outbox", vars: []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + url,
		"OUTBOX_SCHEMA=outbox",
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		"OUTBOX_ALLOW_NO_AUTH=true",
		"OUTBOX_EFFECT_TIMEOUT=2s",
		"OUTBOX_WORKERS=10",
		"OUTBOX_STRIPE_URL=" + sb.Stripe.URL(),
		"OUTBOX_STRIPE_KEY=sk_test_integration",
		"OUTBOX_SMTP_ADDR=" + sb.SMTP.Addr(),
		"OUTBOX_SMTP_FROM=Shop <shop@example.com>",
		"OUTBOX_SMTP_TLS=none",
		"OUTBOX_ZENDESK_URL=" + sb.Zendesk.URL(),
		"OUTBOX_ZENDESK_EMAIL=agent@example.com",
		"OUTBOX_ZENDESK_TOKEN=zendesk-token",
	}}
	return &providerEnv{env: e, sb: sb}
}

// stopGracefully sends SIGTERM and waits for serve to exit.
func stopGracefully(t *testing.T, p *process) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("outboxd serve did not stop on SIGTERM")
	}
}
