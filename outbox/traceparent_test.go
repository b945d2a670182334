package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/outbox"
)

// traceparent reads the traceparent column of key's intent, nil for NULL.
func (b *testBundle) traceparent(t *testing.T, key string) *string {
	t.Helper()
	var tp *string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT traceparent FROM "+pgx.Identifier{b.schema, "outbox_intent"}.Sanitize()+" WHERE key = $1", key).Scan(&tp))
	return tp
}

// requireSpan checks that tp is a W3C traceparent naming span's trace and
// span.
func requireSpan(t *testing.T, span trace.Span, tp *string) {
	t.Helper()
	require.NotNil(t, tp)
	sc := span.SpanContext()
	require.Equal(t, []string{"00", sc.TraceID().String(), sc.SpanID().String(), "01"}, strings.Split(*tp, "-"))
}

func TestEnqueueTraceparent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	provider := sdktrace.NewTracerProvider()
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.WithoutCancel(ctx))) })
	tracer := provider.Tracer("outbox_test")

	noopParams := func(key string) *outbox.EnqueueParams {
		return &outbox.EnqueueParams{Key: key, Effect: "noop", Args: map[string]any{}}
	}

	// enqueueTx enqueues params in a transaction of its own, with ctx.
	enqueueTx := func(t *testing.T, b *testBundle, ctx context.Context, params *outbox.EnqueueParams) *outbox.EnqueueResult {
		t.Helper()
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		res, err := b.client.EnqueueTx(ctx, tx, params)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		return res
	}

	// enqueueManyTx enqueues params in a transaction of its own, with ctx.
	enqueueManyTx := func(t *testing.T, b *testBundle, ctx context.Context, params ...*outbox.EnqueueParams) []*outbox.EnqueueResult {
		t.Helper()
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		results, err := b.client.EnqueueManyTx(ctx, tx, params)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		return results
	}

	t.Run("InSpan", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		spanCtx, span := tracer.Start(ctx, "enqueue")
		defer span.End()
		enqueueTx(t, b, spanCtx, noopParams("k1"))
		requireSpan(t, span, b.traceparent(t, "k1"))
	})

	t.Run("WithoutSpan", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		enqueueTx(t, b, ctx, noopParams("k1"))
		require.Nil(t, b.traceparent(t, "k1"))
	})

	t.Run("DuplicateKeepsTheFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		firstCtx, first := tracer.Start(ctx, "first")
		defer first.End()
		enqueueTx(t, b, firstCtx, noopParams("k1"))

		secondCtx, second := tracer.Start(ctx, "second")
		defer second.End()
		require.True(t, enqueueTx(t, b, secondCtx, noopParams("k1")).Duplicate)
		res, err := b.client.Enqueue(secondCtx, noopParams("k1"))
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.True(t, enqueueManyTx(t, b, secondCtx, noopParams("k1"))[0].Duplicate)
		requireSpan(t, first, b.traceparent(t, "k1"))
	})

	// Enqueue's calls go in groups: each records its own caller's span.
	t.Run("Enqueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 8
		spans := make([]trace.Span, n)
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			spanCtx, span := tracer.Start(ctx, "enqueue")
			spans[i] = span
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer span.End()
				_, errs[i] = b.client.Enqueue(spanCtx, noopParams(fmt.Sprintf("k%d", i)))
			}()
		}
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i])
			requireSpan(t, spans[i], b.traceparent(t, fmt.Sprintf("k%d", i)))
		}
	})

	t.Run("EnqueueManyTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		firstCtx, first := tracer.Start(ctx, "first")
		defer first.End()
		// Every key new: the plain INSERT.
		enqueueManyTx(t, b, firstCtx, noopParams("a"), noopParams("b"))
		requireSpan(t, first, b.traceparent(t, "a"))
		requireSpan(t, first, b.traceparent(t, "b"))

		// A key recorded before: the INSERT with ON CONFLICT.
		secondCtx, second := tracer.Start(ctx, "second")
		defer second.End()
		results := enqueueManyTx(t, b, secondCtx, noopParams("a"), noopParams("c"))
		require.True(t, results[0].Duplicate)
		require.False(t, results[1].Duplicate)
		requireSpan(t, first, b.traceparent(t, "a"))
		requireSpan(t, second, b.traceparent(t, "c"))

		// Outside a transaction, the SQL function, which takes no
		// traceparent: it is recorded after it.
		thirdCtx, third := tracer.Start(ctx, "third")
		defer third.End()
		results, err := b.client.EnqueueManyTx(thirdCtx, b.pool, []*outbox.EnqueueParams{noopParams("c"), noopParams("d")})
		require.NoError(t, err)
		require.True(t, results[0].Duplicate)
		require.False(t, results[1].Duplicate)
		requireSpan(t, second, b.traceparent(t, "c"))
		requireSpan(t, third, b.traceparent(t, "d"))

		// Without a span, nothing.
		enqueueManyTx(t, b, ctx, noopParams("e"))
		require.Nil(t, b.traceparent(t, "e"))
	})
}
