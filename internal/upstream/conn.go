package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/internal/effectfile"
)

// groupStopGrace is how long a stdio child's leftover process group has
// between SIGTERM and SIGKILL.
const groupStopGrace = 5 * time.Second

// Restart backoff of an upstream's child or session.
const (
	upstreamBackoffMin = time.Second
	upstreamBackoffMax = time.Minute
)

// errUnavailable is an upstream that could not be reached: no session, a
// child that would not start, every slot taken for connect_timeout.
var errUnavailable = errors.New("upstream unavailable")

// ConnConfig configures the connections to one upstream.
type ConnConfig struct {
	// Logger receives the children's stderr (at debug, scrubbed) and the
	// connections' events. Defaults to a logger that discards.
	Logger *slog.Logger
	// Version is outbox's version, sent in the MCP handshake. Defaults to
	// "dev".
	Version string
}

// Conn holds the sessions to one upstream: `processes` stdio
// children or HTTP sessions, each taking at most `max_in_flight` calls at
// once, connected on first use and reconnected with backoff.
type Conn struct {
	u       *Upstream
	client  *mcp.Client
	logger  *slog.Logger
	members []*member
	next    atomic.Uint64
	closed  atomic.Bool
	// onListChanged is called when a session says its tools changed.
	onListChanged func()
	// stderrTail keeps the children's last stderr lines.
	stderrTail tail
	// onSession, when set, is given every new session (a child started or
	// restarted, an HTTP session opened anew) before it takes a call: the
	// catalog compares its listing with the pin. An error closes it.
	onSession func(ctx context.Context, s *mcp.ClientSession) error
	// withdrawn, when set, is why the upstream tool name takes no call
	// (its withdrawal's code), or "": checked once a session is taken,
	// since taking it may have found the tool drifted.
	withdrawn func(tool string) string
}

// member is one child or HTTP session.
type member struct {
	conn  *Conn
	slots chan struct{}

	mu       sync.Mutex
	session  *mcp.ClientSession
	gone     bool // the session ended: the next call connects anew
	failures int
	retryAt  time.Time
	// lastErr is the last connect failure, scrubbed of secrets.
	lastErr string
	tempDir string
	// cmd is the member's latest child (stdio), whose process group is
	// stopped once the child is gone.
	cmd *exec.Cmd
}

// NewConn returns the connections to u; nothing connects until a
// call needs it.
func NewConn(u *Upstream, config *ConnConfig) *Conn {
	cfg := ConnConfig{}
	if config != nil {
		cfg = *config
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	c := &Conn{u: u, logger: cfg.Logger.With(slog.String("upstream", u.name))}
	c.client = mcp.NewClient(&mcp.Implementation{Name: "outbox", Version: cfg.Version}, &mcp.ClientOptions{
		// outbox never answers an upstream's request for input (sampling,
		// elicitation, roots): a recorded call runs without a person, and
		// an answer made up here would be a guess.
		Capabilities:   tasksCapabilities(),
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			if f := c.onListChanged; f != nil {
				f()
			}
		},
	})
	// Registered on a client of our own making, with names the SDK does
	// not take: cannot fail.
	_ = addTaskMethods(c.client)
	for range u.processes {
		c.members = append(c.members, &member{conn: c, slots: make(chan struct{}, u.maxInFlight)})
	}
	return c
}

// Upstream is the declaration the connections serve.
func (c *Conn) Upstream() *Upstream { return c.u }

