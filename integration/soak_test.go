package integration

import (
	"bufio"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"math"
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

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

var (
	soakDuration = flag.Duration("soak.duration", 0, "how long TestSoak drives load and faults (make soak: 30m); 0 skips it")
	soakRate     = flag.Float64("soak.rate", 0, "TestSoak's enqueues per second; 0 is half of a short measured maximum")
	// A shorter pace lets a short run go through every kind of fault.
	soakFaultEvery = flag.Duration("soak.fault-every", time.Minute, "the pace of TestSoak's faults, which rotate over four kinds")
)

const (
	// soakSampleEvery is the pace of TestSoak's samples.
	soakSampleEvery = 10 * time.Second
	// soakMeasureFor is how long the maximum rate is measured for.
	soakMeasureFor = 20 * time.Second
)

// TestSoak runs two serve replicas for -soak.duration at a steady rate of
// HTTP enqueues, with a fault every minute (-soak.fault-every), and samples what would show a
// leak: each replica's RSS, goroutines, open files and PostgreSQL
// connections, and the dead tuples of the intent and job tables. It fails on
// anomalies (an acknowledged intent lost, not terminal, not succeeded, or
// whose effect the stand-in made other than once) and prints each series'
// least-squares slope per hour, which is read, not asserted: growth beyond
// noise is a judgment over a plot (the CSV, in SOAK_OUT when set).
//
// Replica 0 lives the whole run, so its series are a process's; its
// PostgreSQL connections go through the lost-ack front. Replica 1 is the one
// killed and restarted, so its series restart with it.
//
//	SOAK_OUT=/tmp/soak.csv go test ./integration -run TestSoak -soak.duration 30m -timeout 45m -v
func TestSoak(t *testing.T) {
	if *soakDuration <= 0 {
		t.Skip("a soak runs only with -soak.duration (make soak)")
	}
	// Not parallel: the soak's rate is measured on this machine, and other
	// tests would skew it.
	ctx := context.Background()
	toxi := newToxiServer(t)
	// A deduplicating webhook endpoint: its intents go in batches (the
	// default), and one in ten intents is a ticket, reconcilable.
	p := newProviderEnv(t, true)
	// The lost-ack front dials PostgreSQL over TCP: a throwaway cluster
	// listens on its Unix socket only.
	host := mustHost(t, testdb.URL(t))
	require.NotEmpty(t, host, "TestSoak needs TEST_DATABASE_URL with a TCP host")
	front := newPGFront(t, toxi, host)
	s := &soak{t: t, p: p, appPrefix: fmt.Sprintf("soak-%d-", os.Getpid()), acked: map[string]string{}}
	// Each replica names its connections, so that pg_stat_activity counts
	// them and pg_terminate_backend hits serve's only, not this test's pool
	// nor other tests' backends.
	s.urls[0] = front.url(withAppName(t, testdb.URL(t), s.appName(0)))
	s.urls[1] = withAppName(t, testdb.URL(t), s.appName(1))
	for i := range s.replicas {
		s.start(i)
	}

	rate := *soakRate
	if rate <= 0 {
		maxRate := s.measureMax(ctx)
		rate = maxRate / 2
		t.Logf("measured maximum %.0f intents/s over %s; soaking at %.0f/s", maxRate, soakMeasureFor, rate)
	}

	samples := s.sampleEvery(ctx, soakSampleEvery)
	loadDone := make(chan struct{})
	stopLoad := make(chan struct{})
	var sent atomic.Int64
	go func() {
		defer close(loadDone)
		s.load(ctx, "soak", rate, stopLoad, &sent)
	}()

	start := time.Now()
	var faults []string
	backlogs := 0
	for n := 0; time.Since(start)+*soakFaultEvery <= *soakDuration; n++ {
		time.Sleep(time.Until(start.Add(time.Duration(n+1) * *soakFaultEvery)))
		backlog := s.backlog(ctx)
		if backlog > 0 {
			backlogs++
		}
		faults = append(faults, fmt.Sprintf("%s (backlog %d)", s.fault(ctx, n, front), backlog))
		t.Logf("%s: fault %d: %s", time.Since(start).Round(time.Second), n+1, faults[len(faults)-1])
	}
	time.Sleep(time.Until(start.Add(*soakDuration)))
	close(stopLoad)
	<-loadDone
	loadFor := time.Since(start)
	series := samples.stop()
	s.writeCSV(series)

	a := s.anomalies(ctx)
	var interrupted, rescued int
	require.NoError(t, p.pool.QueryRow(ctx, `SELECT count(*) FROM `+p.table("outbox_intent")+` WHERE attempt > 1 OR maybe_sent`).Scan(&interrupted))
	require.NoError(t, p.pool.QueryRow(ctx, `SELECT count(*) FROM `+p.table("river_job")+` WHERE attempt > 1`).Scan(&rescued))

	// Dead tuples grow without bound when the server does not vacuum: say
	// so on the line, since the slope then measures the server.
	var autovacuum string
	require.NoError(t, p.pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum))

	var slopes []string
	for _, name := range series.names {
		first, last, slope, ok := series.trend(name)
		if ok {
			slopes = append(slopes, fmt.Sprintf("%s %.4g→%.4g (%+.4g/h)", name, first, last, slope))
		}
	}
	t.Logf("TestSoak: %s at %.0f intents/s (sent %d, %.0f/s achieved), faults %d (%d with work under way; interrupted intents %d, retried jobs %d, lost acks fired %d), "+
		"intents %d acknowledged, anomalies %d (lost %d, not terminal %d, not succeeded %d, effects missing %d, duplicated %d), samples %d, autovacuum %s; %s",
		loadFor.Round(time.Second), rate, sent.Load(), float64(sent.Load())/loadFor.Seconds(), len(faults), backlogs, interrupted, rescued, s.lostAcksFired,
		a.acked, a.total(), a.lost, a.notTerminal, a.notSucceeded, a.missing, a.duplicated, len(series.rows), autovacuum, strings.Join(slopes, ", "))
	for _, ex := range a.examples {
		t.Log("anomaly: " + ex)
	}
	require.Zero(t, a.total(), "anomalies")
	if len(faults) > 0 {
		require.Positive(t, backlogs, "no fault met work under way: the run proves nothing")
	}
}

