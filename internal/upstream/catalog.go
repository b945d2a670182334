package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/effectfile"
)

// BindConfig configures Bind.
type BindConfig struct {
	// Logger receives warnings (withdrawn tools, drift) and the upstreams'
	// stderr. Defaults to a logger that discards.
	Logger *slog.Logger
	// LockPath names the lock in errors. Required when there are upstreams.
	LockPath string
	// EffectsPath names the effects file in errors.
	EffectsPath string
	// ObserveCallFunc, when set, is told of every upstream call's outcome,
	// for outbox_upstream_calls_total.
	ObserveCallFunc func(upstream, tool, outcome string)
	// ObserveDriftFunc, when set, is told of every tool found drifted, for
	// outbox_upstream_drift_total.
	ObserveDriftFunc func(upstream, tool string)
	// Version is outbox's version for the MCP handshake.
	Version string
}

// Catalog is the upstreams of an effects file bound to their lock: the
// recorded tools (effects), the pass-through tools, and the connections.
type Catalog struct {
	// Conns are the upstreams' connections.
	Conns []*Conn
	// Recorded are the recorded tools: effects to register.
	Recorded []*Tool
	// Passthrough are the tools forwarded live.
	Passthrough []*PassthroughTool
	// Warnings are the tools withdrawn at pin, one line each.
	Warnings []string

	// lookups are the tools pinned for look-ups only: not mirrored, but
	// withdrawn on drift, so that a look-up never reads a changed tool.
	lookups []*PassthroughTool

	// holds are the upstreams whose queue this replica does not work
	// (Agree).
	holds     holds
	stopAgree context.CancelFunc

	logger *slog.Logger
	locked map[string]*LockedUpstream
	drift  func(upstream, tool string)
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// ErrLockMissing is returned by Bind for upstreams without a lock, or a
// lock written for other declarations.
var ErrLockMissing = errors.New("the upstreams are not pinned")

// Bind binds the upstreams of f to lock: nothing connects (connections
// open on first use). A file with upstreams and no lock, or a lock that
// does not match the file's upstreams, is an error naming the command to
// run.
func Bind(f *File, lock *Lock, config *BindConfig) (*Catalog, error) {
	cfg := BindConfig{}
	if config != nil {
		cfg = *config
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Catalog{logger: cfg.Logger, locked: map[string]*LockedUpstream{}, drift: cfg.ObserveDriftFunc}
	if f == nil || len(f.Upstreams) == 0 {
		return c, nil
	}
	pin := fmt.Sprintf("run outboxd effects pin %s", cfg.EffectsPath)
	if lock == nil {
		return nil, fmt.Errorf("%w: %s has upstreams but no lock %s: %s", ErrLockMissing, cfg.EffectsPath, cfg.LockPath, pin)
	}
	for _, u := range f.Upstreams {
		lu := lock.Upstreams[u.name]
		switch {
		case lu == nil:
			return nil, fmt.Errorf("%w: upstream %s is not in the lock %s: %s", ErrLockMissing, u.name, cfg.LockPath, pin)
		case lu.DeclarationSHA256 != u.sha256:
			what := "the lock was pinned for another declaration of it"
			if changed := u.changedSince(lu.FieldSHA256); changed != "" {
				what = "changed since it was pinned: " + changed
			}
			return nil, fmt.Errorf("%w: upstream %s in %s %s (lock %s): %s", ErrLockMissing, u.name, cfg.EffectsPath, what, cfg.LockPath, pin)
		}
		c.locked[u.name] = lu
		conn := NewConn(u, &ConnConfig{Logger: cfg.Logger, Version: cfg.Version})
		conn.onSession = func(ctx context.Context, s *mcp.ClientSession) error {
			listed, err := conn.listSession(ctx, s)
			if err != nil {
				return err
			}
			c.apply(ctx, conn, listed)
			return nil
		}
		conn.withdrawn = func(tool string) string { return c.withdrawnTool(conn, tool) }
		c.Conns = append(c.Conns, conn)
		for _, lt := range lu.Tools {
			switch lt.Class {
			case ClassWithdrawn:
				c.Warnings = append(c.Warnings, fmt.Sprintf("upstream %s: tool %s withdrawn: %s", u.name, lt.Name, lt.Withdrawn))
			case ClassPassthrough:
				c.Passthrough = append(c.Passthrough, &PassthroughTool{conn: conn, locked: lt, observe: cfg.ObserveCallFunc, schema: u.cleanSchema(lt.InputSchema)})
			case ClassLookup:
				c.lookups = append(c.lookups, &PassthroughTool{conn: conn, locked: lt})
			case ClassRecorded:
				t, err := newTool(conn, lt, u.toolDecl(lt.Name))
				if err != nil {
					return nil, fmt.Errorf("upstream %s: tool %s: %w (%s)", u.name, lt.Name, err, pin)
				}
				t.observe = cfg.ObserveCallFunc
				c.Recorded = append(c.Recorded, t)
			}
		}
	}
	return c, nil
}

// newTool builds a recorded tool from its pin and declaration.
func newTool(conn *Conn, lt *LockedTool, decl *ToolDecl) (*Tool, error) {
	// The lock's text was cleaned when pinned; cleaned again for a lock
	// written by hand or by an older version.
	t := &Tool{conn: conn, decl: decl, locked: lt, name: lt.Mirrored, guarantee: lt.Guarantee, description: conn.u.cleanListing(lt.Description)}
	if decl != nil && decl.description != "" {
		t.description = cleanText(decl.description)
	}
	if t.description == "" {
		t.description = "Calls " + lt.Name + " of " + conn.u.name + "."
	}
	schema := conn.u.cleanSchema(lt.InputSchema)
	if decl != nil && decl.args != nil {
		schema, _ = effectfile.MarshalJSON(effectfile.Plain(decl.args))
	}
	var m map[string]any
	if err := json.Unmarshal(schema, &m); err != nil || m == nil {
		return nil, errors.New("its pinned input schema is not an object")
	}
	if decl != nil && decl.keyArg != "" {
		// outbox sets key_arg: the mirrored schema has no such property.
		if props, ok := m["properties"].(map[string]any); ok {
			delete(props, decl.keyArg)
		}
		if req, ok := m["required"].([]any); ok {
			m["required"] = slices.DeleteFunc(slices.Clone(req), func(v any) bool { return v == decl.keyArg })
		}
	}
	if m["type"] == nil {
		m["type"] = "object"
	}
	mirrored, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	compiled, err := compileSchema(mirrored)
	if err != nil {
		return nil, fmt.Errorf("its pinned input schema does not compile: %w", err)
	}
	t.schema, t.schemaJSON = compiled, mirrored
	hashed := map[string]any{
		"transport":    conn.u.transportSHA256,
		"tool":         lt.Name,
		"input_schema": json.RawMessage(lt.InputSchema),
		"guarantee":    lt.Guarantee,
	}
	if decl != nil {
		hashed["declaration"] = effectfile.Plain(withoutDescriptions(decl.declarations))
	}
	if t.sha256, err = canonicalSHA256(hashed); err != nil {
		return nil, err
	}
	return t, nil
}

// Start watches the upstreams' listings until ctx ends: at connect, on
// notifications/tools/list_changed and every refresh, each listing is
// compared with the lock, and a tool that differs from its pin, or is
// missing, is withdrawn until pinned again. An unreachable upstream never
// stops anything: its calls wait not_sent.
func (c *Catalog) Start(ctx context.Context) {
	ctx, c.stop = context.WithCancel(ctx)
	for _, conn := range c.Conns {
		kick := make(chan struct{}, 1)
		conn.onListChanged = func() {
			select {
			case kick <- struct{}{}:
			default:
			}
		}
		c.wg.Go(func() {
			for {
				c.compare(ctx, conn)
				t := time.NewTimer(conn.u.refresh)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				case <-kick:
					t.Stop()
				}
			}
		})
	}
}

// compare lists one upstream's tools and withdraws or restores each of
// its pinned tools. A new session is compared as it opens (Bind), before
// it takes a call.
func (c *Catalog) compare(ctx context.Context, conn *Conn) {
	ctx, cancel := context.WithTimeout(ctx, conn.u.connectTimeout+conn.u.timeout)
	defer cancel()
	_, listed, err := conn.ListTools(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.logger.WarnContext(ctx, "upstream listing failed; its calls wait", slog.String("upstream", conn.u.name), slog.String("error", conn.u.scrub(err.Error())))
		}
		return
	}
	c.apply(ctx, conn, listed)
}