// acquire takes a slot of a member and its session, connecting it if need
// be, within the upstream's connect_timeout; release gives the slot back.
// An error is errUnavailable: nothing was sent.
func (c *Conn) acquire(ctx context.Context) (*member, *mcp.ClientSession, func(), error) {
	if c.closed.Load() {
		return nil, nil, nil, fmt.Errorf("%w: outboxd is stopping", errUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, c.u.connectTimeout)
	defer cancel()
	start := int(c.next.Add(1))
	var m *member
	// A free slot of any member first; else wait on the next in turn.
	for i := range c.members {
		cand := c.members[(start+i)%len(c.members)]
		select {
		case cand.slots <- struct{}{}:
			m = cand
		default:
		}
		if m != nil {
			break
		}
	}
	if m == nil {
		m = c.members[start%len(c.members)]
		select {
		case m.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, nil, nil, fmt.Errorf("%w: every call slot stayed taken for %s", errUnavailable, c.u.connectTimeout)
		}
	}
	release := func() { <-m.slots }
	s, err := m.connect(ctx)
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	return m, s, release, nil
}

// reservation is a slot and session taken before an attempt's claim
// (Reserve), or why none could be.
type reservation struct {
	conn *Conn
	m    *member
	s    *mcp.ClientSession
	err  error
}

type reservationKey struct{}

// reserve takes a slot and a session for the calls made under the
// returned context (an attempt's look-up, then its call), until release.
func (c *Conn) reserve(ctx context.Context) (context.Context, func()) {
	m, s, release, err := c.acquire(ctx)
	if err != nil {
		release = func() {}
	}
	return context.WithValue(ctx, reservationKey{}, &reservation{conn: c, m: m, s: s, err: err}), release
}

// take returns the slot and session reserved in ctx for c, or acquires
// them.
func (c *Conn) take(ctx context.Context) (*member, *mcp.ClientSession, func(), error) {
	if r, ok := ctx.Value(reservationKey{}).(*reservation); ok && r.conn == c {
		if r.err != nil {
			return nil, nil, nil, r.err
		}
		// The reservation's owner releases the slot.
		return r.m, r.s, func() {}, nil
	}
	return c.acquire(ctx)
}

// connect returns the member's session, starting it if there is none (and
// the backoff allows).
func (m *member) connect(ctx context.Context) (*mcp.ClientSession, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.session != nil && !m.gone {
		return m.session, nil
	}
	if wait := time.Until(m.retryAt); wait > 0 {
		// The last failure is named: a call refused in the backoff tells
		// as much as the one that failed.
		return nil, fmt.Errorf("%w: reconnecting in %s after %d failures, the last: %s", errUnavailable, wait.Round(time.Millisecond), m.failures, m.lastErr)
	}
	s, err := m.conn.dial(ctx, m)
	if err == nil && m.conn.onSession != nil {
		// A restarted child may be another version of the server: its
		// tools are compared with the pin before any call reaches it.
		if err = m.conn.onSession(ctx, s); err != nil {
			_ = s.Close()
		}
	}
	if err != nil {
		m.failures++
		backoff := min(upstreamBackoffMin<<min(m.failures-1, 6), upstreamBackoffMax)
		m.retryAt = time.Now().Add(backoff)
		m.lastErr = m.conn.u.scrub(err.Error())
		return nil, fmt.Errorf("%w: %s", errUnavailable, m.lastErr)
	}
	m.failures, m.retryAt = 0, time.Time{}
	m.session, m.gone = s, false
	cmd := m.cmd
	go func() {
		_ = s.Wait()
		m.mu.Lock()
		if m.session == s {
			m.gone = true
		}
		m.mu.Unlock()
		if cmd != nil && cmd.Process != nil {
			// The child is gone: so are its own children.
			stopGroup(cmd.Process.Pid, groupStopGrace)
		}
	}()
	return s, nil
}

// dial starts a child (stdio) or opens an HTTP session.
func (c *Conn) dial(ctx context.Context, m *member) (s *mcp.ClientSession, err error) {
	var transport mcp.Transport
	if c.u.Stdio() {
		cmd, err := c.command(m)
		if err != nil {
			return nil, err
		}
		transport = taskTransport{&probeTransport{Transport: &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}}}
	} else {
		endpoint, _, err := c.u.url.RenderString(&effectfile.RenderCtx{Env: c.u.resolved})
		if err != nil {
			return nil, err
		}
		watch := &standaloneWatch{m: m}
		defer func() {
			if s != nil {
				watch.session.Store(s)
			}
		}()
		transport = &mcp.StreamableClientTransport{
			Endpoint:   endpoint,
			HTTPClient: &http.Client{Transport: &upstreamRoundTripper{u: c.u, base: http.DefaultTransport, standalone: watch}, CheckRedirect: noRedirects},
			// A resumed stream could replay nothing the caller needs, and a
			// retried POST would be a second call: the outcome is classified
			// instead.
			MaxRetries:           -1,
			DisableStandaloneSSE: false,
		}
	}
	return c.client.Connect(ctx, transport, nil)
}