// soak is TestSoak's state: its replicas, and the intents serve
// acknowledged.
type soak struct {
	t         *testing.T
	p         *providerEnv
	appPrefix string
	urls      [2]string

	mu       sync.Mutex
	replicas [2]*process
	// acked maps the key of each acknowledged intent to its effect.
	acked map[string]string

	lostAcksFired int
}

func (s *soak) appName(i int) string { return fmt.Sprintf("%sr%d", s.appPrefix, i) }

// withAppName adds application_name to a connection URL.
func withAppName(t *testing.T, raw, name string) string {
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

func (s *soak) start(i int) {
	p := s.p.serve("DATABASE_URL=" + s.urls[i])
	s.mu.Lock()
	s.replicas[i] = p
	s.mu.Unlock()
}

func (s *soak) replica(i int) *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replicas[i]
}

// fault makes the n-th fault, in rotation, and says what it did.
func (s *soak) fault(ctx context.Context, n int, front *pgFront) string {
	switch n % 4 {
	case 0:
		// A crash: attempts and batches die with their leases, and
		// River's rescuer or the intent's lookup takes them over.
		s.replica(1).kill9()
		s.start(1)
		return "kill -9 of replica 1, restarted"
	case 1:
		// A pause (a stalled VM, a GC storm): leases run on while the
		// process holds them, its HTTP clients time out and retry on the
		// other replica.
		i := (n / 4) % 2
		r := s.replica(i)
		r.signal(syscall.SIGSTOP)
		time.Sleep(4 * time.Second)
		r.signal(syscall.SIGCONT)
		return fmt.Sprintf("SIGSTOP of replica %d for 4s", i)
	case 2:
		var terminated int
		err := s.p.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name LIKE $1) t`, s.appPrefix+"%").Scan(&terminated)
		require.NoError(s.t, err)
		return fmt.Sprintf("pg_terminate_backend of %d serve connections", terminated)
	default:
		// The outcome of an attempt commits, its reply never reaches
		// replica 0: the retry must find the intent terminal.
		a := resetBeforeCommit(fmt.Sprintf("soak-finish-%d", n), sqlMatchFinish, 1)
		front.arm(a)
		defer front.disarm(a)
		select {
		case <-a.hit:
			s.lostAcksFired++
			return "lost ack of a finish commit on replica 0"
		case <-time.After(30 * time.Second):
			return "lost ack armed on replica 0, not fired within 30s"
		}
	}
}

// load enqueues over HTTP at rate per second (unbounded when rate is 0)
// until stop closes, from 32 agents; an agent whose call fails retries the
// same key on the other replica until it is acknowledged, as an agent
// should.
func (s *soak) load(ctx context.Context, prefix string, rate float64, stop <-chan struct{}, sent *atomic.Int64) {
	const agents = 32
	keys := make(chan int64)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: agents}}
	for range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range keys {
				key := fmt.Sprintf("%s-%07d", prefix, n)
				effect := "webhook"
				if n%10 == 0 {
					effect = "ticket"
				}
				deadline := time.Now().Add(2 * time.Minute)
				for try := int(n); ; try++ {
					ans := agentEnqueue(ctx, client, s.replica(try%2).addr, key, effect, effectArgs[effect])
					if ans.ok() {
						s.mu.Lock()
						s.acked[key] = effect
						s.mu.Unlock()
						break
					}
					if time.Now().After(deadline) {
						s.t.Errorf("enqueue %s never acknowledged: %+v", key, ans)
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	// Paced by the clock rather than by ticks, so that a late tick makes
	// up its keys and the rate holds on average.
	start := time.Now()
	var n int64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-tick.C:
		}
		due := int64(math.MaxInt64)
		if rate > 0 {
			due = int64(time.Since(start).Seconds() * rate)
		}
		for ; n < due; n++ {
			select {
			case keys <- n:
				sent.Add(1)
			case <-stop:
				break loop
			}
		}
	}
	close(keys)
	wg.Wait()
}

// measureMax drives the replicas as fast as the agents go for
// soakMeasureFor, and returns the intents per second from the first
// enqueue until every one of them is terminal: enqueues and dispatch
// together, as the soak loads them.
func (s *soak) measureMax(ctx context.Context) float64 {
	stop := make(chan struct{})
	var sent atomic.Int64
	start := time.Now()
	time.AfterFunc(soakMeasureFor, func() { close(stop) })
	s.load(ctx, "max", 0, stop, &sent)
	require.Eventually(s.t, func() bool { return s.backlog(ctx) == 0 }, 5*time.Minute, 100*time.Millisecond)
	return float64(sent.Load()) / time.Since(start).Seconds()
}

// backlog counts the intents not yet terminal.
func (s *soak) backlog(ctx context.Context) int {
	var n int
	require.NoError(s.t, s.p.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.p.table("outbox_intent")+
		` WHERE state NOT IN ('succeeded', 'failed', 'cancelled', 'unknown')`).Scan(&n))
	return n
}

// soakSeries are the samples, one row per sample, in the order of names;
// NaN where a sample could not be taken (a replica paused or restarting).
type soakSeries struct {
	names []string
	at    []float64 // seconds since the first sample
	rows  [][]float64
}

// trend returns a series' first and last values and its least-squares
// slope per hour.
func (ss *soakSeries) trend(name string) (first, last, slope float64, ok bool) {
	col := -1
	for i, n := range ss.names {
		if n == name {
			col = i
		}
	}
	var xs, ys []float64
	for i, row := range ss.rows {
		if !math.IsNaN(row[col]) {
			xs = append(xs, ss.at[i]/3600)
			ys = append(ys, row[col])
		}
	}
	if len(xs) < 2 {
		return 0, 0, 0, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(xs))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	return ys[0], ys[len(ys)-1], sxy / sxx, true
}

type soakSampler struct {
	done   chan struct{}
	result chan *soakSeries
}

func (ss *soakSampler) stop() *soakSeries {
	close(ss.done)
	return <-ss.result
}

// sampleEvery samples in the background until stop.
func (s *soak) sampleEvery(ctx context.Context, every time.Duration) *soakSampler {
	ss := &soakSampler{done: make(chan struct{}), result: make(chan *soakSeries, 1)}
	series := &soakSeries{names: []string{
		"r0_rss_mb", "r0_goroutines", "r0_open_fds", "r0_pg_conns",
		"r1_rss_mb", "r1_goroutines", "r1_open_fds", "r1_pg_conns",
		"intent_dead_tup", "job_dead_tup", "backlog",
	}}
	client := &http.Client{Timeout: 2 * time.Second}
	go func() {
		start := time.Now()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			series.at = append(series.at, time.Since(start).Seconds())
			series.rows = append(series.rows, s.sample(ctx, client))
			select {
			case <-ss.done:
				ss.result <- series
				return
			case <-tick.C:
			}
		}
	}()
	return ss
}

// sample takes one row of soakSeries; errors leave NaN, since a paused or
// restarting replica is part of the run.
func (s *soak) sample(ctx context.Context, client *http.Client) []float64 {
	row := make([]float64, 0, 11)
	conns := map[string]float64{}
	rows, err := s.p.pool.Query(ctx, `SELECT application_name, count(*) FROM pg_stat_activity WHERE application_name LIKE $1 GROUP BY 1`, s.appPrefix+"%")
	if err == nil {
		for rows.Next() {
			var name string
			var n float64
			if rows.Scan(&name, &n) == nil {
				conns[name] = n
			}
		}
		rows.Close()
	}
	for i := range s.replicas {
		r := s.replica(i)
		metrics := scrape(client, "http://"+r.addr+"/metrics")
		row = append(row, vmRSS(r.cmd.Process.Pid)/(1<<20), metrics["go_goroutines"], metrics["process_open_fds"], conns[s.appName(i)])
	}
	dead := func(table string) float64 {
		var n float64
		if s.p.pool.QueryRow(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2`, s.p.schema, table).Scan(&n) != nil {
			return math.NaN()
		}
		return n
	}
	row = append(row, dead("outbox_intent"), dead("river_job"), float64(s.backlog(ctx)))
	return row
}

