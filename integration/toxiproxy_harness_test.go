package integration

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// toxiServer is an in-process Toxiproxy: proxies between outboxd and
// PostgreSQL or a provider stand-in, whose toxics a test adds and removes.
type toxiServer struct {
	t      testing.TB
	server *toxiproxy.ApiServer
	n      atomic.Int64
}

func newToxiServer(t testing.TB) *toxiServer {
	t.Helper()
	s := &toxiServer{t: t, server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
	t.Cleanup(func() { _ = s.server.Collection.Clear() })
	return s
}

// proxy starts a proxy to upstream (host:port, TCP) on a free loopback port.
func (s *toxiServer) proxy(upstream string) (*toxiproxy.Proxy, error) {
	p := toxiproxy.NewProxy(s.server, fmt.Sprintf("p%d", s.n.Add(1)), "127.0.0.1:0", upstream)
	if err := s.server.Collection.Add(p, true); err != nil {
		return nil, err
	}
	return p, nil
}

// remove stops a proxy and closes its connections.
func (s *toxiServer) remove(p *toxiproxy.Proxy) { _ = s.server.Collection.Remove(p.Name) }

// addToxic adds a toxic to every connection of p, present and future.
func addToxic(p *toxiproxy.Proxy, name, typ, stream string, attrs map[string]any) error {
	b, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "attributes": attrs})
	if err != nil {
		return err
	}
	_, err = p.Toxics.AddToxicJson(bytes.NewReader(b))
	return err
}

// providerProxy puts a proxy in front of a stand-in's URL (http://host:port)
// and returns the URL to give outboxd instead.
func (s *toxiServer) providerProxy(rawURL string) (*toxiproxy.Proxy, string) {
	s.t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(s.t, err)
	p, err := s.proxy(u.Host)
	require.NoError(s.t, err)
	u.Host = p.Listen
	return p, u.String()
}

// A lostAck is a fault armed on the PostgreSQL connections of outboxd: the
// next transaction whose statements include match gets toxic (on stream,
// with attrs) on its connection's own proxy, added while the connection is
// idle just before the bytes that commit it are forwarded. For an explicit
// transaction that is its COMMIT; for a statement in an implicit one (a
// pipeline, or a statement on the pool) the Sync that ends it: PostgreSQL
// flushes no reply to a pipeline before its Sync, so the reply that the
// toxic meets is the one that follows the commit.
type lostAck struct {
	name   string
	match  string
	toxic  string
	stream string
	attrs  map[string]any
	// left is how many transactions it may still hit.
	left atomic.Int64
	// fired counts the hits; firedAt holds their moments.
	fired   atomic.Int64
	mu      sync.Mutex
	firedAt []time.Time
	hit     chan struct{}
}

// resetBeforeCommit loses the reply of the next commit of a transaction
// that ran match, the row committed: reset_peer on the downstream side.
func resetBeforeCommit(name, match string, n int) *lostAck {
	return newLostAck(name, match, "reset_peer", "downstream", map[string]any{"timeout": 0}, n)
}

func newLostAck(name, match, toxic, stream string, attrs map[string]any, n int) *lostAck {
	a := &lostAck{name: name, match: match, toxic: toxic, stream: stream, attrs: attrs, hit: make(chan struct{}, 1024)}
	a.left.Store(int64(n))
	return a
}

// pgFront is what outboxd takes for PostgreSQL: a listener that gives every
// connection a Toxiproxy proxy of its own (a toxic applies to every
// connection of its proxy, and a fault must hit its victim only) and reads
// the client's side of the protocol, to arm lostAcks at the right moment.
type pgFront struct {
	t        testing.TB
	toxi     *toxiServer
	upstream string
	listener net.Listener

	mu    sync.Mutex
	armed []*lostAck
	conns int
}

// newPGFront listens on a loopback port for connections to upstream
// (host:port of a PostgreSQL server, TCP).
func newPGFront(t testing.TB, toxi *toxiServer, upstream string) *pgFront {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &pgFront{t: t, toxi: toxi, upstream: upstream, listener: l}
	t.Cleanup(func() { _ = l.Close() })
	go f.accept()
	return f
}

// url is databaseURL with its host replaced by the front's.
func (f *pgFront) url(databaseURL string) string {
	f.t.Helper()
	u, err := url.Parse(databaseURL)
	require.NoError(f.t, err)
	u.Host = f.listener.Addr().String()
	q := u.Query()
	// A Unix socket's directory and port would win over the host.
	q.Del("host")
	q.Del("port")
	u.RawQuery = q.Encode()
	return u.String()
}

// connCount returns how many connections the front has proxied.
func (f *pgFront) connCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns
}

// arm makes a fault apply to the coming transactions.
func (f *pgFront) arm(a *lostAck) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = append(f.armed, a)
}

// disarm removes a fault: it fires no more.
func (f *pgFront) disarm(a *lostAck) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, b := range f.armed {
		if b == a {
			f.armed = append(f.armed[:i], f.armed[i+1:]...)
			return
		}
	}
}

