package cli_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testdb"
)

// A role given only what migrate print-grants prints enqueues through the
// SQL functions in its namespaces, and can do nothing else: not enqueue in
// another namespace, not read or write the intent table, not call the
// internal functions. A role without the grants cannot enqueue at all.
func TestPrintGrants(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	ctx := t.Context()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	role, stranger := "outbox_svc_"+hex.EncodeToString(suffix), "outbox_stranger_"+hex.EncodeToString(suffix)
	for _, r := range []string{role, stranger} {
		_, err := bundle.pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{r}.Sanitize()+" NOLOGIN")
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx := context.Background()
			_, _ = bundle.pool.Exec(ctx, "DROP OWNED BY "+pgx.Identifier{r}.Sanitize())
			_, err := bundle.pool.Exec(ctx, "DROP ROLE "+pgx.Identifier{r}.Sanitize())
			require.NoError(t, err)
		})
	}

	res := bundle.run(t, "migrate", "print-grants", role, "shop")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "GRANT EXECUTE ON FUNCTION ")
	_, err := bundle.pool.Exec(ctx, res.stdout)
	require.NoError(t, err, res.stdout)
	// The stranger may use the schema, but was granted nothing else.
	_, err = bundle.pool.Exec(ctx, "GRANT USAGE ON SCHEMA "+pgx.Identifier{bundle.schema}.Sanitize()+" TO "+pgx.Identifier{stranger}.Sanitize())
	require.NoError(t, err)

	s := pgx.Identifier{bundle.schema}.Sanitize()
	as := func(r string) *pgx.Conn {
		conn, err := pgx.Connect(ctx, testdb.URL(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		_, err = conn.Exec(ctx, "SET SESSION AUTHORIZATION "+pgx.Identifier{r}.Sanitize())
		require.NoError(t, err)
		return conn
	}
	denied := func(t *testing.T, err error) {
		t.Helper()
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%v", err)
		require.Equal(t, "42501", pgErr.Code, pgErr.Message) // insufficient_privilege
	}

	svc := as(role)
	var id int64
	var duplicate bool
	require.NoError(t, svc.QueryRow(ctx, "SELECT (intent).id, duplicate FROM "+s+".enqueue('shop', 'order-1', 'noop', '{\"n\": 1}')").Scan(&id, &duplicate))
	require.False(t, duplicate)
	require.NoError(t, svc.QueryRow(ctx, "SELECT (intent).id, duplicate FROM "+s+".enqueue('shop', 'order-1', 'noop', '{\"n\": 1}')").Scan(&id, &duplicate))
	require.True(t, duplicate)

	_, err = svc.Exec(ctx, "SELECT * FROM "+s+".enqueue('billing', 'order-1', 'noop', '{}')")
	denied(t, err)
	require.Contains(t, err.Error(), "may not enqueue in namespace billing")
	_, err = svc.Exec(ctx, "SELECT count(*) FROM "+s+".outbox_intent")
	denied(t, err)
	// Raw SQL, not testfactory.Intent: the refused INSERT is what's tested.
	_, err = svc.Exec(ctx, "INSERT INTO "+s+".outbox_intent (namespace, key, effect, args, state) VALUES ('shop', 'forged', 'noop', '{}', 'succeeded')")
	denied(t, err)
	_, err = svc.Exec(ctx, "SELECT * FROM "+s+".outbox_enqueue_try('shop', 'k2', 'noop', '{}')")
	denied(t, err)
	_, err = svc.Exec(ctx, "INSERT INTO "+s+".outbox_namespace_grant VALUES (session_user, '*')")
	denied(t, err)

	_, err = as(stranger).Exec(ctx, "SELECT * FROM "+s+".enqueue('shop', 'order-2', 'noop', '{}')")
	denied(t, err)

	// One intent, from the service, and nothing else.
	var n int
	require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM "+s+".outbox_intent").Scan(&n))
	require.Equal(t, 1, n)

	// Without namespaces, every namespace.
	res = bundle.run(t, "migrate", "print-grants", role)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "VALUES ('"+role+"', '*')")
	res = bundle.run(t, "migrate", "print-grants", role, "bad namespace")
	require.Equal(t, 2, res.code)
	require.Contains(t, res.stderr, `namespace "bad namespace"`)
}