// scrape reads the unlabelled samples of a Prometheus text exposition;
// missing ones read as NaN.
func scrape(client *http.Client, metricsURL string) map[string]float64 {
	m := map[string]float64{"go_goroutines": math.NaN(), "process_open_fds": math.NaN()}
	resp, err := client.Get(metricsURL)
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if _, want := m[name]; ok && want {
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				m[name] = v
			}
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return m
}

// vmRSS reads a process's resident set size in bytes, NaN when it is gone.
func vmRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return math.NaN()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return math.NaN()
}

// writeCSV writes the samples to SOAK_OUT, or to the test's temporary
// directory, for plotting.
func (s *soak) writeCSV(series *soakSeries) {
	path := os.Getenv("SOAK_OUT")
	if path == "" {
		path = filepath.Join(s.t.TempDir(), "soak.csv")
	}
	f, err := os.Create(path)
	require.NoError(s.t, err)
	defer f.Close()
	w := csv.NewWriter(f)
	require.NoError(s.t, w.Write(append([]string{"t_s"}, series.names...)))
	for i, row := range series.rows {
		rec := []string{strconv.FormatFloat(series.at[i], 'f', 1, 64)}
		for _, v := range row {
			if math.IsNaN(v) {
				rec = append(rec, "")
			} else {
				rec = append(rec, strconv.FormatFloat(v, 'f', -1, 64))
			}
		}
		require.NoError(s.t, w.Write(rec))
	}
	w.Flush()
	require.NoError(s.t, w.Error())
	s.t.Logf("samples in %s", path)
}

