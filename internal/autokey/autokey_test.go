package autokey_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/autokey"
	"github.com/outbox-dev/outbox/internal/testdb"
	"github.com/outbox-dev/outbox/outbox"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func TestCanonicalize(t *testing.T) {
	t.Parallel()

	for name, tt := range map[string]struct{ in, want string }{
		// RFC 8785 section 3.2.3's example, and the spelling of numbers.
		"RFC8785Sample": {
			`{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		"KeyOrder":       {`{"b": 1, "a": {"d": 2, "c": 3}}`, `{"a":{"c":3,"d":2},"b":1}`},
		"WhiteSpace":     {" {\n\t\"a\" :\r [ 1 , 2 ] } ", `{"a":[1,2]}`},
		"Integers":       {`{"a": 1.0, "b": 1e0, "c": 10E-1, "d": -0}`, `{"a":1,"b":1,"c":1,"d":0}`},
		"Escapes":        {`{"\u0061": "\u00e9\ud83d\ude00"}`, `{"a":"é😀"}`},
		"UTF16KeyOrder":  {`{"\ud83d\ude00": 1, "\uffff": 2}`, `{"😀":1,"￿":2}`}, // sorted by UTF-16 code units, not code points
		"ArrayOrderKept": {`[3, 1, 2]`, `[3,1,2]`},
		"Empty":          {`{}`, `{}`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := autokey.Canonicalize([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}

	for name, in := range map[string]string{
		"DuplicateName":  `{"a": 1, "a": 2}`,
		"NestedDup":      `{"x": {"a": 1, "a": 1}}`,
		"OutOfRange":     `{"a": 1e400}`,
		"InvalidUTF8":    "{\"a\": \"\xff\"}",
		"LoneSurrogate":  `{"a": "\ud800"}`,
		"TrailingData":   `{} {}`,
		"NotJSON":        `{a: 1}`,
		"Nothing":        ``,
		"TrailingComma":  `{"a": 1,}`,
		"UnquotedString": `{"a": hello}`,
	} {
		t.Run("Refuses"+name, func(t *testing.T) {
			t.Parallel()
			_, err := autokey.Canonicalize([]byte(in))
			require.ErrorContains(t, err, "cannot be put in canonical form (RFC 8785)")
		})
	}
}

// TestCanonicalAgreesWithJSONB checks the canonical form against the rule
// that decides "same action": PostgreSQL's jsonb equality. Pairs equal as
// jsonb have one canonical form, pairs that differ have two, except where
// the package doc says they part.
func TestCanonicalAgreesWithJSONB(t *testing.T) {
	t.Parallel()

	pool := testdb.Pool(t)
	for name, tt := range map[string]struct {
		a, b  string
		equal bool
	}{
		"KeyOrder":           {`{"a": 1, "b": 2}`, `{"b": 2, "a": 1}`, true},
		"NestedKeyOrder":     {`{"x": {"a": [1, {"c": 3, "d": 4}]}}`, `{"x": {"a": [1, {"d": 4, "c": 3}]}}`, true},
		"WhiteSpace":         {`{"a":[1,2]}`, " { \"a\" : [ 1 ,\n 2 ] } ", true},
		"UnicodeEscapes":     {`{"name": "Jos\u00e9"}`, `{"name": "José"}`, true},
		"EscapedKey":         {`{"\u0061": 1}`, `{"a": 1}`, true},
		"SolidusEscape":      {`{"a": "\/"}`, `{"a": "/"}`, true},
		"OneAndOnePointZero": {`{"amount": 1}`, `{"amount": 1.0}`, true},
		"OneAndOneE0":        {`{"amount": 1}`, `{"amount": 1e0}`, true},
		"Exponents":          {`{"amount": 1500}`, `{"amount": 1.5e3}`, true},
		"NegativeZero":       {`{"a": 0}`, `{"a": -0}`, true},
		"OtherNumber":        {`{"amount": 1}`, `{"amount": 2}`, false},
		"NumberVsString":     {`{"amount": 1}`, `{"amount": "1"}`, false},
		"ArrayOrder":         {`{"to": ["a", "b"]}`, `{"to": ["b", "a"]}`, false},
		"ExtraField":         {`{"a": 1}`, `{"a": 1, "b": null}`, false},
		"NullVsAbsent":       {`{"a": null}`, `{}`, false},
		"Case":               {`{"currency": "eur"}`, `{"currency": "EUR"}`, false},
		// Unicode normalization is neither's business: é precomposed and
		// e + combining acute are other strings to both.
		"Normalization": {`{"a": "\u00e9"}`, `{"a": "e\u0301"}`, false},
		"TrueVsOne":     {`{"a": true}`, `{"a": 1}`, false},
		"EmptyArrayObj": {`{"a": []}`, `{"a": {}}`, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var jsonbEqual bool
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT $1::jsonb = $2::jsonb`, tt.a, tt.b).Scan(&jsonbEqual))
			require.Equal(t, tt.equal, jsonbEqual, "jsonb")
			ca, err := autokey.Canonicalize([]byte(tt.a))
			require.NoError(t, err)
			cb, err := autokey.Canonicalize([]byte(tt.b))
			require.NoError(t, err)
			require.Equal(t, tt.equal, string(ca) == string(cb), "canonical forms %s and %s", ca, cb)
		})
	}

	// Where they part, as documented: numbers beyond double precision are
	// one number to RFC 8785 and two to jsonb. Such calls share an automatic
	// key, and the second is refused as idempotency_key_reused.
	t.Run("BeyondDoublePrecision", func(t *testing.T) {
		t.Parallel()
		a, b := `{"amount": 9007199254740993}`, `{"amount": 9007199254740992}`
		var jsonbEqual bool
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT $1::jsonb = $2::jsonb`, a, b).Scan(&jsonbEqual))
		require.False(t, jsonbEqual)
		ca, err := autokey.Canonicalize([]byte(a))
		require.NoError(t, err)
		cb, err := autokey.Canonicalize([]byte(b))
		require.NoError(t, err)
		require.Equal(t, string(ca), string(cb))
	})
}

func TestWindowStart(t *testing.T) {
	t.Parallel()

	window := 10 * time.Minute
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return tm
	}
	for _, tt := range []struct{ t, want string }{
		{"2026-12-02T10:10:00Z", "2026-12-02T10:10:00Z"},
		{"2026-12-02T10:19:59.999999999Z", "2026-12-02T10:10:00Z"},
		{"2026-12-02T10:20:00Z", "2026-12-02T10:20:00Z"},
		{"2026-12-02T11:25:00+01:00", "2026-12-02T10:20:00Z"}, // the zone does not matter
		{"1969-12-31T23:55:00Z", "1969-12-31T23:50:00Z"},      // before the epoch, still floor
	} {
		require.Equal(t, at(tt.want), autokey.WindowStart(at(tt.t), window), tt.t)
	}
	require.Panics(t, func() { autokey.WindowStart(time.Now(), 0) })
}

func TestKey(t *testing.T) {
	t.Parallel()

	start := time.Date(2026, 12, 2, 10, 10, 0, 0, time.UTC)
	args, err := autokey.Canonicalize([]byte(`{"customer": "cus_1", "amount": 1999, "currency": "eur"}`))
	require.NoError(t, err)

	key := autokey.Key("charge_card", args, start)
	require.Regexp(t, `^auto:charge_card:20261202T101000Z:[0-9a-f]{64}$`, key)
	require.Len(t, key, 98)
	require.NoError(t, outbox.ValidateKey(key))
	require.NotContains(t, key, "cus_1", "a key carries no argument")

	require.Equal(t, key, autokey.Key("charge_card", args, start.In(time.FixedZone("X", 3600))), "same instant")
	require.NotEqual(t, key, autokey.Key("send_email", args, start))
	require.NotEqual(t, key, autokey.Key("charge_card", args, start.Add(time.Nanosecond)))
	other, err := autokey.Canonicalize([]byte(`{"customer": "cus_1", "amount": 2000, "currency": "eur"}`))
	require.NoError(t, err)
	require.NotEqual(t, key, autokey.Key("charge_card", other, start))

	// The longest tool names still give valid keys.
	require.NoError(t, outbox.ValidateKey(autokey.Key(strings.Repeat("t", 64), args, start)))
}

func TestLockID(t *testing.T) {
	t.Parallel()

	args := []byte(`{"a":1}`)
	require.Equal(t, autokey.LockID("default", "charge_card", args), autokey.LockID("default", "charge_card", args))
	require.NotEqual(t, autokey.LockID("default", "charge_card", args), autokey.LockID("other", "charge_card", args))
	require.NotEqual(t, autokey.LockID("default", "charge_card", args), autokey.LockID("default", "send_email", args))
	// Fields are length-prefixed: moving a byte between them changes the id.
	require.NotEqual(t, autokey.LockID("ab", "c", args), autokey.LockID("a", "bc", args))
}

// FuzzCanonicalize checks, on any input, that Canonicalize never panics and
// that what it accepts is valid JSON, canonical already (a second pass
// changes nothing), the same JSON value as the input, and hashes to a valid
// key.
func FuzzCanonicalize(f *testing.F) {
	for _, seed := range []string{
		`{"customer": "cus_1", "amount": 1999, "currency": "eur"}`,
		`{"b": [1, 1.0, 1e0, -0, 0.1, 1e21, 1e-7], "a": {"nested": [true, false, null]}}`,
		`{"\u00e9": "\ud83d\ude00", "esc": "\"\\\/\b\f\n\r\t\u0001"}`,
		`{"a": 1, "a": 2}`,
		`{"a": 1e400}`,
		"{\"a\": \"\xff\"}",
		`[[[[[[[[[[]]]]]]]]]]`,
		`"just a string"`,
		`12345678901234567890`,
		``,
	} {
		f.Add([]byte(seed))
	}
	start := time.Date(2026, 12, 2, 10, 10, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, in []byte) {
		canonical, err := autokey.Canonicalize(in)
		if err != nil {
			return
		}
		require.True(t, json.Valid(canonical), "canonical form %q is not JSON", canonical)
		again, err := autokey.Canonicalize(canonical)
		require.NoError(t, err)
		require.Equal(t, string(canonical), string(again), "not idempotent")

		var a, b any
		require.NoError(t, json.Unmarshal(in, &a))
		require.NoError(t, json.Unmarshal(canonical, &b))
		require.Equal(t, a, b, "canonical form changed the value")

		require.NoError(t, outbox.ValidateKey(autokey.Key("charge_card", canonical, start)))
	})
}