// standaloneWatch keeps an HTTP session's calls alive when the upstream
// ends the session's standalone SSE stream (the GET that carries its
// notifications). The SDK, allowed no reconnection (a resumed stream could
// replay nothing a call needs), would fail the whole session, and with it
// every call in flight, though each call has its own response stream that
// decides it. Instead the ended stream is held open towards the SDK, and
// the session is retired: the next call opens a new one, with a new
// stream, and the old one is closed once its calls had their time.
type standaloneWatch struct {
	m       *member
	session atomic.Pointer[mcp.ClientSession]
	ended   atomic.Bool
}

// end retires the watched session, once.
func (w *standaloneWatch) end() {
	s := w.session.Load()
	if s == nil || w.ended.Swap(true) {
		return
	}
	w.m.mu.Lock()
	if w.m.session == s {
		w.m.gone = true
	}
	w.m.mu.Unlock()
	// An attempt that reserved the session before the stream ended may
	// still look up and then call on it: each within the timeout.
	u := w.m.conn.u
	time.AfterFunc(2*u.timeout+u.connectTimeout+pingTimeout, func() { _ = s.Close() })
}

// heldBody is a standalone stream's body that, once the upstream ended it,
// blocks until the session closes (the request's context ends) rather
// than tell the SDK the stream ended.
type heldBody struct {
	io.ReadCloser
	ctx   context.Context
	watch *standaloneWatch
}

func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == nil || n > 0 || b.ctx.Err() != nil {
		return n, err
	}
	b.watch.end()
	<-b.ctx.Done()
	return 0, err
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// tasksCapabilities are outbox's capabilities as an upstream's client: the
// tasks extension, and nothing that asks for a person's input (sampling,
// elicitation, roots): a recorded call runs without a person, and an
// answer made up here would be a guess.
func tasksCapabilities() *mcp.ClientCapabilities {
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(TasksExtension, nil)
	return caps
}

// command builds a child's command: argv as declared, the environment from
// inherit and env only, in dir or a private temporary directory, in its own
// process group, killed when outboxd dies.
func (c *Conn) command(m *member) (*exec.Cmd, error) {
	path, err := exec.LookPath(c.u.command[0])
	if err != nil {
		return nil, fmt.Errorf("command %s: %w", c.u.command[0], err)
	}
	cmd := exec.Command(path, c.u.command[1:]...) //nolint:gosec // argv is the operator's file, never an argument of a call
	// Never nil: exec.Cmd's nil Env is the parent's whole environment.
	cmd.Env = []string{}
	for _, name := range c.u.inherit {
		if v, ok := os.LookupEnv(name); ok {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	for _, e := range c.u.env {
		v, _, err := e.value.RenderString(&effectfile.RenderCtx{Env: c.u.resolved})
		if err != nil {
			return nil, err
		}
		cmd.Env = append(cmd.Env, e.name+"="+v)
	}
	cmd.Dir = c.u.dir
	if cmd.Dir == "" {
		if m.tempDir == "" {
			if m.tempDir, err = os.MkdirTemp("", "outbox-upstream-"+c.u.name+"-"); err != nil {
				return nil, err
			}
		}
		cmd.Dir = m.tempDir
	}
	cmd.SysProcAttr = childProcAttr()
	m.cmd = cmd
	cmd.Stderr = &stderrLines{c: c}
	return cmd, nil
}

// stderrLineLogged is how much of a child's stderr line is logged;
// stderrLineMax how much is kept to scrub it. The rest of a longer line is
// read and dropped.
const (
	stderrLineLogged = 16 << 10
	stderrLineMax    = stderrLineLogged + 1<<10
)

// logStderr logs a child's stderr at debug, scrubbed, until r ends. It
// reads every byte whatever the lines' length: a child whose stderr is no
// longer read blocks on its next write, and answers no call.
func (c *Conn) logStderr(r io.Reader) {
	w := &stderrLines{c: c}
	buf := make([]byte, 4<<10)
	for {
		n, err := r.Read(buf)
		_, _ = w.Write(buf[:n]) // never fails
		if err != nil {
			w.flush()
			return
		}
	}
}

// stderrLines takes a child's stderr as exec copies it (cmd.Stderr), line
// by line. A writer rather than a pipe read beside the child: exec's Wait,
// which the SDK calls when the child ends, waits for the copy to finish,
// so the last lines of a child that exits at once are never lost (a
// StderrPipe is closed by Wait, possibly before it was read).
type stderrLines struct {
	c    *Conn
	mu   sync.Mutex
	line []byte
	cut  bool
}

func (w *stderrLines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		chunk, rest, found := bytes.Cut(p, []byte{'\n'})
		if room := stderrLineMax - len(w.line); room > 0 {
			w.line = append(w.line, chunk[:min(len(chunk), room)]...)
		}
		w.cut = w.cut || len(w.line) >= stderrLineMax
		if !found {
			break
		}
		w.flushLocked()
		p = rest
	}
	return n, nil
}

// flush ends the last line, when the stream ended without a newline.
func (w *stderrLines) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
}

