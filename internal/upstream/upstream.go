package upstream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/internal/effectfile"
)

// Defaults of an upstream's settings (docs/effects.md, "In front of an MCP
// server").
const (
	ConnectTimeoutDefault = 10 * time.Second
	MaxInFlightDefault    = 4
	MissingGraceDefault   = 10 * time.Minute
	ProcessesDefault      = 1
	RefreshDefault        = 5 * time.Minute
	ResultMaxDefault      = 64 << 10
	ResultMaxMax          = 1 << 20
	// WaitDefault answers a quick upstream's call in the same call: most
	// end well within it, and a slow one answers pending after it.
	WaitDefault = 10 * time.Second
	WaitMax     = 60 * time.Second
	// RiverWorkersMax is the most workers River gives one queue: an
	// upstream's queue has processes x max_in_flight.
	RiverWorkersMax = 10000
)

// Read-only hint policies.
const (
	ReadOnlyHintsTrust  = "trust"
	ReadOnlyHintsIgnore = "ignore"
)

var (
	upstreamNameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,31}$`)
	markerArgRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
)

// Argument names every recorded tool takes for outbox itself, stripped
// before a call is forwarded: an upstream tool that already has one cannot
// be mirrored under its own schema.
var reservedArgs = []string{"idempotency_key", "new_action", "require_approval"}

// upstreamFields are the members of an upstream's declaration, and toolFields
// those of one tool's.
var (
	upstreamFields = []string{"description", "command", "env", "inherit", "dir", "url", "headers", "prefix", "include", "exclude",
		"namespaces", "wait", "timeout", "connect_timeout", "processes", "max_in_flight", "read_only_hints", "refresh",
		"result_max", "missing_grace", "tools"}
	toolFields = []string{"guarantee", "marker", "lookup", "settle", "key_arg", "dedupe_window", "retry_safe", "passthrough",
		"outcome", "name", "args", "description"}
	markerFields         = []string{"arg", "append", "prepend"}
	upstreamLookupFields = []string{"tool", "args", "items", "match", "found", "missing", "result"}
)

// inheritDefault are the variables a stdio child gets from outboxd's
// environment when its declaration names none.
var inheritDefault = []string{"PATH", "HOME", "LANG", "TMPDIR"}

// Upstream is a declared MCP server that outbox stands in front of: how to
// reach it, which of its tools to mirror, and how each is recorded.
type Upstream struct {
	name        string
	description string

	// stdio
	command []string
	env     []envEntry
	inherit []string
	dir     string

	// streamable HTTP
	url     *effectfile.Template
	headers []headerDecl

	prefix         string
	include        []string
	exclude        []string
	namespaces     []string
	wait           time.Duration
	timeout        time.Duration
	connectTimeout time.Duration
	processes      int
	maxInFlight    int
	readOnlyHints  string
	refresh        time.Duration
	resultMax      int
	missingGrace   time.Duration
	tools          []*ToolDecl

	// resolved holds the {env.*} values the upstream reads, and secrets
	// those that are scrubbed (env, headers and a URL's query).
	resolved map[string]string
	secrets  []string
	// endpoints are the URL as rendered, in the forms an error may print
	// it: scrubbed to the declared template, since a secret may sit in its
	// path.
	endpoints []string

	// transportSHA256 hashes what reaches the upstream: argv or URL
	// template, and the names of env and header entries.
	transportSHA256 string
	// sha256 hashes the declaration but descriptions and runtime settings
	// (what the lock records depends on): a lock written for another
	// declaration does not match it.
	sha256 string
	// fieldSHA256 hashes each of those fields, by name.
	fieldSHA256 map[string]string
}

type envEntry struct {
	name  string
	value *effectfile.Template
}

// ToolDecl is the declaration of one upstream tool, by its upstream name.
type ToolDecl struct {
	name         string
	passthrough  bool
	guarantee    effects.Guarantee
	marker       *markerDecl
	lookup       *upstreamLookup
	settle       time.Duration
	keyArg       string
	window       time.Duration
	retrySafe    bool
	rules        []effectfile.Rule
	mirrored     string
	args         effectfile.Map
	description  string
	declarations effectfile.Map // as written, for the hash
}

type markerDecl struct {
	arg     string
	prepend bool
	text    *effectfile.Template
}

// upstreamLookup asks whether a recorded call acted: the upstream, through
// one of its pass-through tools (tool), or an HTTP API (http).
type upstreamLookup struct {
	http    *declared.HTTPLookup
	tool    string
	args    []effectfile.KV // name -> *template
	argT    map[string]*effectfile.Template
	items   *effectfile.Condition
	match   *effectfile.Condition
	found   *effectfile.Condition
	missing *effectfile.Condition
	result  []effectfile.ResultField
}

// Name is the upstream's name.
func (u *Upstream) Name() string { return u.name }

// Description is the upstream's description, as declared.
func (u *Upstream) Description() string { return u.description }

// Stdio reports whether outboxd runs the upstream as a child process.
func (u *Upstream) Stdio() bool { return len(u.command) > 0 }

// Transport names the transport for people: the argv or the URL template.
func (u *Upstream) Transport() string {
	if u.Stdio() {
		return "stdio: " + strings.Join(u.command, " ")
	}
	return "http: " + u.url.Raw
}

// Wait is how long a recorded call waits for its intent's end.
func (u *Upstream) Wait() time.Duration { return u.wait }

// Namespaces are the namespaces that see the upstream's tools; empty means all.
func (u *Upstream) Namespaces() []string { return slices.Clone(u.namespaces) }

// Workers is how many calls the upstream takes at once from one process.
func (u *Upstream) Workers() int { return u.processes * u.maxInFlight }

// DeclarationSHA256 identifies the upstream's declaration (descriptions
// aside): the lock records it, and a lock for another declaration refuses
// start.
func (u *Upstream) DeclarationSHA256() string { return u.sha256 }

// HasOutcomeRules reports whether the upstream tool name has outcome rules.
func (u *Upstream) HasOutcomeRules(name string) bool {
	d := u.toolDecl(name)
	return d != nil && len(d.rules) > 0
}

// toolDecl returns the declaration of the upstream tool name, or nil.
func (u *Upstream) toolDecl(name string) *ToolDecl {
	for _, t := range u.tools {
		if t.name == name {
			return t
		}
	}
	return nil
}

// mirrors reports whether the upstream tool name is mirrored at all
// (include and exclude).
func (u *Upstream) mirrors(name string) bool {
	if len(u.include) > 0 {
		return slices.Contains(u.include, name)
	}
	return !slices.Contains(u.exclude, name)
}

// upstream checks one upstream's declaration.
func (l *loader) upstream(name string, v any) (*Upstream, error) {
	base := "$.upstreams." + name
	fail := func(field, format string, args ...any) error {
		path := base
		if field != "" {
			path += "." + field
		}
		return l.upstreamErrorf(path, name, field, format, args...)
	}
	if !upstreamNameRE.MatchString(name) {
		return nil, fail("", "an upstream's name must match %s", upstreamNameRE)
	}
	m, ok := v.(effectfile.Map)
	if !ok {
		return nil, fail("", "must be a mapping")
	}
	if err := knownIn(m, "", upstreamFields, fail); err != nil {
		return nil, err
	}
	u := &Upstream{
		name: name, prefix: name + "_", readOnlyHints: ReadOnlyHintsTrust,
		timeout: l.cfg.EffectTimeout, connectTimeout: ConnectTimeoutDefault,
		processes: ProcessesDefault, maxInFlight: MaxInFlightDefault,
		refresh: RefreshDefault, resultMax: ResultMaxDefault,
		missingGrace: MissingGraceDefault, resolved: map[string]string{}, wait: WaitDefault,
	}
	var err error
	if u.description, err = optString(m, "description", fail); err != nil {
		return nil, err
	}

	// The transport: a command or a URL, never both. Upstream-level fields
	// take {env.*} only: an argument must never reach argv, a URL's
	// authority or a header.
	cmdV, hasCmd := m.Get("command")
	urlV, hasURL := m.Get("url")
	switch {
	case hasCmd && hasURL:
		return nil, fail("url", "an upstream has a command (stdio) or a url (streamable HTTP), not both")
	case !hasCmd && !hasURL:
		return nil, fail("command", "required: a command (stdio) or a url (streamable HTTP)")
	case hasCmd:
		list, ok := cmdV.([]any)
		if !ok || len(list) == 0 {
			return nil, fail("command", "must be a list: the program and its arguments (argv), run without a shell; a string such as %q would need one", fmt.Sprint(cmdV))
		}
		for i, a := range list {
			s, ok := a.(string)
			if !ok || s == "" {
				return nil, fail(fmt.Sprintf("command[%d]", i), "must be a non-empty string")
			}
			if strings.ContainsAny(s, "{}") {
				return nil, fail(fmt.Sprintf("command[%d]", i), "holds no placeholder: argv is fixed by the file (pass secrets through env)")
			}
			u.command = append(u.command, s)
		}
		if e, ok := m.Get("env"); ok {
			em, ok := e.(effectfile.Map)
			if !ok {
				return nil, fail("env", "must map variable names to values")
			}
			for _, kv := range em {
				if !effectfile.EnvNameRE.MatchString(kv.Key) {
					return nil, fail("env."+kv.Key, "not a valid variable name")
				}
				t, err := l.envOnlyTemplate(effectfile.Text(kv.Value))
				if err != nil {
					return nil, fail("env."+kv.Key, "%v", err)
				}
				u.env = append(u.env, envEntry{name: kv.Key, value: t})
			}
		}
		u.inherit = slices.Clone(inheritDefault)
		if in, ok := m.Get("inherit"); ok {
			if u.inherit, err = stringList(in); err != nil {
				return nil, fail("inherit", "%v", err)
			}
		}
		if u.dir, err = optString(m, "dir", fail); err != nil {
			return nil, err
		}
	default:
		s, _ := urlV.(string)
		if s == "" {
			return nil, fail("url", "must be a non-empty string")
		}
		if u.url, err = l.envOnlyTemplate(s); err != nil {
			return nil, fail("url", "%v", err)
		}
		if h, ok := m.Get("headers"); ok {
			hm, ok := h.(effectfile.Map)
			if !ok {
				return nil, fail("headers", "must map header names to values")
			}
			for _, kv := range hm {
				if !effectfile.HeaderNameRE.MatchString(kv.Key) {
					return nil, fail("headers."+kv.Key, "not a valid header name")
				}
				t, err := l.envOnlyTemplate(effectfile.Text(kv.Value))
				if err != nil {
					return nil, fail("headers."+kv.Key, "%v", err)
				}
				u.headers = append(u.headers, headerDecl{name: kv.Key, value: t})
			}
		}
		for _, f := range []string{"env", "inherit", "dir"} {
			if _, ok := m.Get(f); ok {
				return nil, fail(f, "only a stdio upstream (command) has one")
			}
		}
	}

	if p, ok := m.Get("prefix"); ok {
		s, isStr := p.(string)
		if !isStr {
			return nil, fail("prefix", "must be a string")
		}
		u.prefix = s
	}
	inc, hasInc := m.Get("include")
	exc, hasExc := m.Get("exclude")
	if hasInc && hasExc {
		return nil, fail("exclude", "include and exclude do not go together")
	}
	if hasInc {
		if u.include, err = stringList(inc); err != nil {
			return nil, fail("include", "%v", err)
		}
	}
	if hasExc {
		if u.exclude, err = stringList(exc); err != nil {
			return nil, fail("exclude", "%v", err)
		}
	}
	if ns, ok := m.Get("namespaces"); ok {
		if u.namespaces, err = stringList(ns); err != nil {
			return nil, fail("namespaces", "%v", err)
		}
	}
	durations := []struct {
		field string
		dst   *time.Duration
		min   time.Duration
		max   time.Duration
	}{
		{"wait", &u.wait, 0, WaitMax},
		{"timeout", &u.timeout, time.Millisecond, l.cfg.EffectTimeout},
		{"connect_timeout", &u.connectTimeout, time.Millisecond, time.Minute},
		{"refresh", &u.refresh, time.Second, 24 * time.Hour},
		{"missing_grace", &u.missingGrace, 0, 30 * 24 * time.Hour},
	}
	for _, d := range durations {
		v, ok := m.Get(d.field)
		if !ok {
			continue
		}
		s, _ := v.(string)
		parsed, err := time.ParseDuration(s)
		if err != nil || parsed < d.min || parsed > d.max {
			return nil, fail(d.field, "must be a Go duration from %s to %s, not %v", d.min, d.max, v)
		}
		*d.dst = parsed
	}
	ints := []struct {
		field    string
		dst      *int
		min, max int
	}{
		{"processes", &u.processes, 1, 64},
		{"max_in_flight", &u.maxInFlight, 1, 1024},
		{"result_max", &u.resultMax, 1024, ResultMaxMax},
	}
	for _, d := range ints {
		v, ok := m.Get(d.field)
		if !ok {
			continue
		}
		n, ok := effectfile.AsInt(v)
		if !ok || n < d.min || n > d.max {
			return nil, fail(d.field, "must be a whole number from %d to %d, not %v", d.min, d.max, v)
		}
		*d.dst = n
	}
	if n := u.processes * u.maxInFlight; n > RiverWorkersMax {
		// River refuses a queue of more workers: serve would not start.
		return nil, fail("max_in_flight", "processes x max_in_flight is %d x %d = %d: a River queue takes at most %d workers", u.processes, u.maxInFlight, n, RiverWorkersMax)
	}
	if r, ok := m.Get("read_only_hints"); ok {
		s, _ := r.(string)
		if s != ReadOnlyHintsTrust && s != ReadOnlyHintsIgnore {
			return nil, fail("read_only_hints", "must be trust or ignore, not %v", r)
		}
		u.readOnlyHints = s
	}

	if t, ok := m.Get("tools"); ok {
		tm, ok := t.(effectfile.Map)
		if !ok {
			return nil, fail("tools", "must map upstream tool names to their declarations")
		}
		for _, kv := range tm {
			td, err := l.upstreamTool(u, kv.Key, kv.Value)
			if err != nil {
				return nil, err
			}
			u.tools = append(u.tools, td)
		}
	}
	for _, td := range u.tools {
		if td.lookup != nil && td.lookup.tool != "" {
			if other := u.toolDecl(td.lookup.tool); other != nil && !other.passthrough {
				return nil, fail("tools."+td.name+".lookup.tool", "%s is recorded (it is declared with a guarantee): a look-up calls a pass-through tool only, or it would be recorded itself", td.lookup.tool)
			}
		}
	}

	if err := l.resolveUpstreamEnv(u, fail); err != nil {
		return nil, err
	}
	if err := u.hash(m); err != nil {
		return nil, fail("", "%v", err)
	}
	return u, nil
}

// envOnlyTemplate parses s, which may hold {env.*} placeholders only.
func (l *loader) envOnlyTemplate(s string) (*effectfile.Template, error) {
	t, err := effectfile.ParseTemplate(s, false)
	if err != nil {
		return nil, err
	}
	for _, ph := range t.Placeholders() {
		if ph.Kind != effectfile.KindEnv {
			return nil, fmt.Errorf("%s: an upstream's transport takes {env.NAME} placeholders only (arguments never reach argv, a URL or a header)", ph.Text)
		}
	}
	return t, nil
}

// resolveUpstreamEnv reads the {env.*} values the transport names, and
// checks the URL: https unless its host is loopback, and loopback only in
// the sandbox.
func (l *loader) resolveUpstreamEnv(u *Upstream, fail func(string, string, ...any) error) error {
	type use struct {
		field  string
		t      *effectfile.Template
		secret bool
	}
	var uses []use
	for _, e := range u.env {
		uses = append(uses, use{"env." + e.name, e.value, true})
	}
	for _, h := range u.headers {
		uses = append(uses, use{"headers." + h.name, h.value, true})
	}
	if u.url != nil {
		uses = append(uses, use{"url", u.url, false})
	}
	if l.cfg.NoEnv {
		return nil
	}
	for _, us := range uses {
		for _, ph := range us.t.Placeholders() {
			v, ok := l.cfg.LookupEnvFunc(ph.Name)
			if !ok || v == "" {
				return fail(us.field, "the environment variable %s is not set (the declaration reads {env.%s})", ph.Name, ph.Name)
			}
			u.resolved[ph.Name] = v
			if us.secret && len(v) >= effectfile.SecretMinLength && !slices.Contains(u.secrets, v) {
				u.secrets = append(u.secrets, v)
			}
		}
	}
	if u.url != nil {
		raw, _, err := u.url.RenderString(&effectfile.RenderCtx{Env: u.resolved})
		if err != nil {
			return fail("url", "%v", err)
		}
		parsed, err := url.Parse(raw)
		if err != nil || parsed.Host == "" || (parsed.Scheme != "http" && parsed.Scheme != "https") {
			return fail("url", "%s must be an absolute http(s) URL", u.url.Raw)
		}
		// A secret may sit in the query: it is scrubbed like a header's.
		for _, vs := range parsed.Query() {
			for _, v := range vs {
				if len(v) >= effectfile.SecretMinLength && !slices.Contains(u.secrets, v) {
					u.secrets = append(u.secrets, v)
				}
			}
		}
		// A secret may sit in the path too, where nothing tells it from
		// the rest: the whole URL, as rendered or as Go prints it, is
		// shown as its template.
		for _, form := range []string{raw, parsed.String(), parsed.Redacted()} {
			if form != u.url.Raw && !slices.Contains(u.endpoints, form) {
				u.endpoints = append(u.endpoints, form)
			}
		}
		if parsed.Scheme != "https" && !effectfile.IsLoopback(parsed.Hostname()) {
			return fail("url", "%s: https unless the host is loopback", u.url.Raw)
		}
		if l.cfg.LoopbackOnly && !effectfile.IsLoopback(parsed.Hostname()) {
			return fail("url", "%s: the sandbox and the demo reach loopback upstreams only", u.url.Raw)
		}
	}
	slices.SortFunc(u.secrets, func(a, b string) int { return len(b) - len(a) })
	slices.SortFunc(u.endpoints, func(a, b string) int { return len(b) - len(a) })
	return nil
}

// hash computes the upstream's declaration hashes (RFC 8785 JSON).
func (u *Upstream) hash(decl effectfile.Map) error {
	transport := map[string]any{"command": u.command}
	if u.url != nil {
		transport = map[string]any{"url": u.url.Raw}
	}
	var envNames, headerNames []string
	for _, e := range u.env {
		envNames = append(envNames, e.name)
	}
	for _, h := range u.headers {
		headerNames = append(headerNames, h.name)
	}
	transport["env"], transport["headers"] = envNames, headerNames
	sum, err := canonicalSHA256(transport)
	if err != nil {
		return err
	}
	u.transportSHA256 = sum
	pinned := pinnedFields(decl)
	if u.sha256, err = canonicalSHA256(effectfile.Plain(pinned)); err != nil {
		return err
	}
	// Each field's own hash, for a message that says what changed since
	// the lock was pinned.
	u.fieldSHA256 = map[string]string{}
	for _, kv := range pinned {
		if u.fieldSHA256[kv.Key], err = canonicalSHA256(effectfile.Plain(kv.Value)); err != nil {
			return err
		}
	}
	return nil
}

// runtimeFields are an upstream's settings that change how outbox calls
// it, not what the lock records of it (its tools and their classes): a
// change needs no new pin.
var runtimeFields = []string{"wait", "timeout", "connect_timeout", "processes", "max_in_flight", "refresh", "result_max", "missing_grace", "namespaces"}

// pinnedFields is the declaration the lock is pinned for: without
// descriptions (text for agents does not change what is sent) and runtime
// settings.
func pinnedFields(decl effectfile.Map) effectfile.Map {
	out := make(effectfile.Map, 0, len(decl))
	for _, kv := range withoutDescriptions(decl).(effectfile.Map) {
		if !slices.Contains(runtimeFields, kv.Key) {
			out = append(out, kv)
		}
	}
	return out
}

// changedSince names the fields of the declaration whose hash differs
// from pinned (a lock's), "" when the lock does not say.
func (u *Upstream) changedSince(pinned map[string]string) string {
	if len(pinned) == 0 {
		return ""
	}
	var changed []string
	for _, f := range upstreamFields {
		if u.fieldSHA256[f] != pinned[f] {
			changed = append(changed, f)
		}
	}
	return strings.Join(changed, ", ")
}

// withoutDescriptions drops every description member of a declaration:
// text for agents does not change what is sent.
func withoutDescriptions(v any) any {
	switch v := v.(type) {
	case effectfile.Map:
		out := make(effectfile.Map, 0, len(v))
		for _, kv := range v {
			if kv.Key == "description" {
				continue
			}
			out = append(out, effectfile.KV{Key: kv.Key, Value: withoutDescriptions(kv.Value)})
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = withoutDescriptions(item)
		}
		return out
	}
	return v
}

// canonicalSHA256 is the hex sha256 of v's RFC 8785 form.
func canonicalSHA256(v any) (string, error) {
	raw, err := effectfile.MarshalJSON(v)
	if err != nil {
		return "", err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// knownIn refuses the first member of m not in fields, through fail, its
// field named prefix + member.
func knownIn(m effectfile.Map, prefix string, fields []string, fail func(string, string, ...any) error) error {
	for _, kv := range m {
		if !slices.Contains(fields, kv.Key) {
			return fail(prefix+kv.Key, "unknown field (expected one of %s)", strings.Join(fields, ", "))
		}
	}
	return nil
}

func optString(m effectfile.Map, field string, fail func(string, string, ...any) error) (string, error) {
	v, ok := m.Get(field)
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fail(field, "must be a string")
	}
	return s, nil
}

func stringList(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("must be a list of strings")
	}
	out := make([]string, 0, len(list))
	for _, item := range list {
		s, ok := item.(string)
		if !ok || s == "" {
			return nil, fmt.Errorf("must be a list of non-empty strings")
		}
		out = append(out, s)
	}
	return out, nil
}
