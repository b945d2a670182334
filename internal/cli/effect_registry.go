package cli

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/noop"
)

// sandboxEffects are the effects OUTBOX_SANDBOX=true enables: the noop effect
// under each guarantee, recording what it does in the database.
var sandboxEffects = []struct {
	name      string
	guarantee effects.Guarantee
}{
	{noop.NameDefault, effects.GuaranteeDeduplicated},
	{"noop_reconcilable", effects.GuaranteeReconcilable},
	{"noop_at_most_once", effects.GuaranteeAtMostOnce},
}

// newEffectRegistry returns the effects cfg enables, possibly none. serve
// runs them, and enqueue validates intents with them. pool is where the
// sandbox effects record what they do.
func newEffectRegistry(cfg *Config, pool *pgxpool.Pool, logger *slog.Logger) (*effects.Registry, error) {
	var enabled []effects.Effect
	if cfg.Sandbox {
		for _, s := range sandboxEffects {
			effect, err := noop.New(&noop.Config{
				Guarantee: s.guarantee,
				Logger:    logger,
				Name:      s.name,
				Pool:      pool,
				Schema:    cfg.Schema,
			})
			if err != nil {
				return nil, err
			}
			enabled = append(enabled, effect)
		}
	}
	return effects.NewRegistry(enabled...)
}
