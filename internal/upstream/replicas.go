package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/outbox-dev/outbox/internal/intentdb"
)

// AgreeConfig configures Catalog.Agree.
type AgreeConfig struct {
	// Interval is how often the recorded locks are read again. Defaults
	// to 5 s.
	Interval time.Duration
	// ObserveHeldFunc, when set, is told whether this replica holds each
	// upstream's queue, at start and at every change, for
	// outbox_upstream_lock_mismatch.
	ObserveHeldFunc func(upstream string, held bool)
}

// holds are the upstreams whose queue this replica does not work: its
// lock differs from the one the replicas recorded.
type holds struct {
	mu     sync.Mutex
	reason map[string]string // upstream -> why
}

// LockSHA256s are, by upstream, the hashes of the lock entries this
// process runs: what replicas record and compare.
func (c *Catalog) LockSHA256s() map[string]string {
	out := map[string]string{}
	for name, lu := range c.locked {
		sum, err := canonicalSHA256(lu)
		if err != nil {
			// A lock that was read from JSON marshals back: unreachable.
			sum = "unhashable: " + err.Error()
		}
		out[name] = sum
	}
	return out
}

// HeldQueue is why this replica does not work the River queue, or "": a
// dispatcher's HeldQueueFunc.
func (c *Catalog) HeldQueue(queue string) string {
	c.holds.mu.Lock()
	defer c.holds.mu.Unlock()
	for name, reason := range c.holds.reason {
		if queue == QueueName(name) {
			return reason
		}
	}
	return ""
}

// Held is, by upstream, why this replica does not work its queue.
func (c *Catalog) Held() map[string]string {
	c.holds.mu.Lock()
	defer c.holds.mu.Unlock()
	return maps.Clone(c.holds.reason)
}

// QueueName is the River queue of an upstream's recorded tools.
func QueueName(upstream string) string { return "upstream_" + upstream }

// Agree records, per upstream, this replica's lock hash in the database
// (the last started replica's lock is the one in force), says which
// recorded lock it replaced, then, until ctx ends or the catalog closes,
// reads the recorded hashes every interval: while another replica's lock
// is recorded for an upstream, this replica holds that upstream's queue.
// It never calls a tool that was re-pinned, nor fails the intent of a tool
// it lacks; a replica with the recorded lock takes the jobs.
func (c *Catalog) Agree(ctx context.Context, db intentdb.Querier, queries *intentdb.Queries, config *AgreeConfig) error {
	cfg := AgreeConfig{}
	if config != nil {
		cfg = *config
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	mine := c.LockSHA256s()
	if len(mine) == 0 {
		return nil
	}
	replaced, err := queries.RecordUpstreamLocks(ctx, db, mine)
	if err != nil {
		return fmt.Errorf("error recording the upstreams' locks: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(replaced)) {
		if prev := replaced[name]; prev != "" && prev != mine[name] {
			c.logger.WarnContext(ctx, "upstream lock recorded in place of another replica's: replicas still running the other lock stop working the upstream's queue until restarted with this one",
				slog.String("upstream", name), slog.String("queue", QueueName(name)), slog.String("lock_sha256", mine[name]), slog.String("replaced_sha256", prev))
		}
		c.setHeld(ctx, name, "", cfg.ObserveHeldFunc)
	}
	ctx, cancel := context.WithCancel(ctx)
	c.stopAgree = cancel
	names := slices.Sorted(maps.Keys(mine))
	c.wg.Go(func() {
		t := time.NewTicker(cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			recorded, err := queries.UpstreamLocks(ctx, db, names)
			if err != nil {
				if ctx.Err() == nil {
					c.logger.WarnContext(ctx, "error reading the upstreams' recorded locks; holds unchanged", slog.String("error", err.Error()))
				}
				continue
			}
			for _, name := range names {
				reason := ""
				if got, ok := recorded[name]; ok && got != mine[name] {
					reason = fmt.Sprintf("this replica's lock of upstream %s (sha256 %.12s) differs from the one recorded by the last started replica (%.12s): restart it with that lock", name, mine[name], got)
				}
				c.setHeld(ctx, name, reason, cfg.ObserveHeldFunc)
			}
		}
	})
	return nil
}

// setHeld holds (reason) or works ("") an upstream's queue, saying so
// when it changes.
func (c *Catalog) setHeld(ctx context.Context, name, reason string, observe func(string, bool)) {
	c.holds.mu.Lock()
	if c.holds.reason == nil {
		c.holds.reason = map[string]string{}
	}
	prev, was := c.holds.reason[name]
	if reason == "" {
		delete(c.holds.reason, name)
	} else {
		c.holds.reason[name] = reason
	}
	c.holds.mu.Unlock()
	switch {
	case reason != "" && (!was || prev != reason):
		c.logger.WarnContext(ctx, "upstream queue held: this replica no longer works it", slog.String("upstream", name), slog.String("queue", QueueName(name)), slog.String("reason", reason))
	case reason == "" && was:
		c.logger.InfoContext(ctx, "upstream queue worked again: this replica's lock is the recorded one", slog.String("upstream", name))
	}
	if observe != nil {
		observe(name, reason != "")
	}
}
