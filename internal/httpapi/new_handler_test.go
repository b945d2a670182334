package httpapi_test

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/outbox"
)

// apiConfig is what a test sets: the handler's own settings, and the
// limits it shares with /mcp.
type apiConfig struct {
	Logger    *slog.Logger
	MaxWaits  int
	RateLimit httpapi.RateLimit
	Tokens    []access.Token
}

// newHandler builds the handler as package daemon does: the rate limiter
// and the waits shared with /mcp, the key guard, one MCP server per
// namespace, then the handler. A nil config is the zero one.
func newHandler(pool *pgxpool.Pool, client *outbox.Client, config *apiConfig) (*httpapi.Handler, error) {
	if config == nil {
		config = &apiConfig{}
	}
	namespaces := httpapi.Namespaces(config.Tokens)
	limiter := httpapi.NewRateLimiter(config.RateLimit)
	waits, err := httpapi.NewWaits(client, config.MaxWaits, namespaces)
	if err != nil {
		return nil, err
	}
	guard, err := keyguard.New(pool, client, nil)
	if err != nil {
		return nil, err
	}
	servers := map[string]*mcp.Server{}
	for _, namespace := range namespaces {
		servers[namespace], err = mcpserver.New(pool, client, &mcpserver.Config{
			Actor:         access.APIActor(access.ActorLocal),
			Logger:        config.Logger,
			Namespace:     namespace,
			RateLimitFunc: limiter.Take,
			WaitFunc:      waits.Wait,
		})
		if err != nil {
			return nil, err
		}
	}
	return httpapi.New(client, &httpapi.Config{
		Guard:       guard,
		Logger:      config.Logger,
		MCPServers:  servers,
		RateLimiter: limiter,
		Tokens:      config.Tokens,
		Waits:       waits,
	})
}
