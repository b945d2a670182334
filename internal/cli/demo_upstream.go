package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/internal/fixture/mcpupstream"

	"github.com/outbox-dev/outbox/internal/upstream"

	"github.com/outbox-dev/outbox/internal/effectset"

	"github.com/outbox-dev/outbox/internal/metrics"
)

// demoUpstreamFile declares the demo's MCP server: a notes server whose
// create_note makes a note per call (at most once: it can neither dedupe
// nor, here, be asked), on loopback.
const demoUpstreamFile = `upstreams:
  demo:
    description: The demo's notes server.
    url: "{env.DEMO_NOTES_URL}"
    wait: 5s
    include: [create_note, list_notes]
`

// demoUpstream is the demo's MCP server, running in this process over
// streamable HTTP, and outbox's side of it.
type demoUpstream struct {
	url     string
	state   string
	catalog *upstream.Catalog
	stop    func()
}

// startDemoUpstream starts the notes server on loopback, pins it as
// outboxd effects pin would, and binds it: its recorded tool is an effect
// to register.
func startDemoUpstream(ctx context.Context, logger *slog.Logger, m *metrics.Effects) (*demoUpstream, error) {
	state, err := os.MkdirTemp("", "outbox-demo-notes-")
	if err != nil {
		return nil, err
	}
	srv, err := mcpupstream.New(&mcpupstream.Config{StateDir: state})
	if err != nil {
		_ = os.RemoveAll(state)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = os.RemoveAll(state)
		return nil, err
	}
	srvCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() { _ = srv.Serve(srvCtx, ln) }()
	u := &demoUpstream{url: "http://" + ln.Addr().String() + mcpupstream.PathMCP, state: state}
	u.stop = func() {
		if u.catalog != nil {
			u.catalog.Close()
		}
		cancel()
		_ = os.RemoveAll(state)
	}
	file, err := upstream.ParseFile("demo upstream", []byte(demoUpstreamFile), &declared.Config{
		LookupEnv:    func(name string) (string, bool) { return u.url, name == "DEMO_NOTES_URL" },
		LoopbackOnly: true,
	})
	if err == nil {
		u.catalog, err = pinAndBind(ctx, file, logger, m)
	}
	if err != nil {
		u.stop()
		return nil, fmt.Errorf("error starting the demo's MCP server: %w", err)
	}
	return u, nil
}

// pinAndBind pins the file's upstreams in memory and binds them.
func pinAndBind(ctx context.Context, file *upstream.File, logger *slog.Logger, m *metrics.Effects) (*upstream.Catalog, error) {
	lock := &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{}}
	for _, up := range file.Upstreams {
		conn := upstream.NewConn(up, &upstream.ConnConfig{Version: version()})
		server, listed, err := conn.ListTools(ctx)
		conn.Close()
		if err != nil {
			return nil, err
		}
		entry, problems := up.Pin(server, listed, &upstream.PinOpts{Taken: effectset.TakenNames()})
		if len(problems) > 0 {
			return nil, fmt.Errorf("%s", problems[0])
		}
		lock.Upstreams[up.Name()] = entry
	}
	return upstream.Bind(file, lock, &upstream.BindConfig{Logger: logger, Version: version(),
		ObserveCallFunc: func(u, t, o string) { m.UpstreamCalls.WithLabelValues(u, t, o).Inc() }})
}

// register adds the upstream's recorded tools to registry.
func (u *demoUpstream) register(registry *effects.Registry) error {
	for _, t := range u.catalog.Recorded {
		if err := registry.Register(t); err != nil {
			return err
		}
	}
	return nil
}

// notes counts the notes the server made.
func (u *demoUpstream) notes() int {
	c, _ := mcpupstream.Counts(u.state)
	return c["create_note"]
}
