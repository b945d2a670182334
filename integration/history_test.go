package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/pgcluster"
	"github.com/outbox-dev/outbox/internal/sandbox"
	"github.com/outbox-dev/outbox/migrations"
	"github.com/outbox-dev/outbox/outbox"
)

// historyOps is how many client operations TestHistory records: a few
// hundred in the default run, a few thousand for a long one
// (go test ./integration -run TestHistory -history.ops 5000).
var historyOps = flag.Int("history.ops", 600, "client operations TestHistory records")

// histFault is one fault of the schedule, with its moment.
type histFault struct {
	Kind string `json:"kind"`
	At   int64  `json:"at_ns"`
	// InFlight is how many client operations were under way at it.
	InFlight int `json:"in_flight"`
}

// A history of agent and operator calls, recorded over serve's HTTP API
// while two replicas are killed (-9: timed to a provider call in flight, so
// that the kill cuts an attempt), paused (SIGSTOP), PostgreSQL is
// restarted, and commit replies are lost (Toxiproxy), is checked per key
// with Porcupine against the intent state machine (history_model_test.go),
// and the providers' ledgers are counted against the intents.
func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, &pgcluster.Config{CrashSafe: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })
	const schema = "outbox"
	pool, err := pgxpool.New(ctx, cluster.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	m, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	client, err := outbox.NewClient(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)

	sb, err := sandbox.Start(&sandbox.Config{StripeAPIKey: "sk_test_integration", ZendeskEmail: "agent@example.com", ZendeskToken: "zendesk-token"})
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	toxi := newToxiServer(t)
	front := newPGFront(t, toxi, unixRelay(t, filepath.Join(cluster.SocketDir(), ".s.PGSQL.5432")))
	dbURL := front.url(cluster.URL())
	e := &env{t: t, client: client, pool: pool, schema: schema, vars: []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + dbURL,
		"OUTBOX_SCHEMA=" + schema,
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		"OUTBOX_ALLOW_NO_AUTH=true",
		"OUTBOX_EFFECT_TIMEOUT=1s",
		"OUTBOX_WORKERS=10",
		"OUTBOX_RECONCILE_INTERVAL=2s",
		"OUTBOX_STRIPE_URL=" + sb.Stripe.URL(),
		"OUTBOX_STRIPE_KEY=sk_test_integration",
		"OUTBOX_SMTP_ADDR=" + sb.SMTP.Addr(),
		"OUTBOX_SMTP_FROM=Shop <shop@example.com>",
		"OUTBOX_SMTP_TLS=none",
		"OUTBOX_ZENDESK_URL=" + sb.Zendesk.URL(),
		"OUTBOX_ZENDESK_EMAIL=agent@example.com",
		"OUTBOX_ZENDESK_TOKEN=zendesk-token",
	}}
	// Batched first attempts are the default; passed through like baseVars.
	if v, ok := os.LookupEnv("OUTBOX_BATCH_FIRST_ATTEMPTS"); ok {
		e.vars = append(e.vars, "OUTBOX_BATCH_FIRST_ATTEMPTS="+v)
	}
	var (
		replicasMu sync.Mutex
		replicas   = []*process{e.serve(), e.serve()}
	)
	addrOf := func() string {
		replicasMu.Lock()
		defer replicasMu.Unlock()
		return replicas[rand.IntN(len(replicas))].addr
	}

	// Keys: a third each of charge (deduplicated), ticket (reconcilable)
	// and email (at most once); one in five asks for an approval.
	effectsOf := []string{"charge", "ticket", "email"}
	nkeys := max(*historyOps/6, 10)
	type keyInfo struct {
		effect   string
		args     map[string]any
		approval bool
	}
	keys := make([]keyInfo, nkeys)
	for i := range keys {
		effect := effectsOf[i%3]
		args := map[string]any{}
		for k, v := range effectArgs[effect] {
			args[k] = v
		}
		switch effect {
		case "charge":
			args["amount"] = 100 + i
		case "ticket":
			args["subject"] = fmt.Sprintf("Refund %d", i)
		case "email":
			args["subject"] = fmt.Sprintf("Order %d", i)
		}
		keys[i] = keyInfo{effect: effect, args: args, approval: i%5 == 4}
	}
	keyName := func(i int) string { return fmt.Sprintf("h%04d", i) }

	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var (
		histMu   sync.Mutex
		history  []porcupine.Operation
		inFlight = map[int]int64{} // client id -> call time
		shaMu    sync.Mutex
		shas     = map[string]string{}
		done     atomic.Int64
	)
	record := func(clientID int, in histInput, call int64, ans agentAnswer) {
		out := histOutput{Status: ans.Status, Code: ans.Code}
		ret := now()
		switch {
		case ans.Err != nil || ans.Status >= 500:
			out.Result, ret = "info", infoReturn
		case !ans.ok():
			out.Result = "fail"
		default:
			out.Result, out.ID, out.State, out.Duplicate = "ok", ans.Intent.ID, string(ans.Intent.State), ans.Duplicate
			shaMu.Lock()
			shas[in.Key] = ans.Intent.ArgsSHA256
			shaMu.Unlock()
		}
		histMu.Lock()
		history = append(history, porcupine.Operation{ClientId: clientID, Input: in, Call: call, Output: out, Return: ret})
		delete(inFlight, clientID)
		histMu.Unlock()
	}

	const clients = 6
	httpc := &http.Client{Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Add(1) <= int64(*historyOps) {
				i := rand.IntN(nkeys)
				k := keys[i]
				in := histInput{Key: keyName(i)}
				r := rand.IntN(100)
				switch {
				case r < 40:
					in.Op = "enqueue"
				case r < 60:
					in.Op = "get"
				case r < 70:
					in.Op = "wait"
				case r < 80:
					in.Op = "cancel"
				case r < 90:
					in.Op, in.Outcome = "resolve", "succeeded"
				default:
					in.Op = "approve"
				}
				call := now()
				histMu.Lock()
				inFlight[c] = call
				histMu.Unlock()
				addr := addrOf()
				path := "/v1/intents/" + in.Key
				var ans agentAnswer
				switch in.Op {
				case "enqueue":
					body := map[string]any{"effect": k.effect, "args": k.args, "require_approval": k.approval}
					ans = agentCall(ctx, httpc, http.MethodPost, addr, "/v1/intents", http.Header{"Idempotency-Key": {in.Key}}, body)
				case "get":
					ans = agentGet(ctx, httpc, addr, in.Key, 0)
				case "wait":
					ans = agentGet(ctx, httpc, addr, in.Key, 2*time.Second)
				case "cancel":
					ans = agentCall(ctx, httpc, http.MethodPost, addr, path+"/cancel", nil, map[string]any{"note": "history"})
				case "resolve":
					ans = agentCall(ctx, httpc, http.MethodPost, addr, path+"/resolve", nil, map[string]any{"outcome": in.Outcome, "note": "history"})
				case "approve":
					shaMu.Lock()
					sha := shas[in.Key]
					shaMu.Unlock()
					if sha == "" {
						sha = strings.Repeat("0", 64)
					}
					ans = agentCall(ctx, httpc, http.MethodPost, addr, path+"/approve", nil, map[string]any{"args_sha256": sha, "note": "history"})
				}
				record(c, in, call, ans)
				time.Sleep(time.Duration(30+rand.IntN(120)) * time.Millisecond)
			}
		}()
	}

	// The schedule: a fault every 1 to 2.5 s until the clients are done,
	// in turn (of six): a kill in flight, a lost acknowledgement, a restart
	// of PostgreSQL, a kill in flight, a pause, a lost acknowledgement.
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()
	var faults []histFault
	note := func(kind string) {
		histMu.Lock()
		defer histMu.Unlock()
		faults = append(faults, histFault{Kind: kind, At: now(), InFlight: len(inFlight)})
	}
	targets := []string{sqlMatchEnqueue, sqlMatchDrain, sqlMatchClaim, sqlMatchFinish}
	var lostAcks []*lostAck
	// The stand-ins a kill is timed to, with the port their clients
	// connect to.
	hangers := []struct {
		standIn interface {
			Misbehave(...sandbox.Fault)
			HangingNow() []string
		}
		port int
	}{
		{sb.Stripe, urlPort(t, sb.Stripe.URL())},
		{sb.Zendesk, urlPort(t, sb.Zendesk.URL())},
		{sb.SMTP, urlPort(t, "smtp://"+sb.SMTP.Addr())},
	}
	// interruptedAttempts counts attempts a kill cut while their call was
	// in flight at the provider.
	interruptedAttempts := 0
