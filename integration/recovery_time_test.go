package integration

import (
	"context"
	"flag"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/outbox"
)

// recoveryKills is how many processes TestRecoveryTime kills. CI runs a
// few; the measurement in docs/design.md takes 20 or more:
//
//	go test ./integration -run TestRecoveryTime -recovery-kills 24 -v
var recoveryKills = flag.Int("recovery-kills", 6, "kills in TestRecoveryTime (the measurement in docs/design.md used 24)")

// Three serve replicas; again and again, one of them (River's leader for
// about a third of the kills) is killed with SIGKILL while attempts hang
// in it: first attempts in a batch (deduplicated, the default), or one job
// per intent of each guarantee. The survivors must take every interrupted
// intent up again within the effect timeout plus 5 s, without waiting for
// River's rescuer or a new leader, and keep the guarantees: a reconcilable
// intent looked up only after the dead attempt's lease, then sent once; an
// at-most-once intent unknown, never resent; a deduplicated one succeeded.
// The time is from the kill to the intent's end in its next attempt (the
// effect hangs in the first attempt only, so the next one ends at once).
func TestRecoveryTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const effectTimeout = time.Second
	// The default poll interval: the time to taken up again is a figure of
	// docs/design.md.
	e := newEnv(t, "OUTBOX_EFFECT_TIMEOUT="+effectTimeout.String(), measuredPollInterval)

	replicas := []*replica{startReplica(e), startReplica(e), startReplica(e)}

	type measured struct {
		key, effect string
		batched     bool
		leader      bool
		took        time.Duration
		// leaseLeft is how long the dead attempt's lease still ran at the
		// kill (claimed effects): a reconcilable intent must not end
		// before it.
		leaseLeft time.Duration
	}
	var (
		results     []measured
		leaderKills int
		unit        int
		keys        []string
	)
	effectsCycle := []string{"noop", "noop_reconcilable", "noop_at_most_once"}
	for kill := range *recoveryKills {
		batched := kill%2 == 1
		// River's leader is the target of about a third of the kills:
		// whenever fewer than that killed it so far and one is elected (a
		// kill of the leader leaves none for about 15 s).
		var target *replica
		if leaderKills*3 <= kill {
			var leaderID string
			_ = e.pool.QueryRow(ctx, `SELECT leader_id FROM `+e.table("river_leader")+` WHERE expires_at > now()`).Scan(&leaderID)
			for _, r := range replicas {
				if r.clientID == leaderID {
					target = r
				}
			}
		}
		isLeader := target != nil
		marks := make([]int, len(replicas))
		for i, r := range replicas {
			marks[i] = r.p.lineCount()
		}
		// Units of work until the target (or, with no target, any replica)
		// hangs in one: each unit is one intent, or a batch of four.
		byID := map[int64]string{}
		var victim *replica
		var hanging []int64
		for tries := 0; victim == nil; tries++ {
			require.Less(t, tries, 60, "the target replica took no work in 60 tries")
			unit++
			n, effect := 1, effectsCycle[unit%len(effectsCycle)]
			if batched {
				n, effect = 4, "noop"
			}
			params := make([]*outbox.EnqueueParams, n)
			for i := range params {
				key := fmt.Sprintf("u%04d-%d", unit, i)
				keys = append(keys, key)
				params[i] = &outbox.EnqueueParams{Key: key, Effect: effect, Args: map[string]any{"_noop": map[string]any{"hang": "before"}}}
			}
			res, err := e.client.EnqueueManyTx(ctx, e.pool, params)
			require.NoError(t, err)
			for i, r := range res {
				byID[r.Intent.ID] = params[i].Key
			}
			deadline := time.Now().Add(300 * time.Millisecond)
			for victim == nil && time.Now().Before(deadline) {
				for i, r := range replicas {
					if target != nil && r != target {
						continue
					}
					if ids := r.p.hangingSince(marks[i], byID); len(ids) > 0 {
						victim = r
						break
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		// Every intent of the round hanging in the victim dies with it;
		// a batch of four shows its first hang before its others.
		time.Sleep(20 * time.Millisecond)
		vi := slices.Index(replicas, victim)
		hanging = victim.p.hangingSince(marks[vi], byID)
		leases := map[int64]time.Duration{}
		for _, id := range hanging {
			var left *float64
			require.NoError(t, e.pool.QueryRow(ctx, `SELECT extract(epoch FROM lease_expires_at - now())::float8 FROM `+e.table("outbox_intent")+` WHERE id = $1`, id).Scan(&left))
			if left != nil {
				leases[id] = time.Duration(*left * float64(time.Second))
			}
		}
		killedAt := time.Now()
		victim.p.kill9()
		if isLeader {
			leaderKills++
		}
		for _, id := range hanging {
			intent := e.wait(byID[id], 30*time.Second)
			var took float64
			require.NoError(t, e.pool.QueryRow(ctx, `SELECT extract(epoch FROM completed_at)::float8 FROM `+e.table("outbox_intent")+` WHERE id = $1`, id).Scan(&took))
			m := measured{key: byID[id], effect: intent.Effect, batched: batched, leader: isLeader,
				took: time.Unix(0, int64(took*1e9)).Sub(killedAt), leaseLeft: leases[id]}
			results = append(results, m)
			switch intent.Effect {
			case "noop", "noop_reconcilable":
				require.Equal(t, outbox.StateSucceeded, intent.State, "%+v", intent)
			case "noop_at_most_once":
				require.Equal(t, outbox.StateUnknown, intent.State, "%+v", intent)
				require.Equal(t, "outcome_lost", intent.Error.Code)
			}
			if intent.Effect == "noop_reconcilable" {
				require.GreaterOrEqual(t, m.took, m.leaseLeft, "%s: looked up before the dead attempt's lease ended", m.key)
			}
			require.LessOrEqual(t, m.took, effectTimeout+5*time.Second, "%s (%s) taken up again %s after the kill", m.key, m.effect, m.took)
		}
		replicas[vi] = startReplica(e)
	}

	// Every intent of the run ends, each effect made at most once: the
	// reconcilable stand-in does not dedupe, so a resend would show.
	for _, key := range keys {
		e.wait(key, 30*time.Second)
	}
	var effects, duplicated int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT provider_key) FROM `+e.table("outbox_noop_effect")).Scan(&effects, &duplicated))
	require.Zero(t, duplicated, "an effect made twice")
	var amoEffects int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.table("outbox_noop_effect")+` n JOIN `+e.table("outbox_intent")+
		` i ON i.provider_key = n.provider_key WHERE i.effect = 'noop_at_most_once'`).Scan(&amoEffects))
	require.Zero(t, amoEffects, "an at-most-once intent was resent after its attempt died")

	require.GreaterOrEqual(t, len(results), *recoveryKills)
	require.Positive(t, leaderKills, "River's leader was never killed")
	var all, batchedD, dedup, rec, amo []time.Duration
	for _, m := range results {
		all = append(all, m.took)
		switch {
		case m.batched:
			batchedD = append(batchedD, m.took)
		case m.effect == "noop":
			dedup = append(dedup, m.took)
		case m.effect == "noop_reconcilable":
			rec = append(rec, m.took)
		default:
			amo = append(amo, m.took)
		}
	}
	require.NotEmpty(t, batchedD, "no batch was interrupted")
	t.Logf("TestRecoveryTime: replicas 3, kills %d (leader %d), intents interrupted %d, time to taken up again p50 %s p99 %s max %s (target %s: effect timeout %s + 5 s); "+
		"batched %d p50 %s; deduplicated %d p50 %s; reconcilable %d p50 %s (each after its dead attempt's lease); at_most_once %d p50 %s (unknown); effects %d, duplicated %d",
		*recoveryKills, leaderKills, len(all), pct(all, 0.5), pct(all, 0.99), pct(all, 1), effectTimeout+5*time.Second, effectTimeout,
		len(batchedD), pct(batchedD, 0.5), len(dedup), pct(dedup, 0.5), len(rec), pct(rec, 0.5), len(amo), pct(amo, 0.5), effects, duplicated)
}

// replica is a serve process and its River client id.
type replica struct {
	p        *process
	clientID string
}

var clientIDRE = regexp.MustCompile(`client_id=("[^"]*"|\S+)`)

func startReplica(e *env) *replica {
	p := e.serve()
	line := p.waitFor("process registered for liveness", 10*time.Second)
	m := clientIDRE.FindStringSubmatch(line)
	require.NotNil(e.t, m, "no client id in %q", line)
	id, err := strconv.Unquote(m[1])
	if err != nil {
		id = m[1]
	}
	return &replica{p: p, clientID: id}
}

func (p *process) lineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

var hangingRE = regexp.MustCompile(`noop effect hanging.* intent_id=(\d+)`)

// hangingSince returns the intents of ids the process logged hanging in
// since line from.
func (p *process) hangingSince(from int, ids map[int64]string) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int64
	for _, l := range p.lines[min(from, len(p.lines)):] {
		if m := hangingRE.FindStringSubmatch(l); m != nil {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			if _, ok := ids[id]; ok && !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// pct is the q-quantile of ds (nearest rank), rounded to 10 ms.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)].Round(10 * time.Millisecond)
}
