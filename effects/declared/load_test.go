package declared

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// env is the environment the tests' files read.
func env(name string) (string, bool) {
	v, ok := map[string]string{
		"STRIPE_URL": "http://127.0.0.1:9",
		"STRIPE_KEY": "sk_test_secret_123",
		"REMOTE":     "https://provider.example",
		"PLAIN_HTTP": "http://provider.example",
		"WITH_QUERY": "https://provider.example/?a=b",
	}[name]
	return v, ok
}

// refund is a valid deduplicated declaration, the base of the broken ones.
const refund = `effects:
  refund:
    description: Refund a payment.
    tool: refund_payment
    guarantee: deduplicated
    dedupe_window: 24h
    args:
      type: object
      required: [payment_intent]
      properties:
        payment_intent: {type: string, pattern: "^pi_"}
        amount: {type: integer, minimum: 1}
      additionalProperties: false
    request:
      method: POST
      url: "{env.STRIPE_URL}/v1/refunds"
      headers:
        Authorization: "Bearer {env.STRIPE_KEY}"
        Idempotency-Key: "{provider_key}"
      encoding: form
      body:
        payment_intent: "{args.payment_intent}"
        amount: "{args.amount}"
      timeout: 10s
    outcome:
      - when: status == 402
        class: permanent
        code: card_declined
    result:
      id: /id
`

// ticketDecl is a valid reconcilable declaration.
const ticketDecl = `effects:
  ticket_from_file:
    description: Open a support ticket.
    guarantee: reconcilable
    args:
      type: object
      required: [subject, body]
      properties: {subject: {type: string}, body: {type: string}}
    request:
      url: "{env.STRIPE_URL}/api/v2/tickets.json"
      body:
        ticket: {subject: "{args.subject}", comment: {body: "{args.body}"}, external_id: "{provider_key}"}
    result: {id: /ticket/id}
    lookup:
      url: "{env.STRIPE_URL}/api/v2/tickets.json?external_id={provider_key}"
      items: body.tickets
      match: item.external_id == provider_key
      result: {id: /id}
`

func parse(t *testing.T, src string, mutate func(*Config)) ([]*Effect, error) {
	t.Helper()
	cfg := &Config{LookupEnvFunc: env, EffectTimeout: 30 * time.Second, Reserved: []string{"charge", "email", "ticket", "webhook"}, ReservedTools: []string{"charge_card"}}
	if mutate != nil {
		mutate(cfg)
	}
	return Parse("effects.yaml", []byte(src), cfg)
}

func TestParseValid(t *testing.T) {
	t.Parallel()

	for _, src := range []string{refund, ticketDecl} {
		effs, err := parse(t, src, nil)
		require.NoError(t, err)
		require.Len(t, effs, 1)
	}
	effs, err := parse(t, refund, nil)
	require.NoError(t, err)
	e := effs[0]
	require.Equal(t, "refund", e.Name())
	require.Equal(t, "refund_payment", e.Tool())
	require.Equal(t, 24*time.Hour-10*time.Second, e.DedupeWindow(), "the window less the request's timeout")
	require.Len(t, e.DeclarationSHA256(), 64)
	require.NotContains(t, string(e.ArgsSchema()), "sk_test")

	// JSON is YAML.
	effs, err = parse(t, `{"effects": {"ping": {"description": "Ping.", "guarantee": "at_most_once", "args": {"type": "object"},
		"request": {"url": "{env.STRIPE_URL}/ping"}}}}`, nil)
	require.NoError(t, err)
	require.Equal(t, "ping", effs[0].Name())
}

