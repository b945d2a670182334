package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Upstream is an MCP server the demo puts behind outbox.
type Upstream struct {
	// URL is the server's own streamable HTTP endpoint, for the calls
	// without outbox.
	URL string
	// Tool is the server's tool the host calls, and Mirrored its name on
	// outbox's /mcp.
	Tool, Mirrored string
	// EffectsFunc counts what the server did.
	EffectsFunc func() int
}

// mcpLane is part 5: a host that dispatches every tool call twice.
type mcpLane struct {
	directEffects, outboxEffects int
	answers                      [2]string
}

// mcpUpstream is part 5: an MCP server's write tool, called the way a host
// that dispatches every call twice calls it (a known host bug, and what a
// framework's retry of a lost answer does): without outbox two notes, with
// outbox, whose /mcp mirrors the server's tools and records each call once
// under its key (here the automatic one, from the tool and its arguments),
// one note and the same answer twice.
func (s *Story) mcpUpstream(ctx context.Context) error {
	up := s.env.Upstream
	done := s.out.Progress("a host calls the MCP server's " + up.Tool + " twice, straight and through outbox")
	defer done()
	args := map[string]any{"title": "Call the customer back", "body": "order 1001, run " + s.run}

	direct, err := s.mcpSession(ctx, up.URL, "")
	if err != nil {
		return err
	}
	before := up.EffectsFunc()
	if err := twice(ctx, direct, up.Tool, args, nil); err != nil {
		return err
	}
	_ = direct.Close()
	s.mcp.directEffects = up.EffectsFunc() - before

	viaOutbox, err := s.mcpSession(ctx, s.env.BaseURL+"/mcp", s.env.Token)
	if err != nil {
		return err
	}
	defer viaOutbox.Close() //nolint:errcheck // closing a stateless session says nothing
	before = up.EffectsFunc()
	if err := twice(ctx, viaOutbox, up.Mirrored, args, &s.mcp.answers); err != nil {
		return err
	}
	s.mcp.outboxEffects = up.EffectsFunc() - before
	done()

	tw := s.out.Table()
	fmt.Fprintf(tw, "   without outbox\t2 calls of %s\t%s\n", up.Tool, plural(s.mcp.directEffects, "note"))
	fmt.Fprintf(tw, "   with outbox\t2 calls of %s\t%s, the same answer to both\n", up.Mirrored, plural(s.mcp.outboxEffects, "note"))
	tw.Flush() //nolint:errcheck // the writer's errors are its own
	s.check(s.mcp.directEffects == 2, "a host dispatching twice makes two notes straight")
	s.check(s.mcp.outboxEffects == 1, "the same two calls through outbox make one note")
	s.check(s.mcp.answers[0] != "" && s.mcp.answers[0] == s.mcp.answers[1], "both calls through outbox got the same stored answer")
	return nil
}

// twice makes the same call twice at once, as a host that dispatches twice
// does; answers, when given, receive each call's structured content.
func twice(ctx context.Context, s *mcp.ClientSession, tool string, args map[string]any, answers *[2]string) error {
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
			if err != nil {
				errs[i] = err
				return
			}
			if answers != nil {
				var a struct {
					State    string          `json:"state"`
					Upstream json.RawMessage `json:"upstream"`
				}
				raw, _ := json.Marshal(res.StructuredContent)
				_ = json.Unmarshal(raw, &a)
				answers[i] = a.State + " " + string(a.Upstream)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("error calling %s: %w", tool, err)
		}
	}
	return nil
}

// mcpSession connects an MCP client to endpoint, with a bearer token when
// given.
func (s *Story) mcpSession(ctx context.Context, endpoint, token string) (*mcp.ClientSession, error) {
	hc := &http.Client{Timeout: WaitMax}
	if token != "" {
		hc.Transport = bearer{token: token}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "demo-host", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil)
}

// bearer adds a bearer token to each request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
