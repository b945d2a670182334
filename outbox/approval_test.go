package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testfactory"
	"github.com/outbox-dev/outbox/outbox"
)

func TestParseApprovalRules(t *testing.T) {
	t.Parallel()

	rules, err := outbox.ParseApprovalRules(" charge:amount>=10000, webhook:endpoint=payouts,email,ticket:priority!=low,charge:amount<5,charge:amount<=-1.5e2,charge:amount>0,charge:amount=7 ")
	require.NoError(t, err)
	require.Equal(t, []outbox.ApprovalRule{
		{Effect: "charge", Arg: "amount", Op: ">=", Value: "10000"},
		{Effect: "webhook", Arg: "endpoint", Op: "=", Value: "payouts"},
		{Effect: "email"},
		{Effect: "ticket", Arg: "priority", Op: "!=", Value: "low"},
		{Effect: "charge", Arg: "amount", Op: "<", Value: "5"},
		{Effect: "charge", Arg: "amount", Op: "<=", Value: "-1.5e2"},
		{Effect: "charge", Arg: "amount", Op: ">", Value: "0"},
		{Effect: "charge", Arg: "amount", Op: "=", Value: "7"},
	}, rules)
	require.Equal(t, "charge:amount>=10000", rules[0].String())
	require.Equal(t, "email", rules[2].String())

	// [host] lets the person at the MCP host decide too; the rule keeps it
	// as written, and so does the intent it holds.
	host, err := outbox.ParseApprovalRules("charge:amount>=10000[host],email[host]")
	require.NoError(t, err)
	require.Equal(t, []outbox.ApprovalRule{
		{Effect: "charge", Arg: "amount", Op: ">=", Value: "10000", Host: true},
		{Effect: "email", Host: true},
	}, host)
	require.Equal(t, "charge:amount>=10000[host]", host[0].String())
	require.True(t, outbox.HostMayApprove(host[1].String()))
	require.False(t, outbox.HostMayApprove(rules[0].String()))

	none, err := outbox.ParseApprovalRules("none")
	require.NoError(t, err)
	require.Empty(t, none)

	for _, bad := range []string{
		"Charge",               // not an effect name
		"charge:",              // no comparison
		"charge:amount",        // no operator
		"charge:amount>=",      // no value
		"charge:>=5",           // no argument
		"charge:a.b>=5",        // not a top-level name
		"charge:currency>eur",  // ordering needs a number
		"charge:amount>=10>=2", // two operators
		"charge:amount=>5",     // "=" then ">5"
		"charge:amount>=0x10",  // not a JSON number
		"charge:to=[host]x",    // brackets only as the suffix
		"charge[operator]",     // no such suffix
	} {
		_, err := outbox.ParseApprovalRules("email," + bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), `"`+bad+`"`, "the error names the rule")
	}
}

// A rebuild that cannot lock the intent table within 10 s, because a
// transaction keeps writing to it, gives up, and changes nothing. A test of
// its own, so that its 10 s wait starts with the package's first tests.
func TestApprovalRulesRebuildGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	open, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer open.Rollback(ctx) //nolint:errcheck
	testfactory.Intent(ctx, t, open, &testfactory.IntentOpts{Key: "open", Namespace: "hand", Schema: b.schema})

	err = b.client.SetApprovalRules(ctx, []outbox.ApprovalRule{{Effect: "noop"}})
	require.ErrorContains(t, err, "could not be rebuilt within 10 s")
	require.NoError(t, open.Rollback(ctx))
	rules, err := b.client.ApprovalRules(ctx)
	require.NoError(t, err)
	require.Empty(t, rules)
	res, err := b.enqueue(t, &outbox.EnqueueParams{Key: "after", Effect: "noop", Args: map[string]any{}})
	require.NoError(t, err)
	require.Equal(t, outbox.StatePending, res.Intent.State)
}