// matching returns the armed fault whose statement sql is, if any has hits left.
func (f *pgFront) matching(sql string) *lostAck {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.armed {
		if a.left.Load() > 0 && strings.Contains(sql, a.match) {
			return a
		}
	}
	return nil
}

func (f *pgFront) accept() {
	for {
		c, err := f.listener.Accept()
		if err != nil {
			return
		}
		go f.serveConn(c.(*net.TCPConn))
	}
}

// serveConn splices one client connection to PostgreSQL through a proxy of
// its own, reading what the client sends.
func (f *pgFront) serveConn(client *net.TCPConn) {
	p, err := f.toxi.proxy(f.upstream)
	if err != nil {
		_ = client.Close()
		return
	}
	defer f.toxi.remove(p)
	server, err := net.Dial("tcp", p.Listen)
	if err != nil {
		_ = client.Close()
		return
	}
	f.mu.Lock()
	f.conns++
	f.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The server's side ended (a reset toxic, a restart): the client
		// sees its connection reset, as it would the server's.
		_, _ = io.Copy(client, server)
		_ = client.SetLinger(0)
		_ = client.Close()
	}()
	s := &pgSniffer{front: f, proxy: p, stmts: map[string]string{}}
	buf := make([]byte, 32*1024)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			// The fault goes on before the bytes that commit are
			// forwarded: the connection is idle, waiting for them.
			s.feed(buf[:n])
			if _, werr := server.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	// A half close lets what a latency toxic holds reach the server: a
	// commit that lands after its client gave up.
	_ = server.(*net.TCPConn).CloseWrite()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	_ = server.Close()
}

// pgSniffer follows the frontend side of one PostgreSQL connection: which
// statement each prepared name stands for, whether a transaction is open,
// and whether the current one ran an armed fault's statement.
type pgSniffer struct {
	front   *pgFront
	proxy   *toxiproxy.Proxy
	pending []byte
	started bool
	stmts   map[string]string
	inTx    bool
	target  *lostAck
}

func (s *pgSniffer) feed(b []byte) {
	s.pending = append(s.pending, b...)
	for {
		if !s.started {
			// Startup, SSL and cancel requests carry no type byte.
			if len(s.pending) < 8 {
				return
			}
			n := int(binary.BigEndian.Uint32(s.pending))
			if len(s.pending) < n {
				return
			}
			code := binary.BigEndian.Uint32(s.pending[4:])
			// SSLRequest and GSSENCRequest are followed by a startup.
			s.started = code != 80877103 && code != 80877104
			s.pending = s.pending[n:]
			continue
		}
		if len(s.pending) < 5 {
			return
		}
		n := int(binary.BigEndian.Uint32(s.pending[1:]))
		if len(s.pending) < 1+n {
			return
		}
		s.message(s.pending[0], s.pending[5:1+n])
		s.pending = s.pending[1+n:]
	}
}

func cstring(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

func (s *pgSniffer) message(typ byte, body []byte) {
	switch typ {
	case 'Q':
		sql, _ := cstring(body)
		lower := strings.ToLower(strings.TrimSpace(sql))
		switch {
		case strings.HasPrefix(lower, "begin"), strings.HasPrefix(lower, "start transaction"):
			s.inTx, s.target = true, nil
		case lower == "commit", lower == "end":
			if s.inTx && s.target != nil {
				s.fire(s.target)
			}
			s.inTx, s.target = false, nil
		case strings.HasPrefix(lower, "rollback"):
			s.inTx, s.target = false, nil
		default:
			if a := s.front.matching(sql); a != nil {
				if s.inTx {
					s.target = a
				} else {
					// One simple query is its own transaction.
					s.fire(a)
				}
			}
		}
	case 'P':
		name, rest := cstring(body)
		sql, _ := cstring(rest)
		s.stmts[name] = sql
	case 'B':
		_, rest := cstring(body)
		name, _ := cstring(rest)
		if a := s.front.matching(s.stmts[name]); a != nil {
			s.target = a
		}
	case 'S':
		if !s.inTx && s.target != nil {
			s.fire(s.target)
			s.target = nil
		}
	}
}

// fire adds the fault's toxic to this connection's proxy.
func (s *pgSniffer) fire(a *lostAck) {
	if a.left.Add(-1) < 0 {
		return
	}
	if err := addToxic(s.proxy, a.name, a.toxic, a.stream, a.attrs); err != nil {
		return
	}
	a.fired.Add(1)
	a.mu.Lock()
	a.firedAt = append(a.firedAt, time.Now())
	a.mu.Unlock()
	select {
	case a.hit <- struct{}{}:
	default:
	}
}

// unixRelay listens on a loopback TCP port and relays every connection to
// a Unix socket: Toxiproxy dials TCP only, and a throwaway cluster listens
// on its socket only.
func unixRelay(t testing.TB, socket string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("unix", socket)
				if err != nil {
					return
				}
				defer u.Close()
				go func() {
					_, _ = io.Copy(u, c)
					_ = u.(*net.UnixConn).CloseWrite()
				}()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return l.Addr().String()
}
