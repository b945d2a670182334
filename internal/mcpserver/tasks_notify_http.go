package mcpserver

import (
	"bytes"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ListenHandlerOpts are ListenHandler's optional settings.
type ListenHandlerOpts struct {
	// MaxRequestBodyBytes bounds the listen request's body, as the SDK's
	// handler bounds every request's; a larger body is handed to the SDK,
	// which refuses it. Defaults to ListenBodyMaxDefault.
	MaxRequestBodyBytes int64
}

// ListenBodyMaxDefault is ListenHandlerOpts.MaxRequestBodyBytes's default.
const ListenBodyMaxDefault = 1 << 20

// listenWriteWait is how long one write on a listen stream may take: the
// stream outlives the HTTP server's write timeout, so each write gets its
// own deadline.
const listenWriteWait = 30 * time.Second

// protocolTasksListen is the first protocol version with subscriptions/listen.
const protocolTasksListen = "2026-07-28"

// ListenHandler answers, as an event stream, the subscriptions/listen
// requests that ask for task status notifications of a server New returned
// (getServer's answer, as for the SDK's handler); it hands every other
// request to next, the SDK's stateless streamable HTTP handler of the same
// servers, unchanged. A listen request that the SDK would refuse at the
// transport (a missing or mismatched header, a body too large, a Host that
// does not match a loopback listener) is handed to next as well, so that it
// is refused the same way. The bearer token, when next is behind
// auth.RequireBearerToken, must be checked before ListenHandler: its
// TokenInfo in the request's context names the caller.
func ListenHandler(next http.Handler, getServer func(*http.Request) *mcp.Server, opts *ListenHandlerOpts) http.Handler {
	maxBody := int64(ListenBodyMaxDefault)
	if opts != nil && opts.MaxRequestBodyBytes > 0 {
		maxBody = opts.MaxRequestBodyBytes
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only a 2026-07-28 listen request, which names its method in
		// Mcp-Method, is read here: every other body goes to the SDK
		// unread.
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Method") != methodSubscriptionsListen || !listenTransportOK(r) {
			next.ServeHTTP(w, r)
			return
		}
		s := serverOf(getServer(r))
		if s == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		// Whatever was read is put back for the SDK.
		r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		if err != nil || int64(len(body)) > maxBody {
			next.ServeHTTP(w, r)
			return
		}
		msg, err := jsonrpc.DecodeMessage(body)
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		req := parseTaskListen(msg)
		if req == nil || req.meta[mcp.MetaKeyProtocolVersion] != r.Header.Get("Mcp-Protocol-Version") {
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		l, jerr := s.openTaskListen(ctx, req)
		if jerr != nil {
			writeListenError(w, req.id, jerr)
			return
		}
		w.Header().Set("Cache-Control", "no-cache, no-transform")
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Connection", "keep-alive")
		w.WriteHeader(http.StatusOK)
		stream := &sseStream{w: w, rc: http.NewResponseController(w)}
		if err := l.run(ctx, stream); err != nil && ctx.Err() == nil {
			s.logger.DebugContext(ctx, "task listen stream ended", "error", err)
		}
	})
}

// listenTransportOK reports whether a listen request passes the checks the
// SDK's handler makes before it reads a body: protocol version, media
// types, and its protection against DNS rebinding.
func listenTransportOK(r *http.Request) bool {
	if version := r.Header.Get("Mcp-Protocol-Version"); version < protocolTasksListen {
		return false
	}
	if mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mediaType != "application/json" {
		return false
	}
	if jsonOK, streamOK := accepts(r.Header.Values("Accept")); !jsonOK || !streamOK {
		return false
	}
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil {
		if isLoopback(local.String()) && !isLoopback(r.Host) {
			return false
		}
	}
	return true
}

// accepts reports whether Accept values admit JSON and an event stream,
// as the SDK reads them.
func accepts(values []string) (jsonOK, streamOK bool) {
	for _, value := range values {
		for raw := range strings.SplitSeq(value, ",") {
			base, _, _ := strings.Cut(raw, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}

// isLoopback reports whether addr (host, or host and port) is a loopback
// address or localhost.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// writeListenError answers a listen request with a JSON-RPC error, with
// the HTTP status 2026-07-28 gives its code (SEP-2575: 400 for invalid
// params and a missing capability).
func writeListenError(w http.ResponseWriter, id jsonrpc.ID, jerr *jsonrpc.Error) {
	status := http.StatusOK
	switch jerr.Code {
	case jsonrpc.CodeInvalidParams, codeMissingCapability:
		status = http.StatusBadRequest
	}
	data, err := jsonrpc.EncodeMessage(errorResponse(id, jerr))
	if err != nil {
		http.Error(w, "error encoding the answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data) // the client's connection is its own problem
}

// sseStream writes a listen's messages as server-sent events, framed as
// the SDK frames a streamable HTTP response's.
type sseStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *sseStream) send(msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.Grow(len("event: message\ndata: \n\n") + len(data))
	b.WriteString("event: message\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
	return s.write(b.Bytes())
}

func (s *sseStream) idle() error { return s.write([]byte(": idle\n\n")) }

func (s *sseStream) write(b []byte) error {
	// Not every ResponseWriter supports deadlines; the server's own
	// timeout holds then.
	_ = s.rc.SetWriteDeadline(time.Now().Add(listenWriteWait))
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}