// TestParseRefusesBrokenFiles is the table of broken files outboxd effects
// check refuses: each error names the file, the effect and the field, and
// the line where the parser knows it.
func TestParseRefusesBrokenFiles(t *testing.T) {
	t.Parallel()

	// replace returns refund with old replaced by new, once.
	replace := func(old, new string) string {
		t.Helper()
		require.Contains(t, refund, old)
		return strings.Replace(refund, old, new, 1)
	}
	replaceTicket := func(old, new string) string {
		t.Helper()
		require.Contains(t, ticketDecl, old)
		return strings.Replace(ticketDecl, old, new, 1)
	}
	tests := []struct {
		name   string
		src    string
		mutate func(*Config)
		// want is what the message must hold: "effect refund: <field>: ".
		want string
		line int
	}{
		{"MissingWindow", replace("    dedupe_window: 24h\n", ""), nil, "effect refund: dedupe_window: required", 3},
		{"WindowOnAtMostOnce", replace("guarantee: deduplicated", "guarantee: at_most_once"), nil, "effect refund: dedupe_window: only a deduplicated", 6},
		{"BadWindow", replace("24h", "a day"), nil, "effect refund: dedupe_window: must be a positive Go duration", 6},
		{"WindowBeyondRetention", refund, func(c *Config) { c.Retention = time.Hour }, "effect refund: dedupe_window: longer than OUTBOX_RETENTION", 6},
		{"HostFromArgument", replace(`"{env.STRIPE_URL}/v1/refunds"`, `"https://{args.payment_intent}.example/v1/refunds"`), nil, "effect refund: request.url: must start with a literal base", 16},
		{"ArgumentGluedToBase", replace(`"{env.STRIPE_URL}/v1/refunds"`, `"{env.STRIPE_URL}{args.payment_intent}/v1"`), nil, "effect refund: request.url: the path must start with /", 16},
		{"PartialPathSegment", replace(`/v1/refunds"`, `/v1/re{args.payment_intent}"`), nil, "effect refund: request.url: path segment", 16},
		{"PlainHTTPRemote", replace(`{env.STRIPE_URL}`, `{env.PLAIN_HTTP}`), nil, "effect refund: url {env.PLAIN_HTTP}/v1/refunds: {env.PLAIN_HTTP}: the base must be https", 3},
		{"BaseWithQuery", replace(`{env.STRIPE_URL}`, `{env.WITH_QUERY}`), nil, "the base must have no query", 3},
		{"UnknownPlaceholder", replace(`"{args.amount}"`, `"{amount}"`), nil, "effect refund: request.body: amount: unknown placeholder {amount}", 22},
		{"ArgumentNotInSchema", replace(`"{args.amount}"`, `"{args.amout}"`), nil, "effect refund: request: {args.amout}: no such property in args", 15},
		{"CreatedAtOutsideLookup", replace(`"{args.amount}"`, `"{intent.created_at}"`), nil, "only a look-up may use it", 22},
		{"CELTypeError", replace("status == 402", `status == "402"`), nil, "effect refund: outcome[0].when: CEL", 26},
		{"CELNotBool", replace("status == 402", "status + 1"), nil, "effect refund: outcome[0].when: CEL type error", 26},
		{"UnknownClass", replace("class: permanent", "class: fatal"), nil, "effect refund: outcome[0].class: must be success", 27},
		{"MissingEnv", replace("{env.STRIPE_KEY}", "{env.NOT_SET_ANYWHERE}"), nil, "effect refund: the environment variable NOT_SET_ANYWHERE is not set", 3},
		{"LookupOnDeduplicated", refund + "    lookup:\n      url: \"{env.STRIPE_URL}/x?k={provider_key}\"\n      found: status == 200\n      missing: status == 404\n", nil, "effect refund: lookup: only a reconcilable effect has one", 32},
		{"ReconcilableWithoutLookup", replaceTicket("    lookup:\n      url: \"{env.STRIPE_URL}/api/v2/tickets.json?external_id={provider_key}\"\n      items: body.tickets\n      match: item.external_id == provider_key\n      result: {id: /id}\n", ""), nil, "effect ticket_from_file: lookup: required for a reconcilable effect", 3},
		{"NoProviderKey", replace(`        Idempotency-Key: "{provider_key}"`+"\n", ""), nil, "effect refund: request: a deduplicated effect must send {provider_key}", 15},
		{"ForbiddenHeader", replace("Idempotency-Key:", "Host: x\n        Idempotency-Key:"), nil, "effect refund: request.headers.Host: cannot be declared", 19},
		{"UnknownField", replace("    tool: refund_payment\n", "    tool: refund_payment\n    retries: 3\n"), nil, "effect refund: retries: unknown field", 5},
		{"TopLevelOneOf", replace("      additionalProperties: false\n", "      additionalProperties: false\n      oneOf: [{required: [amount]}]\n"), nil, "effect refund: args.oneOf: not at the top level", 14},
		{"ArgsNotObject", replace("      type: object\n      required", "      type: array\n      required"), nil, "effect refund: args.type: the top level must be a plain type: object", 8},
		{"RemoteRef", replace("amount: {type: integer, minimum: 1}", `amount: {$ref: "https://example.com/amount.json"}`), nil, "effect refund: args: $ref", 8},
		{"BuiltinName", strings.Replace(refund, "  refund:", "  charge:", 1), nil, "effect charge: the name of a built-in effect", 3},
		{"BadName", strings.Replace(refund, "  refund:", "  Refund-It:", 1), nil, "effect Refund-It: an effect's name must be a lowercase letter", 3},
		{"NameRiverRefuses", strings.Replace(refund, "  refund:", "  pay__now_:", 1), nil, "effect pay__now_: an effect's name must be a lowercase letter", 3},
		{"ToolTaken", replace("tool: refund_payment", "tool: charge_card"), nil, `effect refund: tool: the MCP tool name "charge_card" is taken`, 4},
		{"TimeoutBeyondLease", replace("timeout: 10s", "timeout: 1m"), nil, "effect refund: request.timeout: at most OUTBOX_EFFECT_TIMEOUT", 24},
		{"ShortMaxKeyLength", replace("    tool: refund_payment\n", "    tool: refund_payment\n    max_key_length: 40\n"), nil, "effect refund: max_key_length: ", 5},
		{"FormArraysOnJSON", replace("      encoding: form\n", "      form_arrays: brackets\n"), nil, "effect refund: request.form_arrays: only with encoding: form", 20},
		{"DuplicateKey", replace("    tool: refund_payment\n", "    tool: refund_payment\n    tool: other\n"), nil, "effects.yaml:5: ", 5},
		{"NotLoopbackInSandbox", replace(`{env.STRIPE_URL}`, `{env.REMOTE}`), func(c *Config) { c.LoopbackOnly = true }, "the sandbox sends declared effects only to a loopback host", 3},
		{"UnknownPreset", "effects:\n  refund:\n    preset: stripe.refnd\n", nil, "effect refund: preset: unknown preset", 3},
		{"PresetWindowLengthened", "effects:\n  refund:\n    preset: stripe.refund\n    dedupe_window: 48h\n", func(c *Config) { c.NoEnv = true }, "effect refund: dedupe_window: an override may shorten", 4},
		{"PresetGuaranteeStrengthened", "effects:\n  sms:\n    preset: twilio.sms\n    guarantee: deduplicated\n    dedupe_window: 1h\n", func(c *Config) { c.NoEnv = true }, "effect sms: guarantee: an override may weaken", 4},
		{"LookupWithoutKey", replaceTicket("external_id={provider_key}\"\n      items: body.tickets\n      match: item.external_id == provider_key", "external_id=x\"\n      items: body.tickets\n      match: \"true\""), nil, "effect ticket_from_file: lookup: a look-up must use {provider_key}", 15},
		{"LookupItemsWithoutMatch", replaceTicket("      match: item.external_id == provider_key\n", ""), nil, "effect ticket_from_file: lookup.items: items and match go together", 16},
	}
	require.GreaterOrEqual(t, len(tests), 20)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parse(t, tt.src, tt.mutate)
			require.Error(t, err)
			var fe *FileError
			require.True(t, errors.As(err, &fe), "%T: %v", err, err)
			require.Contains(t, err.Error(), tt.want)
			require.True(t, strings.HasPrefix(err.Error(), "effects.yaml:"), err.Error())
			require.Equal(t, tt.line, fe.Line, err.Error())
			require.NotContains(t, err.Error(), "sk_test_secret_123", "a secret in an error")
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

// TestPresetsLoad loads every preset with its variables set, and checks
// the guarantees the catalogue promises.
func TestPresetsLoad(t *testing.T) {
	t.Parallel()

	want := map[string]string{
		"stripe.refund": "deduplicated", "resend.email": "deduplicated", "pagerduty.event": "deduplicated",
		"slack.message": "reconcilable", "github.issue": "reconcilable", "twilio.sms": "at_most_once",
	}
	require.Len(t, Presets(), len(want))
	for _, p := range Presets() {
		src := "effects:\n  e:\n    preset: " + p.Name + "\n"
		effs, err := Parse("effects.yaml", []byte(src), &Config{LookupEnvFunc: func(string) (string, bool) { return "value", true }})
		require.NoError(t, err, p.Name)
		require.Equal(t, want[p.Name], string(effs[0].Guarantee()), p.Name)
	}
}

// The declaration's hash covers what shapes the request and its reading,
// not the text for agents: rewording a description or renaming the tool
// keeps an intent that may have been sent going (the worker sends it again
// only under the same hash), while a change to the request ends it unknown.
func TestDeclarationSHA256(t *testing.T) {
	t.Parallel()

	sha := func(t *testing.T, src string) string {
		t.Helper()
		effs, err := parse(t, src, nil)
		require.NoError(t, err)
		return effs[0].DeclarationSHA256()
	}
	base := sha(t, refund)
	for name, change := range map[string][2]string{
		"Description": {"description: Refund a payment.", "description: Refund a payment, in part or whole."},
		"Tool":        {"tool: refund_payment", "tool: stripe_refund"},
	} {
		t.Run("Keeps"+name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, base, sha(t, strings.Replace(refund, change[0], change[1], 1)))
		})
	}
	for name, change := range map[string][2]string{
		"Method":       {"method: POST", "method: PUT"},
		"URL":          {"/v1/refunds", "/v2/refunds"},
		"Header":       {"Bearer {env.STRIPE_KEY}", "Basic {env.STRIPE_KEY}"},
		"Body":         {`amount: "{args.amount}"`, `amount_cents: "{args.amount}"`},
		"Encoding":     {"encoding: form", "encoding: json"},
		"Timeout":      {"timeout: 10s", "timeout: 20s"},
		"Window":       {"dedupe_window: 24h", "dedupe_window: 12h"},
		"Args":         {"minimum: 1", "minimum: 2"},
		"Outcome":      {"status == 402", "status == 403"},
		"Result":       {"id: /id", "id: /refund/id"},
		"MaxKeyLength": {"    tool: refund_payment\n", "    tool: refund_payment\n    max_key_length: 64\n"},
	} {
		t.Run("Changes"+name, func(t *testing.T) {
			t.Parallel()
			changed := strings.Replace(refund, change[0], change[1], 1)
			require.NotEqual(t, refund, changed)
			require.NotEqual(t, base, sha(t, changed))
		})
	}
}