func (w *stderrLines) flushLocked() {
	if text := strings.TrimRight(string(w.line), "\r"); text != "" {
		// Scrubbed before the cut, so that no secret's beginning is left
		// at the end of a cut line.
		text = w.c.u.scrub(text)
		if w.cut || len(text) > stderrLineLogged {
			text = strings.ToValidUTF8(text[:min(len(text), stderrLineLogged)], "") + "..."
		}
		w.c.stderrTail.add(text)
		w.c.logger.Debug("upstream stderr", slog.String("line", text))
	}
	w.line, w.cut = w.line[:0], false
}

// stderrTailLines is how many of a child's last stderr lines are kept, for
// an error that the handshake's own does not explain.
const stderrTailLines = 10

// tail keeps the last lines of a child's stderr, scrubbed, each capped.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) add(line string) {
	if len(line) > 1024 {
		line = strings.ToValidUTF8(line[:1024], "") + "..."
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > stderrTailLines {
		t.lines = t.lines[len(t.lines)-stderrTailLines:]
	}
}

// StderrTail returns the last lines the upstream's children wrote to
// stderr (scrubbed), complete once Close returned (exec's Wait waits for
// the copy): what `outboxd effects pin` shows of a child that failed to
// start.
func (c *Conn) StderrTail() []string {
	c.stderrTail.mu.Lock()
	defer c.stderrTail.mu.Unlock()
	return slices.Clone(c.stderrTail.lines)
}

// Close ends every session: a child's stdin is closed, then SIGTERM after
// 5 s and SIGKILL after 5 s more (mcp.CommandTransport).
func (c *Conn) Close() {
	c.closed.Store(true)
	var wg sync.WaitGroup
	for _, m := range c.members {
		m.mu.Lock()
		s, dir, cmd := m.session, m.tempDir, m.cmd
		m.session, m.gone = nil, true
		m.mu.Unlock()
		wg.Go(func() {
			if s != nil {
				_ = s.Close()
			}
			if cmd != nil && cmd.Process != nil {
				// The child ended (stdin closed, then SIGTERM, then
				// SIGKILL); its process group goes with it.
				stopGroup(cmd.Process.Pid, groupStopGrace)
			}
			if dir != "" {
				_ = os.RemoveAll(dir)
			}
		})
	}
	wg.Wait()
}

// ListTools lists every tool of the upstream (all pages).
func (c *Conn) ListTools(ctx context.Context) (server string, tools []*mcp.Tool, err error) {
	_, s, release, err := c.acquire(ctx)
	if err != nil {
		return "", nil, err
	}
	defer release()
	if init := s.InitializeResult(); init != nil && init.ServerInfo != nil {
		server = strings.TrimSpace(init.ServerInfo.Name + " " + init.ServerInfo.Version)
	}
	tools, err = c.listSession(ctx, s)
	return server, tools, err
}