// apply withdraws or restores each pinned tool of one upstream by its
// listing.
func (c *Catalog) apply(ctx context.Context, conn *Conn, listed []*mcp.Tool) {
	live := map[string]*mcp.Tool{}
	for _, t := range listed {
		live[t.Name] = t
	}
	check := func(lt *LockedTool) string {
		t, ok := live[lt.Name]
		switch {
		case !ok:
			return CodeUpstreamToolMissing
		case listedSHA256(t) != lt.ListedSHA256:
			return CodeUpstreamDrift
		}
		return ""
	}
	for _, t := range c.Recorded {
		if t.conn != conn {
			continue
		}
		code := check(t.locked)
		if code != "" && t.Withdrawn() != code {
			c.logger.WarnContext(ctx, "upstream tool withdrawn: it differs from its pin; its intents wait until outboxd effects pin",
				slog.String("upstream", conn.u.name), slog.String("tool", t.locked.Name), slog.String("code", code))
			if c.drift != nil {
				c.drift(conn.u.name, t.locked.Name)
			}
		}
		t.Withdraw(code)
	}
	for _, p := range slices.Concat(c.Passthrough, c.lookups) {
		if p.conn != conn {
			continue
		}
		code := check(p.locked)
		if code != "" && p.Withdrawn() != code && c.drift != nil {
			c.drift(conn.u.name, p.locked.Name)
		}
		p.withdraw(code)
	}
	// Unpinned tools are never listed: they are not in the lock.
}

