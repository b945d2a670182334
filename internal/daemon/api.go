package daemon

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/httpapi"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/internal/mcpserver"
)

// newAPI builds the HTTP API and what it shares with /mcp: the rate limiter
// and the waits, so that a token's enqueues and a namespace's waits are
// bounded across both; the key guard of the API's model keys; and one MCP
// server per namespace, each acting only in its own.
func (d *Daemon) newAPI(pool *pgxpool.Pool, c *Config) (*httpapi.Handler, error) {
	namespaces := httpapi.Namespaces(c.APITokens)
	limiter := httpapi.NewRateLimiter(c.RateLimit)
	waits, err := httpapi.NewWaits(d.Client, c.MaxWaits, namespaces)
	if err != nil {
		return nil, err
	}
	possibleDuplicate := d.metrics.enqueues.ObservePossibleDuplicate
	guard, err := keyguard.New(pool, d.Client, &keyguard.Config{
		Mode: c.MCP.ModelKeyGuard, ObserverFunc: possibleDuplicate, Window: c.MCP.AutoKeyWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	servers := make(map[string]*mcp.Server, len(namespaces))
	for _, namespace := range namespaces {
		mcpConfig := c.MCP
		// Without tokens /mcp answers loopback alone, as the API does, and
		// acts as the API's local principal.
		mcpConfig.Actor = access.APIActor(access.ActorLocal)
		mcpConfig.Namespace = namespace
		mcpConfig.PossibleDuplicateFunc = possibleDuplicate
		mcpConfig.ApprovalFunc = d.metrics.mcp.ObserveApproval
		mcpConfig.TaskFunc = d.metrics.mcp.ObserveTask
		mcpConfig.RateLimitFunc = limiter.Take
		mcpConfig.WaitFunc = waits.Wait
		if servers[namespace], err = mcpserver.New(pool, d.Client, &mcpConfig); err != nil {
			return nil, err
		}
	}
	return httpapi.New(d.Client, &httpapi.Config{
		AuthFailureFunc: d.metrics.authFailures.Inc,
		DatabaseUnavailableFunc: func(reason string) {
			d.metrics.databaseUnavailable.WithLabelValues(reason).Inc()
		},
		Guard:          guard,
		Logger:         c.Logger,
		MCPServers:     servers,
		MCPTools:       c.MCP.Tools,
		RateLimiter:    limiter,
		Tokens:         c.APITokens,
		TracerProvider: c.TracerProvider,
		Waits:          waits,
	})
}