// A file with several mistakes is refused with all of them, each with its
// line, effect and field, by line. A check that needs what an earlier one
// refused is skipped rather than reported: an unknown preset ends its
// effect's checks, an unparseable file the file's.
func TestParseReportsEveryProblem(t *testing.T) {
	t.Parallel()

	src := `effects:
  ping:
    guarantee: deduplicated
    retries: 3
    args: {type: object}
    request:
      method: FETCH
      url: "{env.STRIPE_URL}/ping?k={provider_key}"
      headers: {Host: x}
    outcome:
      - {when: status == 402, class: fatal}
  pay__now_:
    preset: stripe.refnd
    description: 12
  tix:
    description: Open a ticket.
    guarantee: reconcilable
    args: {type: object}
    request: {url: "{env.NOT_SET_ANYWHERE}/tickets?k={provider_key}"}
`
	_, err := parse(t, src, nil)
	var fes FileErrors
	require.ErrorAs(t, err, &fes)
	var got []string
	for _, fe := range fes {
		got = append(got, fmt.Sprintf("%d %s %s", fe.Line, fe.Effect, fe.Field))
	}
	require.Equal(t, []string{
		"3 ping description",    // required (the declaration's line)
		"3 ping dedupe_window",  // required for a deduplicated effect
		"4 ping retries",        // unknown field
		"7 ping request.method", // FETCH
		"9 ping request.headers.Host",
		"11 ping outcome[0].class", // fatal
		"13 pay__now_ ",            // the name River refuses
		"13 pay__now_ preset",      // unknown preset: the rest of it unchecked
		"16 tix lookup",            // required for a reconcilable effect
		"16 tix ",                  // the variable NOT_SET_ANYWHERE
	}, got, err.Error())
	require.Contains(t, err.Error(), "effects.yaml:3: effect ping: description: required\n")
	require.Len(t, strings.Split(err.Error(), "\n"), len(fes), "one problem a line")
	var fe *FileError
	require.ErrorAs(t, err, &fe, "errors.As finds the first")
	require.Equal(t, 3, fe.Line)

	t.Run("UnparseableFileIsOneProblem", func(t *testing.T) {
		t.Parallel()
		_, err := parse(t, "effects:\n  ping: [\n  pong: {\n", nil)
		require.ErrorAs(t, err, &fes)
		require.Len(t, fes, 1, err.Error())
	})
}