// withdrawnTool is why the upstream tool name of conn takes no call, or
// "": a recorded or pass-through tool withdrawn by the last listing.
func (c *Catalog) withdrawnTool(conn *Conn, name string) string {
	for _, t := range c.Recorded {
		if t.conn == conn && t.locked.Name == name {
			return t.Withdrawn()
		}
	}
	for _, p := range slices.Concat(c.Passthrough, c.lookups) {
		if p.conn == conn && p.locked.Name == name {
			return p.Withdrawn()
		}
	}
	return ""
}

// Close stops watching and ends every connection (children get their
// stdin closed, then SIGTERM, then SIGKILL).
func (c *Catalog) Close() {
	if c.stop != nil {
		c.stop()
	}
	if c.stopAgree != nil {
		c.stopAgree()
	}
	c.wg.Wait()
	var wg sync.WaitGroup
	for _, conn := range c.Conns {
		wg.Go(conn.Close)
	}
	wg.Wait()
}

// PassthroughTool is an upstream tool forwarded live: read-only by its
// declaration or the upstream's hint, never recorded.
type PassthroughTool struct {
	conn      *Conn
	locked    *LockedTool
	observe   func(upstream, tool, outcome string)
	withdrawn atomic.Pointer[string]
	// schema is the pinned input schema, cleaned for the model.
	schema json.RawMessage
}

// Name is the mirrored name.
func (p *PassthroughTool) Name() string { return p.locked.Mirrored }

// UpstreamName is the upstream the tool belongs to.
func (p *PassthroughTool) UpstreamName() string { return p.conn.u.name }

// Description is the upstream's, cleaned and capped when pinned, or the
// declaration's.
func (p *PassthroughTool) Description() string {
	if d := p.conn.u.toolDecl(p.locked.Name); d != nil && d.description != "" {
		return cleanText(d.description)
	}
	return p.conn.u.cleanListing(p.locked.Description)
}

// InputSchema is the upstream's, its descriptions and titles cleaned and
// capped.
func (p *PassthroughTool) InputSchema() json.RawMessage { return p.schema }

// Annotations are the upstream's, the title cleaned and capped.
func (p *PassthroughTool) Annotations() *mcp.ToolAnnotations {
	return p.conn.u.cleanAnnotations(p.locked.Annotations)
}

// Namespaces are the namespaces that see the tool; empty means all.
func (p *PassthroughTool) Namespaces() []string { return p.conn.u.Namespaces() }

func (p *PassthroughTool) withdraw(code string) { p.withdrawn.Store(&code) }

// Withdrawn is why the tool is withdrawn, or "".
func (p *PassthroughTool) Withdrawn() string {
	if c := p.withdrawn.Load(); c != nil {
		return *c
	}
	return ""
}

// Call forwards a call with the caller's deadline (at most the upstream's
// timeout) and cancellation. The upstream's result is returned as it is; a
// failure to reach it or a JSON-RPC error is an error.
func (p *PassthroughTool) Call(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
	outcome := "passthrough"
	defer func() {
		if p.observe != nil {
			p.observe(p.conn.u.name, p.locked.Name, outcome)
		}
	}()
	if code := p.Withdrawn(); code != "" {
		outcome = "withdrawn"
		return nil, fmt.Errorf("upstream %s tool %s is withdrawn (%s) until pinned again", p.conn.u.name, p.locked.Name, code)
	}
	var m map[string]any
	if len(args) > 0 {
		if err := json.Unmarshal(args, &m); err != nil {
			outcome = "invalid_args"
			return nil, fmt.Errorf("arguments: %w", err)
		}
	}
	res, rpcErr, err := p.conn.call(ctx, p.locked.Name, m, effects.GuaranteeDeduplicated)
	switch {
	case err != nil:
		outcome = "error"
		return nil, err
	case rpcErr != nil:
		outcome = "error"
		return nil, fmt.Errorf("upstream %s answered JSON-RPC error %d: %s", p.conn.u.name, rpcErr.Code, p.conn.u.scrub(rpcErr.Message))
	}
	if res.IsError {
		outcome = "is_error"
	}
	return res, nil
}
