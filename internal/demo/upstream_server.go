package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/internal/sandbox/mcpupstream"
	"github.com/outbox-dev/outbox/internal/upstream"
)

// upstreamFile declares the demo's MCP server: a notes server whose
// create_note makes a note per call (at most once: it can neither dedupe
// nor, here, be asked), on loopback.
const upstreamFile = `upstreams:
  demo:
    description: The demo's notes server.
    url: "{env.DEMO_NOTES_URL}"
    wait: 5s
    include: [create_note, list_notes]
`

// UpstreamConfig is how the demo pins and binds its MCP server, as outboxd
// effects pin and serve would.
type UpstreamConfig struct {
	// ObserveCallFunc counts a call of an upstream's tool by outcome, as
	// serve's outbox_upstream_calls_total does. Defaults to counting
	// nothing.
	ObserveCallFunc func(upstream, tool, outcome string)

	// Taken are the names the upstream's tools may not take (the built-in
	// effects and outbox's own tools), with what holds each. Defaults to
	// none.
	Taken map[string]string

	// Version is outboxd's version, which the upstream is told. Defaults
	// to empty.
	Version string
}

// upstreamServer is the demo's MCP server, running in this process over
// streamable HTTP, and outbox's side of it.
type upstreamServer struct {
	url     string
	state   string
	catalog *upstream.Catalog
	stop    func()
}

// startUpstreamServer starts the notes server on loopback, pins it as
// outboxd effects pin would, and binds it: its recorded tool is an effect
// to register.
func startUpstreamServer(ctx context.Context, config *UpstreamConfig, logger *slog.Logger) (*upstreamServer, error) {
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
	u := &upstreamServer{url: "http://" + ln.Addr().String() + mcpupstream.PathMCP, state: state}
	u.stop = func() {
		if u.catalog != nil {
			u.catalog.Close()
		}
		cancel()
		_ = os.RemoveAll(state)
	}
	file, err := upstream.ParseFile("demo upstream", []byte(upstreamFile), &declared.Config{
		LookupEnvFunc: func(name string) (string, bool) { return u.url, name == "DEMO_NOTES_URL" },
		LoopbackOnly:  true,
	})
	if err == nil {
		u.catalog, err = pinAndBind(ctx, file, config, logger)
	}
	if err != nil {
		u.stop()
		return nil, fmt.Errorf("error starting the demo's MCP server: %w", err)
	}
	return u, nil
}

// pinAndBind pins the file's upstreams in memory and binds them.
func pinAndBind(ctx context.Context, file *upstream.File, config *UpstreamConfig, logger *slog.Logger) (*upstream.Catalog, error) {
	lock := &upstream.Lock{Version: upstream.LockVersion, Upstreams: map[string]*upstream.LockedUpstream{}}
	for _, up := range file.Upstreams {
		conn := upstream.NewConn(up, &upstream.ConnConfig{Version: config.Version})
		server, listed, err := conn.ListTools(ctx)
		conn.Close()
		if err != nil {
			return nil, err
		}
		entry, problems := up.Pin(server, listed, &upstream.PinOpts{Taken: config.Taken})
		if len(problems) > 0 {
			return nil, fmt.Errorf("%s", problems[0])
		}
		lock.Upstreams[up.Name()] = entry
	}
	return upstream.Bind(file, lock, &upstream.BindConfig{Logger: logger, Version: config.Version,
		ObserveCallFunc: config.ObserveCallFunc})
}

// register adds the upstream's recorded tools to registry.
func (u *upstreamServer) register(registry *effects.Registry) error {
	for _, t := range u.catalog.Recorded {
		if err := registry.Register(t); err != nil {
			return err
		}
	}
	return nil
}

// notes counts the notes the server made.
func (u *upstreamServer) notes() int {
	c, _ := mcpupstream.Counts(u.state)
	return c["create_note"]
}
