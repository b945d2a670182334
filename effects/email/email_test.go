package email_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/internal/sandbox"
)

func TestParseArgs(t *testing.T) {
	t.Parallel()

	a, err := email.ParseArgs(json.RawMessage(`{"to": ["Ann <ann@example.com>", "bob@example.com"], "cc": ["carl@example.com"],
		"subject": "Your order", "text": "Hello", "html": "<p>Hello</p>", "reply_to": "help@example.com"}`))
	require.NoError(t, err)
	require.Len(t, a.To, 2)
	require.Equal(t, "ann@example.com", a.To[0].Address)
	require.Equal(t, "Ann", a.To[0].Name)
	require.Equal(t, "help@example.com", a.ReplyTo.Address)

	_, err = email.ParseArgs(json.RawMessage(`{"to": ["a@example.com"], "subject": "s", "html": "<b>only html</b>"}`))
	require.NoError(t, err)

	fifty := `"` + strings.TrimSuffix(strings.Repeat(`a@example.com","`, 50), `","`) + `"`
	fiftyOne := fifty + `,"z@example.com"`
	cases := []struct {
		name, args, field string
	}{
		{"NotAnObject", `"hi"`, ""},
		{"UnknownField", `{"to": ["a@example.com"], "subject": "s", "text": "t", "bcc": ["b@example.com"]}`, "bcc"},
		{"MissingTo", `{"subject": "s", "text": "t"}`, "to"},
		{"ToNotArray", `{"to": "a@example.com", "subject": "s", "text": "t"}`, "to"},
		{"EmptyTo", `{"to": [], "subject": "s", "text": "t"}`, "to"},
		{"TooManyTo", `{"to": [` + fiftyOne + `], "subject": "s", "text": "t"}`, "to"},
		{"BadTo", `{"to": ["a@example.com", "not an address"], "subject": "s", "text": "t"}`, "to[1]"},
		{"HeaderInjection", `{"to": ["a@example.com\r\nBcc: x@evil.example"], "subject": "s", "text": "t"}`, "to[0]"},
		{"BadCc", `{"to": ["a@example.com"], "cc": ["@"], "subject": "s", "text": "t"}`, "cc[0]"},
		{"TooManyCc", `{"to": ["a@example.com"], "cc": [` + fiftyOne + `], "subject": "s", "text": "t"}`, "cc"},
		{"BadReplyTo", `{"to": ["a@example.com"], "reply_to": "nope", "subject": "s", "text": "t"}`, "reply_to"},
		{"MissingSubject", `{"to": ["a@example.com"], "text": "t"}`, "subject"},
		{"EmptySubject", `{"to": ["a@example.com"], "subject": "", "text": "t"}`, "subject"},
		{"SubjectLineBreak", `{"to": ["a@example.com"], "subject": "a\nBcc: x@evil.example", "text": "t"}`, "subject"},
		{"NoBody", `{"to": ["a@example.com"], "subject": "s"}`, "text"},
		{"EmptyText", `{"to": ["a@example.com"], "subject": "s", "text": ""}`, "text"},
		{"NumberText", `{"to": ["a@example.com"], "subject": "s", "text": 5}`, "text"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := email.ParseArgs(json.RawMessage(tc.args))
			var argErr *effects.ArgError
			require.ErrorAs(t, err, &argErr)
			require.Equal(t, tc.field, argErr.Field, "error: %v", err)
			require.NotContains(t, err.Error(), "@", "an argument error must not quote an address")
		})
	}
	_, err = email.ParseArgs(json.RawMessage(`{"to": [` + fifty + `], "subject": "s", "text": "t"}`))
	require.NoError(t, err)
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		config *email.Config
		want   string
	}{
		{nil, "Addr and From must be set"},
		{&email.Config{From: "a@example.com"}, "Addr must be host:port"},
		{&email.Config{Addr: "localhost", From: "a@example.com"}, "Addr must be host:port"},
		{&email.Config{Addr: "localhost:25"}, "From must be an email address"},
		{&email.Config{Addr: "localhost:25", From: "nope"}, "From must be an email address"},
		{&email.Config{Addr: "localhost:25", From: "a@example.com", TLS: "ssl"}, `TLS must be starttls, tls or none, not "ssl"`},
	} {
		_, err := email.New(tc.config)
		require.ErrorContains(t, err, tc.want, "config %+v", tc.config)
	}
	e, err := email.New(&email.Config{Addr: "localhost:25", From: "Shop <shop@example.com>"})
	require.NoError(t, err)
	require.Equal(t, effects.GuaranteeAtMostOnce, e.Guarantee())
	require.Equal(t, "obx_abc@example.com", e.MessageID("obx_abc"))
}

type testBundle struct {
	effect *email.Effect
	sink   *sandbox.SMTPSink
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	sink, err := sandbox.NewSMTPSink(nil)
	require.NoError(t, err)
	t.Cleanup(sink.Close)
	e, err := email.New(&email.Config{Addr: sink.Addr(), From: "Shop <shop@example.com>", TLS: email.TLSNone})
	require.NoError(t, err)
	return &testBundle{effect: e, sink: sink}
}