schedule:
	for n := 0; ; n++ {
		select {
		case <-clientsDone:
			break schedule
		case <-time.After(time.Duration(1000+rand.IntN(1500)) * time.Millisecond):
		}
		switch n % 6 {
		case 0, 3:
			// A kill timed to a provider call in flight: the next request
			// to one stand-in (in turn) performs its effect and hangs, the
			// worst moment to die, and the replicas holding a connection
			// to that stand-in are killed while it hangs (both, when both
			// do: the caller is one of them). Without a call within 5 s, a
			// replica at random.
			h := hangers[(n/3)%len(hangers)]
			h.standIn.Misbehave(sandbox.Fault{Kind: sandbox.FaultHangAfter})
			var hung []string
			for deadline := time.Now().Add(5 * time.Second); len(hung) == 0 && time.Now().Before(deadline); {
				hung = h.standIn.HangingNow()
				if len(hung) == 0 {
					time.Sleep(2 * time.Millisecond)
				}
			}
			replicasMu.Lock()
			var victims []int
			if len(hung) > 0 {
				for i, r := range replicas {
					if connectedTo(r.cmd.Process.Pid, h.port) {
						victims = append(victims, i)
					}
				}
			}
			timed := len(victims) > 0
			if !timed {
				victims = []int{rand.IntN(len(replicas))}
			}
			killed := make([]*process, len(victims))
			for j, i := range victims {
				killed[j] = replicas[i]
			}
			replicasMu.Unlock()
			if timed {
				note("kill -9 with a call in flight")
			} else {
				note("kill -9")
			}
			for _, victim := range killed {
				victim.kill9()
			}
			if timed {
				// The attempt was cut: its intent has no outcome recorded.
				for _, key := range hung {
					var state string
					err := pool.QueryRow(ctx, `SELECT state FROM outbox.outbox_intent WHERE provider_key = $1`, key).Scan(&state)
					if err == nil && !outbox.State(state).Terminal() {
						interruptedAttempts++
					}
				}
			}
			for _, i := range victims {
				fresh := e.serve()
				replicasMu.Lock()
				replicas[i] = fresh
				replicasMu.Unlock()
			}
		case 4:
			replicasMu.Lock()
			victim := replicas[rand.IntN(len(replicas))]
			replicasMu.Unlock()
			note("SIGSTOP")
			victim.signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
			victim.signal(syscall.SIGCONT)
		case 2:
			note("postgres restart")
			require.NoError(t, cluster.Restart(ctx))
		default:
			target := targets[rand.IntN(len(targets))]
			var a *lostAck
			switch rand.IntN(3) {
			case 0:
				a = newLostAck("timeout", target, "timeout", "downstream", map[string]any{"timeout": 2000}, 1)
			case 1:
				a = newLostAck("latency", target, "latency", "upstream", map[string]any{"latency": 2000}, 1)
			default:
				a = resetBeforeCommit("reset", target, 1)
			}
			note("armed " + a.toxic + " at " + target)
			front.arm(a)
			lostAcks = append(lostAcks, a)
		}
	}
	for _, a := range lostAcks {
		front.disarm(a)
	}

	// Every intent ends, but those awaiting an approval nobody gave.
	settle, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	intents := map[string]*outbox.Intent{}
	for i := range keys {
		key := keyName(i)
		intent, err := client.Get(settle, "", key)
		if err != nil {
			require.ErrorIs(t, err, outbox.ErrNotFound)
			continue
		}
		if intent.State != outbox.StateAwaitingApproval {
			intent, err = client.Wait(settle, "", key)
			require.NoError(t, err, "intent %s never ended", key)
		}
		intents[key] = intent
	}
	// Final reads join the history, so that a state that moved after the
	// last client read is checked too.
	for key, intent := range intents {
		at := now()
		history = append(history, porcupine.Operation{ClientId: clients, Input: histInput{Op: "get", Key: key}, Call: at,
			Output: histOutput{Result: "ok", Status: 200, ID: intent.ID, State: string(intent.State)}, Return: at})
	}

	// The ledger.
	var anomalies []string
	infoEnqueue := map[string]bool{}
	opsBy := map[string]int{}
	for _, op := range history {
		in, out := op.Input.(histInput), op.Output.(histOutput)
		opsBy[in.Op+"/"+out.Result]++
		if in.Op == "enqueue" && out.Result == "info" {
			infoEnqueue[in.Key] = true
		}
	}
	standIns := map[string]interface {
		EffectsFor(string) int
		Effects() int
	}{"charge": sb.Stripe, "ticket": sb.Zendesk, "email": sb.SMTP}
	counted := map[string]int{}
	states := map[string]int{}
	for key, intent := range intents {
		states[string(intent.State)]++
		n := standIns[intent.Effect].EffectsFor(intent.ProviderKey)
		counted[intent.Effect] += n
		switch {
		case n > 1:
			anomalies = append(anomalies, fmt.Sprintf("%s (%s): %d effects", key, intent.Effect, n))
		case intent.State == outbox.StateSucceeded && intent.ResolvedBy == nil && intent.Effect != "email" && n != 1:
			anomalies = append(anomalies, fmt.Sprintf("%s (%s) succeeded with %d effects", key, intent.Effect, n))
		case intent.State == outbox.StateCancelled && n != 0:
			anomalies = append(anomalies, fmt.Sprintf("%s cancelled with %d effects", key, n))
		}
	}
	for effect, s := range standIns {
		if s.Effects() != counted[effect] {
			anomalies = append(anomalies, fmt.Sprintf("%s: %d effects at the provider, %d for intents", effect, s.Effects(), counted[effect]))
		}
	}

	res, info := porcupine.CheckOperationsVerbose(intentModel, history, time.Minute)
	var interrupted int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox.outbox_intent WHERE attempt > 1 OR maybe_sent`).Scan(&interrupted))
	landed, fired := 0, 0
	for _, f := range faults {
		if f.InFlight > 0 {
			landed++
		}
	}
	for _, a := range lostAcks {
		fired += int(a.fired.Load())
	}
	t.Logf("TestHistory: ops %d, keys %d, intents %d, states %v, faults %d (landed with client ops in flight %d, lost-ack toxics fired %d of %d), interrupted_attempts=%d, interrupted intents %d, info enqueues %d, linearizable %s, anomalies %d, ops %v",
		len(history), nkeys, len(intents), states, len(faults), landed, fired, len(lostAcks), interruptedAttempts, interrupted, len(infoEnqueue), res, len(anomalies), opsBy)
	if res != porcupine.Ok || len(anomalies) > 0 {
		dir := t.TempDir()
		if d := os.Getenv("HISTORY_DIR"); d != "" {
			dir = d
		}
		_ = porcupine.VisualizePath(intentModel, info, filepath.Join(dir, "history.html"))
		b, _ := json.MarshalIndent(map[string]any{"operations": history, "faults": faults, "anomalies": anomalies}, "", " ")
		_ = os.WriteFile(filepath.Join(dir, "history.json"), b, 0o600)
		for _, op := range history {
			t.Logf("op client %d [%d, %d] %s", op.ClientId, op.Call, op.Return, intentModel.DescribeOperation(op.Input, op.Output))
		}
		for _, f := range faults {
			t.Logf("fault %s at %d, %d operations in flight", f.Kind, f.At, f.InFlight)
		}
		t.Errorf("history: linearizable %s, anomalies %v; visualization %s, history %s (HISTORY_DIR keeps them)",
			res, anomalies, filepath.Join(dir, "history.html"), filepath.Join(dir, "history.json"))
	}
	// A fault lands in work under way when clients' operations were in
	// flight, or when it cut a worker's attempt: either is what the run
	// must show (which one a run gets depends on the machine's timing).
	require.Positive(t, landed+interruptedAttempts, "no fault landed while operations or attempts were under way: the run proves nothing")
	require.Positive(t, interrupted+fired, "no fault interrupted an attempt or a commit")
	require.Positive(t, interruptedAttempts, "no kill cut an attempt with its call in flight at the provider")
}

// urlPort is the port of a URL.
func urlPort(t *testing.T, raw string) int {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	return port
}

// connectedTo reports whether process pid holds an established TCP
// connection to port on this machine: its socket inodes (/proc/PID/fd)
// matched against the kernel's table of connections (/proc/net/tcp, tcp6).
func connectedTo(pid, port int) bool {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	want := fmt.Sprintf(":%04X", port)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// sl, local_address, rem_address, st (01: established), ...,
			// inode (the tenth).
			if len(f) >= 10 && strings.HasSuffix(f[2], want) && f[3] == "01" && inodes[f[9]] {
				return true
			}
		}
	}
	return false
}