// TestApprovalRules checks the rules as the database's insert trigger
// applies them, through the Go library and through SQL.
func TestApprovalRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	rules, err := outbox.ParseApprovalRules("noop:amount>=10000,noop:cents<0,noop:n=3,noop:m!=5,noop:k>1,noop:j<=2,noop:endpoint=payouts,noop:tier!=gold")
	require.NoError(t, err)
	// Every rule has an argument the others do not, so each case below
	// names the one rule it meets.
	require.NoError(t, b.client.SetApprovalRules(ctx, rules))
	stored, err := b.client.ApprovalRules(ctx)
	require.NoError(t, err)
	require.Len(t, stored, len(rules))

	// The base arguments match no rule; each case changes one.
	base := map[string]any{"amount": 1, "cents": 1, "n": 1, "m": 5, "k": 0, "j": 3, "endpoint": "audit", "tier": "gold"}
	with := func(extra string) json.RawMessage {
		args := map[string]any{}
		for k, v := range base {
			args[k] = v
		}
		if drop, ok := strings.CutPrefix(extra, "-"); ok {
			delete(args, drop)
		} else if extra != "" {
			require.NoError(t, json.Unmarshal([]byte(extra), &args))
		}
		out, err := json.Marshal(args)
		require.NoError(t, err)
		return out
	}
	cases := []struct {
		name, args, rule string // rule "" means none matches
	}{
		{"NoRule", ``, ""},
		{"GreaterOrEqualBelow", `{"amount": 9999}`, ""},
		{"GreaterOrEqualAt", `{"amount": 10000}`, "noop:amount>=10000"},
		{"GreaterOrEqualSpeltWithExponent", `{"amount": 1e4}`, "noop:amount>=10000"},
		{"GreaterOrEqualFraction", `{"amount": 10000.5}`, "noop:amount>=10000"},
		{"LessBelow", `{"cents": -1}`, "noop:cents<0"},
		{"LessAt", `{"cents": 0}`, ""},
		{"EqualNumber", `{"n": 3.0}`, "noop:n=3"},
		{"EqualNumberOther", `{"n": 4}`, ""},
		{"NotEqualNumber", `{"m": 6}`, "noop:m!=5"},
		{"GreaterAbove", `{"k": 2}`, "noop:k>1"},
		{"GreaterAt", `{"k": 1}`, ""},
		{"LessOrEqualAt", `{"j": 2}`, "noop:j<=2"},
		{"LessOrEqualAbove", `{"j": 3}`, ""},
		{"EqualString", `{"endpoint": "payouts"}`, "noop:endpoint=payouts"},
		{"EqualStringOther", `{"endpoint": "audit"}`, ""},
		{"NotEqualString", `{"tier": "silver"}`, "noop:tier!=gold"},
		// A number under a string rule compares by its text; a string
		// under a numeric rule cannot be compared, and a brake does not
		// give way to the wrong type.
		{"NumberUnderStringRule", `{"endpoint": 7}`, ""},
		{"StringUnderNumericRule", `{"amount": "20000"}`, "noop:amount>=10000"},
		{"SmallStringUnderNumericRule", `{"amount": "5"}`, "noop:amount>=10000"},
		// A missing or null argument matches: leaving out what a rule
		// checks does not lift it.
		{"MissingArgument", `-amount`, "noop:amount>=10000"},
		{"MissingStringArgument", `-endpoint`, "noop:endpoint=payouts"},
		{"NullArgument", `{"m": null}`, "noop:m!=5"},
	}
	for i, c := range cases {
		args := with(c.args)
		key := "rule-" + c.name
		res, err := b.enqueue(t, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: args})
		require.NoError(t, err, c.name)
		if c.rule == "" {
			require.Equal(t, outbox.StatePending, res.Intent.State, c.name)
			require.Nil(t, res.Intent.ApprovalRule, c.name)
		} else {
			require.Equal(t, outbox.StateAwaitingApproval, res.Intent.State, c.name)
			require.Equal(t, c.rule, *res.Intent.ApprovalRule, c.name)
		}

		// The SQL interface obeys the same rules.
		var state string
		var rule *string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT (intent).state, (intent).approval_rule FROM "+
			pgx.Identifier{b.schema}.Sanitize()+".enqueue('sql', $1, 'noop', $2)", key, string(args)).Scan(&state, &rule), c.name)
		require.Equal(t, string(res.Intent.State), state, "%s (case %d) over SQL", c.name, i)
	}

	t.Run("RequestedByTheCaller", func(t *testing.T) {
		res, err := b.enqueue(t, &outbox.EnqueueParams{Key: "asked", Effect: "noop", Args: with(""), RequireApproval: true})
		require.NoError(t, err)
		require.Equal(t, outbox.StateAwaitingApproval, res.Intent.State)
		require.Equal(t, outbox.ApprovalRequested, *res.Intent.ApprovalRule)

		var state, rule string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT (intent).state, (intent).approval_rule FROM "+
			pgx.Identifier{b.schema}.Sanitize()+".enqueue('sql', 'asked', 'noop', '{}', NULL, true)").Scan(&state, &rule))
		require.Equal(t, "awaiting_approval", state)
		require.Equal(t, "requested", rule)

		// Many at once, each with its own wish.
		results, err := b.client.EnqueueManyTx(ctx, b.pool, []*outbox.EnqueueParams{
			{Key: "many-1", Effect: "noop", Args: with(""), RequireApproval: true},
			{Key: "many-2", Effect: "noop", Args: with("")},
			{Key: "many-3", Effect: "noop", Args: with(`{"amount": 10000}`)},
		})
		require.NoError(t, err)
		require.Equal(t, outbox.StateAwaitingApproval, results[0].Intent.State)
		require.Equal(t, outbox.StatePending, results[1].Intent.State)
		require.Equal(t, outbox.StateAwaitingApproval, results[2].Intent.State)
	})

	t.Run("Replaced", func(t *testing.T) {
		other := setup(t)
		require.NoError(t, other.client.SetApprovalRules(ctx, []outbox.ApprovalRule{{Effect: "noop"}}))
		res, err := other.enqueue(t, &outbox.EnqueueParams{Key: "all-1", Effect: "noop", Args: with("")})
		require.NoError(t, err)
		require.Equal(t, outbox.StateAwaitingApproval, res.Intent.State)

		require.NoError(t, other.client.SetApprovalRules(ctx, []outbox.ApprovalRule{}))
		res, err = other.enqueue(t, &outbox.EnqueueParams{Key: "all-2", Effect: "noop", Args: with("")})
		require.NoError(t, err)
		require.Equal(t, outbox.StatePending, res.Intent.State)

		err = other.client.SetApprovalRules(ctx, []outbox.ApprovalRule{{Effect: "noop", Arg: "currency", Op: ">", Value: "eur"}})
		require.ErrorIs(t, err, outbox.ErrInvalidArgs)
	})

	// The rules are compiled into a trigger that fires only for the
	// effects they name, rebuilt whenever they change, however the rules
	// table is written; and left alone when they do not, so that serve
	// starting with the rules in force takes no lock on the intent table.
	t.Run("TriggerFollowsTheRules", func(t *testing.T) {
		other := setup(t)
		schema := pgx.Identifier{other.schema}.Sanitize()
		trigger := func() (def string) {
			t.Helper()
			require.NoError(t, other.pool.QueryRow(ctx, `SELECT pg_get_triggerdef(oid) FROM pg_trigger
				WHERE tgrelid = $1::regclass AND tgname = 'outbox_intent_approval_rules'`, schema+".outbox_intent").Scan(&def))
			return def
		}
		// insert writes an intent by hand (testfactory.Intent is a plain
		// INSERT), as a service with INSERT on the table could, and returns
		// its state and rule.
		insert := func(key, effect, args string) (state string, rule *string) {
			t.Helper()
			intent := testfactory.Intent(ctx, t, other.pool, &testfactory.IntentOpts{
				Args: json.RawMessage(args), Effect: effect, Key: key, Namespace: "hand", Schema: other.schema,
			})
			return string(intent.State), intent.ApprovalRule
		}
		// openInsert begins a transaction that inserts an intent and stays
		// open, holding its lock on the table until rolled back.
		openInsert := func(key string) pgx.Tx {
			t.Helper()
			tx, err := other.pool.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(ctx) })
			testfactory.Intent(ctx, t, tx, &testfactory.IntentOpts{Key: key, Namespace: "hand", Schema: other.schema})
			return tx
		}

		require.Contains(t, trigger(), "WHEN (false)", "no rule: the trigger never fires")
		// Only the rules table's triggers rebuild it: PUBLIC may not, so no
		// role can hold the intent table's lock by calling it.
		for _, fn := range []string{"outbox_approval_sync_trigger()", "outbox_approval_compile()", "outbox_approval_rule_changed()"} {
			var acl string
			require.NoError(t, other.pool.QueryRow(ctx, `SELECT coalesce(array_to_string(proacl, ','), 'default') FROM pg_proc
				WHERE oid = $1::regprocedure`, schema+"."+fn).Scan(&acl))
			require.NotEqual(t, "default", acl, "%s: the default ACL grants EXECUTE to PUBLIC", fn)
			require.NotRegexp(t, `(^|,)=`, acl, "%s: no entry for PUBLIC", fn)
		}
		state, _ := insert("t-0", "noop", `{"amount": 50}`)
		require.Equal(t, "pending", state)

		ten := []outbox.ApprovalRule{{Effect: "noop", Arg: "amount", Op: ">=", Value: "10"}}
		require.NoError(t, other.client.SetApprovalRules(ctx, ten))
		compiled := trigger()
		require.Contains(t, compiled, "'noop'")
		state, rule := insert("t-1", "noop", `{"amount": 50}`)
		require.Equal(t, "awaiting_approval", state)
		require.Equal(t, "noop:amount>=10", *rule)
		state, _ = insert("t-2", "email", `{"amount": 50}`)
		require.Equal(t, "pending", state, "an effect no rule names")

		// The same rules again, while another transaction is inserting:
		// nothing to rebuild, so nothing waits for it.
		open := openInsert("open-1")
		quick, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		require.NoError(t, other.client.SetApprovalRules(quick, ten))
		require.NoError(t, open.Rollback(ctx))
		require.Equal(t, compiled, trigger())

		// Another threshold applies at once.
		require.NoError(t, other.client.SetApprovalRules(ctx, []outbox.ApprovalRule{{Effect: "noop", Arg: "amount", Op: ">=", Value: "100"}}))
		state, _ = insert("t-3", "noop", `{"amount": 50}`)
		require.Equal(t, "pending", state)

		// Two rules written by hand at once, each in its own transaction,
		// while an insert holds the table: neither is lost, although both
		// transactions were waiting to rebuild the trigger together.
		open = openInsert("open-2")
		errs := make(chan error, 2)
		for i, effect := range []string{"email", "ticket"} {
			go func() {
				_, err := other.pool.Exec(ctx, `INSERT INTO `+schema+`.outbox_approval_rule (position, rule, effect) VALUES ($1, $2, $2)`, 10+i, effect)
				errs <- err
			}()
		}
		require.Eventually(t, func() bool {
			var waiting int
			err := other.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%outbox_approval_rule (position%'`).Scan(&waiting)
			return err == nil && waiting == 2
		}, 10*time.Second, 10*time.Millisecond, "both rule changes wait")
		require.NoError(t, open.Rollback(ctx))
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		for _, effect := range []string{"email", "ticket"} {
			state, rule = insert("t-4-"+effect, effect, `{}`)
			require.Equal(t, "awaiting_approval", state, effect)
			require.Equal(t, effect, *rule)
		}

		// The rules can only be changed in READ COMMITTED, where each
		// change reads the one committed before it.
		tx, err := other.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `DELETE FROM `+schema+`.outbox_approval_rule`)
		require.NoError(t, err)
		err = tx.Commit(ctx)
		require.ErrorContains(t, err, "READ COMMITTED")
		state, _ = insert("t-5", "email", `{}`)
		require.Equal(t, "awaiting_approval", state, "the refused change changed nothing")

		// Emptied by TRUNCATE: no rule applies.
		_, err = other.pool.Exec(ctx, `TRUNCATE `+schema+`.outbox_approval_rule`)
		require.NoError(t, err)
		require.Contains(t, trigger(), "WHEN (false)")
		state, _ = insert("t-6", "email", `{}`)
		require.Equal(t, "pending", state)
		state, rule = insert("t-7", "noop", `{}`)
		require.Equal(t, "pending", state)
		require.Nil(t, rule)
	})
}