// listSession lists every tool of the upstream (all pages) over s.
func (c *Conn) listSession(ctx context.Context, s *mcp.ClientSession) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("upstream %s: listing tools: %s", c.u.name, c.u.scrub(err.Error()))
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// callProbe records, for one call over HTTP, what the transport saw: the
// classification needs to know whether the request was written and what
// status answered it, which the SDK's errors do not carry.
type callProbe struct {
	mu         sync.Mutex
	attempted  bool
	written    bool
	status     int
	retryAfter time.Duration
}

type probeKey struct{}

func withProbe(ctx context.Context) (context.Context, *callProbe) {
	p := &callProbe{}
	return context.WithValue(ctx, probeKey{}, p), p
}

// probeTransport is a stdio transport whose connection fills the call's
// probe: whether the call's request was written to the child.
type probeTransport struct{ mcp.Transport }

func (t *probeTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &probeConn{Connection: conn}, nil
}

type probeConn struct{ mcp.Connection }

// Write writes msg, and records in the call's probe, for the call's
// request, that it was attempted and, once the write succeeded, written:
// a call refused before (a session closed, a broken pipe) sent nothing.
func (c *probeConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	p, _ := ctx.Value(probeKey{}).(*callProbe)
	if req, ok := msg.(*jsonrpc.Request); !ok || !req.IsCall() || p == nil {
		return c.Connection.Write(ctx, msg)
	}
	p.mu.Lock()
	mine := !p.attempted
	p.attempted = true
	p.mu.Unlock()
	err := c.Connection.Write(ctx, msg)
	if mine && err == nil {
		p.mu.Lock()
		p.written = true
		p.mu.Unlock()
	}
	return err
}

// upstreamRoundTripper sets the declared headers and fills the call's
// probe.
type upstreamRoundTripper struct {
	u    *Upstream
	base http.RoundTripper
	// standalone watches the session's standalone SSE stream; nil for
	// none.
	standalone *standaloneWatch
}

func (t *upstreamRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for _, h := range t.u.headers {
		v, _, err := h.value.RenderString(&effectfile.RenderCtx{Env: t.u.resolved})
		if err != nil {
			return nil, err
		}
		req.Header.Set(h.name, v)
	}
	p, _ := req.Context().Value(probeKey{}).(*callProbe)
	if p != nil && req.Method == http.MethodPost {
		// The call's own POST is the first under its context; a later one
		// (the notification cancelling it, sent under the same context) is
		// another request, whose answer says nothing of the call's.
		p.mu.Lock()
		mine := !p.attempted
		p.attempted = true
		p.mu.Unlock()
		if !mine {
			p = nil
		}
	}
	if p != nil && req.Method == http.MethodPost {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(info httptrace.WroteRequestInfo) {
				if info.Err == nil {
					p.mu.Lock()
					p.written = true
					p.mu.Unlock()
				}
			},
		}))
	}
	resp, err := t.base.RoundTrip(req)
	if t.standalone != nil && err == nil && req.Method == http.MethodGet && req.Header.Get("Last-Event-ID") == "" &&
		resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &heldBody{ReadCloser: resp.Body, ctx: req.Context(), watch: t.standalone}
	}
	if slot, ok := req.Context().Value(taskSlotKey{}).(*taskSlot); ok && err == nil && req.Method == http.MethodPost {
		resp.Body = sniffBody(resp.Body, resp.Header.Get("Content-Type"), slot)
	}
	if p != nil && resp != nil && req.Method == http.MethodPost {
		p.mu.Lock()
		p.status = resp.StatusCode
		if s := resp.Header.Get("Retry-After"); s != "" {
			if n, err := strconv.Atoi(s); err == nil && n >= 0 {
				p.retryAfter = time.Duration(n) * time.Second
			} else if at, err := http.ParseTime(s); err == nil {
				p.retryAfter = max(time.Until(at), 0)
			}
		}
		p.mu.Unlock()
	}
	return resp, err
}

// scrub replaces the upstream's secrets in s, and its URL as rendered by
// the URL's template.
func (u *Upstream) scrub(s string) string {
	for _, endpoint := range u.endpoints {
		s = strings.ReplaceAll(s, endpoint, u.url.Raw)
	}
	for _, secret := range u.secrets {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	return s
}