const okArgs = `{"to": ["Ann <ann@example.com>"], "cc": ["carl@example.com"], "subject": "Your order ✓", "text": "Hello"}`

func execute(t *testing.T, e *email.Effect, key, args string, timeout time.Duration) (*email.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	raw, err := e.Execute(ctx, &effects.Request{Args: json.RawMessage(args), Attempt: 1, ProviderKey: key})
	if err != nil {
		require.NotContains(t, err.Error(), "ann@example.com", "an effect error must not carry an address")
		require.NotContains(t, err.Error(), "carl@example.com", "an effect error must not carry an address")
		return nil, err
	}
	var res email.Result
	require.NoError(t, json.Unmarshal(raw, &res))
	return &res, nil
}

func requireClass(t *testing.T, err error, class effects.Class, code string) {
	t.Helper()
	require.Error(t, err)
	gotClass, gotCode := effects.Classify(err)
	require.Equal(t, class, gotClass, "error: %v", err)
	if code != "" {
		require.Equal(t, code, gotCode, "error: %v", err)
	}
}

func TestExecute(t *testing.T) {
	t.Parallel()

	t.Run("Sends", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := execute(t, b.effect, "obx_m1", okArgs, 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "obx_m1@example.com", res.MessageID)
		require.Equal(t, 2, res.Recipients)
		msgs := b.sink.Messages()
		require.Len(t, msgs, 1)
		require.Equal(t, "obx_m1@example.com", msgs[0].MessageID)
		require.Equal(t, "Your order ✓", msgs[0].Subject)
		require.Equal(t, []string{"ann@example.com"}, msgs[0].To)
		require.Equal(t, []string{"carl@example.com"}, msgs[0].Cc)
		require.ElementsMatch(t, []string{"ann@example.com", "carl@example.com"}, msgs[0].Recipients)
		require.Equal(t, "shop@example.com", msgs[0].From)
	})

	t.Run("UnavailableIsNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.sink.Misbehave(sandbox.Fault{Kind: sandbox.FaultUnavailable})
		_, err := execute(t, b.effect, "obx_m2", okArgs, 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "smtp_deferred")
		require.Equal(t, 0, b.sink.Effects())
	})

	t.Run("RejectedRecipientIsPermanent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.sink.Misbehave(sandbox.Fault{Kind: sandbox.FaultReject})
		_, err := execute(t, b.effect, "obx_m3", okArgs, 5*time.Second)
		requireClass(t, err, effects.ClassPermanent, "smtp_rejected")
		require.Contains(t, err.Error(), "550")
		require.Equal(t, 0, b.sink.Effects())
	})

	t.Run("ResetAfterDataIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.sink.Misbehave(sandbox.Fault{Kind: sandbox.FaultReset})
		_, err := execute(t, b.effect, "obx_m4", okArgs, 5*time.Second)
		requireClass(t, err, effects.ClassAmbiguous, "connection_lost")
		require.Equal(t, 1, b.sink.Effects())
	})

	t.Run("SlowReplyIsAmbiguousTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.sink.Misbehave(sandbox.Fault{Kind: sandbox.FaultSlow, Delay: 5 * time.Second})
		start := time.Now()
		_, err := execute(t, b.effect, "obx_m5", okArgs, 500*time.Millisecond)
		requireClass(t, err, effects.ClassAmbiguous, "timeout")
		require.Less(t, time.Since(start), 3*time.Second, "the attempt's deadline bounds the exchange")
		require.Equal(t, 1, b.sink.Effects())
	})

	t.Run("HangBeforeTakingIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.sink.Misbehave(sandbox.Fault{Kind: sandbox.FaultHangBefore})
		_, err := execute(t, b.effect, "obx_m6", okArgs, 500*time.Millisecond)
		// The client cannot tell: the data was sent, the reply never came.
		requireClass(t, err, effects.ClassAmbiguous, "timeout")
		require.Equal(t, 0, b.sink.Effects())
	})

	t.Run("ConnectionRefusedIsNotSent", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		l.Close()
		e, err := email.New(&email.Config{Addr: addr, From: "shop@example.com", TLS: email.TLSNone})
		require.NoError(t, err)
		_, err = execute(t, e, "obx_m7", okArgs, 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "connection_failed")
	})

	t.Run("StartTLSRequired", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e, err := email.New(&email.Config{Addr: b.sink.Addr(), From: "shop@example.com"})
		require.NoError(t, err)
		_, err = execute(t, e, "obx_m8", okArgs, 5*time.Second)
		requireClass(t, err, effects.ClassNotSent, "connection_failed")
		require.Contains(t, err.Error(), "STARTTLS")
		require.Equal(t, 0, b.sink.Effects())
	})
}
