package mcpserver

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ListenTransport wraps t, the transport srv (a server New returned) is
// to be connected over (stdio: outboxd mcp), so that the
// subscriptions/listen requests that ask for task status notifications are
// answered by outbox instead of the SDK, as ListenHandler answers them over
// HTTP: their notifications are written on the same connection, each
// stamped with the listen request's id in _meta, between the SDK's own
// messages (a connection's writes are safe for concurrent use). A
// notifications/cancelled naming a listen's request id stops it. Every
// other message reaches the SDK unchanged. For a server New did not
// return, t is returned as it is.
func ListenTransport(srv *mcp.Server, t mcp.Transport) mcp.Transport {
	s := serverOf(srv)
	if s == nil {
		return t
	}
	return &listenTransport{s: s, inner: t}
}

type listenTransport struct {
	s     *server
	inner mcp.Transport
}

func (t *listenTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	// The listens live as long as the connection, whatever becomes of
	// the context it was made with.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &listenConn{Connection: conn, s: t.s, ctx: lctx, cancel: cancel, listens: map[jsonrpc.ID]*runningListen{}}, nil
}

// listenConn is a connection whose task listens outbox serves.
type listenConn struct {
	mcp.Connection
	s *server

	// ctx ends when the connection does, and with it every listen.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	listens map[jsonrpc.ID]*runningListen
	wg      sync.WaitGroup
}

// runningListen is one listen a connection serves.
type runningListen struct{ cancel context.CancelFunc }

// Read returns the next message for the SDK, after serving the task
// listens and their cancellations that came first.
func (c *listenConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return nil, err
		}
		if id, ok := cancelledID(msg); ok && c.stop(id) {
			continue
		}
		req := parseTaskListen(msg)
		if req == nil {
			return msg, nil
		}
		c.serve(req)
	}
}

// serve runs the listen req until it ends, is cancelled, or the connection
// closes.
func (c *listenConn) serve(req *taskListenRequest) {
	ctx, cancel := context.WithCancel(c.ctx)
	running := &runningListen{cancel: cancel}
	c.mu.Lock()
	if earlier := c.listens[req.id]; earlier != nil {
		// A request id reused while its listen runs: the newer wins.
		earlier.cancel()
	}
	c.listens[req.id] = running
	c.mu.Unlock()
	c.wg.Go(func() {
		defer func() {
			c.mu.Lock()
			// Only this listen's entry, not a newer one of the same id.
			if c.listens[req.id] == running {
				delete(c.listens, req.id)
			}
			c.mu.Unlock()
			cancel()
		}()
		l, jerr := c.s.openTaskListen(ctx, req)
		if jerr != nil {
			_ = c.Write(ctx, errorResponse(req.id, jerr)) // a closed connection has no one to tell
			return
		}
		if err := l.run(ctx, connStream{c.Connection, ctx}); err != nil && ctx.Err() == nil {
			c.s.logger.DebugContext(ctx, "task listen ended", "error", err)
		}
	})
}

// stop ends the listen of request id; false when none runs.
func (c *listenConn) stop(id jsonrpc.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	running, ok := c.listens[id]
	if ok {
		running.cancel()
	}
	return ok
}

// Close ends every listen and the connection.
func (c *listenConn) Close() error {
	c.cancel()
	err := c.Connection.Close()
	c.wg.Wait()
	return err
}

// connStream writes a listen's messages on a connection.
type connStream struct {
	conn mcp.Connection
	ctx  context.Context
}

func (s connStream) send(msg jsonrpc.Message) error { return s.conn.Write(s.ctx, msg) }

// idle writes nothing: a pipe needs no sign of life.
func (connStream) idle() error { return nil }