// soakAnomalies are what the soak must not see.
type soakAnomalies struct {
	acked                                                int
	lost, notTerminal, notSucceeded, missing, duplicated int
	examples                                             []string
}

func (a *soakAnomalies) total() int {
	return a.lost + a.notTerminal + a.notSucceeded + a.missing + a.duplicated
}

func (a *soakAnomalies) note(format string, args ...any) {
	if len(a.examples) < 20 {
		a.examples = append(a.examples, fmt.Sprintf(format, args...))
	}
}

// anomalies waits for every acknowledged intent to be terminal, then
// checks each against the database and its stand-in. With a deduplicated
// and a reconcilable effect, no fault here makes an intent unknown by
// design: every one must succeed, its effect made once.
func (s *soak) anomalies(ctx context.Context) *soakAnomalies {
	// A backlog left by a saturated machine drains for as long as it
	// shrinks; an intent stuck for good stops it within two minutes.
	least, progressAt := s.backlog(ctx), time.Now()
	for least > 0 && time.Since(progressAt) < 2*time.Minute {
		time.Sleep(time.Second)
		if n := s.backlog(ctx); n < least {
			least, progressAt = n, time.Now()
		}
	}
	type row struct {
		state       outbox.State
		providerKey string
	}
	found := map[string]row{}
	rows, err := s.p.pool.Query(ctx, `SELECT key, state, provider_key FROM `+s.p.table("outbox_intent"))
	require.NoError(s.t, err)
	for rows.Next() {
		var key string
		var r row
		require.NoError(s.t, rows.Scan(&key, &r.state, &r.providerKey))
		found[key] = r
	}
	require.NoError(s.t, rows.Err())

	s.mu.Lock()
	defer s.mu.Unlock()
	a := &soakAnomalies{acked: len(s.acked)}
	for key, effect := range s.acked {
		r, ok := found[key]
		switch {
		case !ok:
			a.lost++
			a.note("%s: acknowledged, not in the table", key)
			continue
		case r.state == outbox.StateSucceeded:
		case r.state == outbox.StateFailed || r.state == outbox.StateCancelled || r.state == outbox.StateUnknown:
			a.notSucceeded++
			a.note("%s (%s): %s", key, effect, r.state)
		default:
			a.notTerminal++
			a.note("%s (%s): still %s", key, effect, r.state)
		}
		switch n := s.p.standIn(effect).EffectsFor(r.providerKey); {
		case n == 0 && r.state == outbox.StateSucceeded:
			a.missing++
			a.note("%s (%s): succeeded, no effect at the stand-in", key, effect)
		case n > 1:
			a.duplicated++
			a.note("%s (%s): %d effects at the stand-in", key, effect, n)
		}
	}
	return a
}
