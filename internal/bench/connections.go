package bench

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolSize is the size of the pool Compare and CompareBatch need: a lane's
// schema is migrated (the lock's session and River's transactions), its
// costs read and its schema dropped on it, while the lane itself runs on a
// pool of its own (see newLanePool).
const PoolSize = 4

// laneSessions are the connections a lane holds beside its pool: River's
// listener, and on outbox's lanes the dispatcher's liveness session, the
// drain's listener and the bench's state-change listener, each taken out
// of the pool for good (pgxpool's Hijack); and the four probes of the
// dispatcher's session check, which it opens as it starts.
const laneSessions = 4 + 4

// batchPoolSize is the size of a batch lane's pool: one caller.
const batchPoolSize = 2

// ConnectionsError is Compare's and CompareBatch's answer, before they
// change anything, when the server would refuse some of the connections the
// run may hold together.
type ConnectionsError struct {
	// Need is how many connections the run may hold at once: the pool it
	// was given, a lane's pool and the lane's sessions beside it.
	Need int
	// Allowed is how many the server takes from this run: its limit less
	// what others hold now.
	Allowed int
	// Limit says which limit Allowed comes from and what holds the rest:
	// "max_connections 100, 3 reserved for superusers, 60 in use by others".
	Limit string
}

func (e *ConnectionsError) Error() string {
	return fmt.Sprintf("bench: needs %d connections and the server allows %d (%s)", e.Need, e.Allowed, e.Limit)
}

// checkConnections returns a *ConnectionsError when the server would not
// take need connections from pool's user at once, counting those pool
// holds now as the run's own. It reads the three limits PostgreSQL
// applies to a new connection: max_connections less the slots reserved
// for superusers (and, from PostgreSQL 16, reserved_connections), the
// role's CONNECTION LIMIT and the database's.
func checkConnections(ctx context.Context, pool *pgxpool.Pool, need int) error {
	var (
		maxConns, reserved, inUse              int
		roleLimit, roleInUse, dbLimit, dbInUse int
		superuser                              bool
	)
	err := pool.QueryRow(ctx, `WITH client AS (
			-- A role without pg_read_all_stats sees no backend_type of
			-- another role's sessions: a client's has a database and a user.
			SELECT a.usesysid, a.datid FROM pg_stat_activity a
			WHERE coalesce(a.backend_type = 'client backend', a.datid IS NOT NULL AND a.usesysid IS NOT NULL))
		SELECT current_setting('max_connections')::int,
			current_setting('superuser_reserved_connections')::int + coalesce(current_setting('reserved_connections', true)::int, 0),
			r.rolsuper, r.rolconnlimit, d.datconnlimit,
			(SELECT count(*) FROM client)::int,
			(SELECT count(*) FROM client c WHERE c.usesysid = r.oid)::int,
			(SELECT count(*) FROM client c WHERE c.datid = d.oid)::int
		FROM pg_roles r, pg_database d
		WHERE r.rolname = current_user AND d.datname = current_database()`).
		Scan(&maxConns, &reserved, &superuser, &roleLimit, &dbLimit, &inUse, &roleInUse, &dbInUse)
	if err != nil {
		return fmt.Errorf("bench: error reading the server's connection limits: %w", err)
	}
	// The pool's connections are the run's own: need counts them.
	own := int(pool.Stat().TotalConns())
	var worst *ConnectionsError
	// check compares need with limit less what others hold of it.
	check := func(limit, held int, what string) {
		others := max(0, held-own)
		if allowed := limit - others; need > allowed && (worst == nil || allowed < worst.Allowed) {
			worst = &ConnectionsError{Need: need, Allowed: allowed, Limit: fmt.Sprintf("%s, %d in use by others", what, others)}
		}
	}
	if superuser {
		// A superuser may take the reserved slots too, and no role's or
		// database's limit applies to one.
		check(maxConns, inUse, fmt.Sprintf("max_connections %d", maxConns))
	} else {
		check(maxConns-reserved, inUse, fmt.Sprintf("max_connections %d, %d reserved", maxConns, reserved))
		if roleLimit >= 0 {
			check(roleLimit, roleInUse, fmt.Sprintf("the role's CONNECTION LIMIT %d", roleLimit))
		}
		if dbLimit >= 0 {
			check(dbLimit, dbInUse, fmt.Sprintf("the database's CONNECTION LIMIT %d", dbLimit))
		}
	}
	if worst != nil {
		return worst
	}
	return nil
}

// warmPool opens every connection pool may hold, so that a lane does not
// pay for connecting while it is measured (tens of milliseconds a
// connection, which on a short run would make one lane look slow and its
// ratios off), and so that a lane holds what it may hold from its start:
// a server that cannot take it says so before anything is measured.
func warmPool(ctx context.Context, pool *pgxpool.Pool) error {
	n := int(pool.Config().MaxConns)
	conns := make([]*pgxpool.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { conns[i], errs[i] = pool.Acquire(ctx) })
	}
	wg.Wait()
	var firstErr error
	for i, c := range conns {
		if c != nil {
			c.Release()
		}
		if firstErr == nil && errs[i] != nil {
			firstErr = errs[i]
		}
	}
	if firstErr != nil {
		return fmt.Errorf("bench: error opening the lane's connections: %w", firstErr)
	}
	return nil
}