func TestApproveDeny(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	awaiting := func(t *testing.T, key string, args string) *outbox.Intent {
		t.Helper()
		res, err := b.enqueue(t, &outbox.EnqueueParams{Key: key, Effect: "noop", Args: json.RawMessage(args), RequireApproval: true})
		require.NoError(t, err)
		require.Equal(t, outbox.StateAwaitingApproval, res.Intent.State)
		return res.Intent
	}

	t.Run("ArgsSHA256IsCanonical", func(t *testing.T) {
		t.Parallel()
		a := awaiting(t, "canon-a", `{"b": [1, 2], "a": 10000}`)
		require.Len(t, a.ArgsSHA256, 64)
		// The same arguments spelt otherwise hash alike ...
		require.Equal(t, a.ArgsSHA256, outbox.ArgsSHA256(json.RawMessage(`{"a":1e4,"b":[1.0,2]}`)))
		// ... and other arguments do not.
		require.NotEqual(t, a.ArgsSHA256, outbox.ArgsSHA256(json.RawMessage(`{"a":10001,"b":[1,2]}`)))
		read, err := b.client.Get(ctx, outbox.NamespaceDefault, "canon-a")
		require.NoError(t, err)
		require.Equal(t, a.ArgsSHA256, read.ArgsSHA256)
	})

	t.Run("ApproveReleasesOnlyTheArgsShown", func(t *testing.T) {
		t.Parallel()
		intent := awaiting(t, "approve-1", `{"amount": 20000}`)
		other := outbox.ArgsSHA256(json.RawMessage(`{"amount": 200}`))

		_, err := b.client.Approve(ctx, &outbox.ApprovalParams{Key: "approve-1", ArgsSHA256: other, By: "alice"})
		require.ErrorIs(t, err, outbox.ErrApprovalMismatch)
		var oe *outbox.Error
		require.True(t, errors.As(err, &oe))
		require.Equal(t, "args_sha256", oe.Field)
		still, err := b.client.Get(ctx, outbox.NamespaceDefault, "approve-1")
		require.NoError(t, err)
		require.Equal(t, outbox.StateAwaitingApproval, still.State, "a mismatch releases nothing")
		require.Nil(t, still.ApprovedBy)

		_, err = b.client.Approve(ctx, &outbox.ApprovalParams{Key: "approve-1", ArgsSHA256: "not-hex"})
		require.ErrorIs(t, err, outbox.ErrInvalidArgs)

		approved, err := b.client.Approve(ctx, &outbox.ApprovalParams{Key: "approve-1", ArgsSHA256: intent.ArgsSHA256, By: "alice", Note: "customer confirmed"})
		require.NoError(t, err)
		require.Equal(t, outbox.StatePending, approved.State)
		require.Equal(t, "alice", *approved.ApprovedBy)
		require.NotNil(t, approved.ApprovedAt)
		require.Equal(t, "customer confirmed", *approved.ApprovalNote)
		require.Nil(t, approved.DeniedBy)
		require.Equal(t, 1, b.scalarQuery(t, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+
			" WHERE key = 'approve-1' AND job_id IS NULL AND state = 'pending'"), "pending without a job: the drain dispatches it")

		_, err = b.client.Approve(ctx, &outbox.ApprovalParams{Key: "approve-1", ArgsSHA256: intent.ArgsSHA256})
		require.ErrorIs(t, err, outbox.ErrNotAwaitingApproval)
		_, err = b.client.Deny(ctx, &outbox.ApprovalParams{Key: "approve-1", ArgsSHA256: intent.ArgsSHA256})
		require.ErrorIs(t, err, outbox.ErrNotAwaitingApproval)
	})

	t.Run("Deny", func(t *testing.T) {
		t.Parallel()
		intent := awaiting(t, "deny-1", `{"amount": 20000}`)
		denied, err := b.client.Deny(ctx, &outbox.ApprovalParams{Key: "deny-1", ArgsSHA256: intent.ArgsSHA256, By: "bob", Note: "not this customer"})
		require.NoError(t, err)
		require.Equal(t, outbox.StateCancelled, denied.State)
		require.Equal(t, &outbox.IntentError{Code: "approval_denied", Message: "not this customer"}, denied.Error)
		require.Equal(t, "bob", *denied.DeniedBy)
		require.NotNil(t, denied.DeniedAt)
		require.NotNil(t, denied.CompletedAt)
		require.Nil(t, denied.ApprovedBy)
	})

	t.Run("NotFoundAndOtherNamespaces", func(t *testing.T) {
		t.Parallel()
		intent := awaiting(t, "ns-1", `{}`)
		_, err := b.client.Approve(ctx, &outbox.ApprovalParams{Key: "ns-1", Namespace: "elsewhere", ArgsSHA256: intent.ArgsSHA256})
		require.ErrorIs(t, err, outbox.ErrNotFound)
	})

	t.Run("CancelWhileAwaiting", func(t *testing.T) {
		t.Parallel()
		awaiting(t, "cancel-1", `{}`)
		cancelled, err := b.client.Cancel(ctx, &outbox.CancelParams{Key: "cancel-1", By: "agent"})
		require.NoError(t, err)
		require.Equal(t, outbox.StateCancelled, cancelled.State)
	})

	t.Run("DuplicateAnswersWithTheState", func(t *testing.T) {
		t.Parallel()
		awaiting(t, "dup-1", `{"x": 1}`)
		res, err := b.enqueue(t, &outbox.EnqueueParams{Key: "dup-1", Effect: "noop", Args: json.RawMessage(`{"x": 1}`)})
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, outbox.StateAwaitingApproval, res.Intent.State)
	})

	// A wait that begins while the intent awaits approval returns when a
	// person decided, not only when the intent is terminal.
	t.Run("WaitReturnsOnTheDecision", func(t *testing.T) {
		t.Parallel()
		intent := awaiting(t, "wait-1", `{"y": 2}`)
		done := make(chan *outbox.Intent, 1)
		go func() {
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			got, err := b.client.Wait(waitCtx, outbox.NamespaceDefault, "wait-1")
			assertNoError(t, err)
			done <- got
		}()
		select {
		case got := <-done:
			t.Fatalf("the wait returned before any decision: %s", got.State)
		case <-time.After(300 * time.Millisecond):
		}
		_, err := b.client.Approve(ctx, &outbox.ApprovalParams{Key: "wait-1", ArgsSHA256: intent.ArgsSHA256, By: "carol"})
		require.NoError(t, err)
		got := <-done
		require.Equal(t, outbox.StatePending, got.State)
		require.Equal(t, "carol", *got.ApprovedBy)
	})

	t.Run("ApprovalObserver", func(t *testing.T) {
		t.Parallel()
		var seen []string
		client, err := outbox.NewClient(b.pool, &outbox.Config{Schema: b.schema,
			ApprovalObserverFunc: func(effect string, d outbox.ApprovalDecision) { seen = append(seen, effect+" "+string(d)) }})
		require.NoError(t, err)
		one, two := awaiting(t, "obs-1", `{"o": 1}`), awaiting(t, "obs-2", `{"o": 2}`)
		_, err = client.Approve(ctx, &outbox.ApprovalParams{Key: "obs-1", ArgsSHA256: one.ArgsSHA256})
		require.NoError(t, err)
		_, err = client.Deny(ctx, &outbox.ApprovalParams{Key: "obs-2", ArgsSHA256: two.ArgsSHA256})
		require.NoError(t, err)
		_, err = client.Deny(ctx, &outbox.ApprovalParams{Key: "obs-2", ArgsSHA256: two.ArgsSHA256})
		require.Equal(t, outbox.CodeNotAwaitingApproval, outbox.ErrorCode(err))
		require.Equal(t, "noop approved,noop denied", strings.Join(seen, ","))
	})
}

// SetApprovalRulesTx changes the rules with the caller's transaction: in
// force once it commits, unchanged when it rolls back; a transaction of
// another isolation is refused.
func TestSetApprovalRulesTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rules, err := outbox.ParseApprovalRules("noop:amount>=100[host]")
	require.NoError(t, err)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, b.client.SetApprovalRulesTx(ctx, tx, rules))
	require.NoError(t, tx.Rollback(ctx))
	inForce, err := b.client.ApprovalRules(ctx)
	require.NoError(t, err)
	require.Empty(t, inForce, "rolled back: nothing changed")

	tx, err = b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	err = b.client.SetApprovalRulesTx(ctx, tx, rules)
	require.ErrorIs(t, err, outbox.ErrInvalidArgs)
	require.NoError(t, tx.Rollback(ctx))

	tx, err = b.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, b.client.SetApprovalRulesTx(ctx, tx, rules))
	require.NoError(t, tx.Commit(ctx))
	inForce, err = b.client.ApprovalRules(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"noop:amount>=100[host]"}, inForce)
	res, err := b.client.Enqueue(ctx, &outbox.EnqueueParams{Key: "held", Effect: "noop", Args: map[string]any{"amount": 500}})
	require.NoError(t, err)
	require.Equal(t, outbox.StateAwaitingApproval, res.Intent.State)
	require.True(t, outbox.HostMayApprove(*res.Intent.ApprovalRule))
}
