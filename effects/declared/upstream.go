package declared

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
)

// Defaults of an upstream's settings (docs/effects.md, "In front of an MCP
// server").
const (
	UpstreamConnectTimeoutDefault = 10 * time.Second
	UpstreamMaxInFlightDefault    = 4
	UpstreamMissingGraceDefault   = 10 * time.Minute
	UpstreamProcessesDefault      = 1
	UpstreamRefreshDefault        = 5 * time.Minute
	UpstreamResultMaxDefault      = 64 << 10
	UpstreamResultMaxMax          = 1 << 20
	UpstreamWaitMax               = 60 * time.Second
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
	url     *template
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

	// transportSHA256 hashes what reaches the upstream: argv or URL
	// template, and the names of env and header entries.
	transportSHA256 string
	// sha256 hashes the whole declaration but descriptions: a lock written
	// for another declaration does not match it.
	sha256 string
}

type envEntry struct {
	name  string
	value *template
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
	rules        []mcpRule
	mirrored     string
	args         orderedMap
	description  string
	declarations orderedMap // as written, for the hash
}

type markerDecl struct {
	arg     string
	prepend bool
	text    *template
}

// upstreamLookup asks the upstream, through one of its pass-through tools,
// whether a recorded call acted.
type upstreamLookup struct {
	tool    string
	args    []orderedKV // name -> *template
	argT    map[string]*template
	items   *condition
	match   *condition
	found   *condition
	missing *condition
	result  []resultField
}

type mcpRule struct {
	when  *condition
	class string
	code  string
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
	return "http: " + u.url.raw
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
	m, ok := v.(orderedMap)
	if !ok {
		return nil, fail("", "must be a mapping")
	}
	if err := knownIn(m, "", upstreamFields, fail); err != nil {
		return nil, err
	}
	u := &Upstream{
		name: name, prefix: name + "_", readOnlyHints: ReadOnlyHintsTrust,
		timeout: l.cfg.EffectTimeout, connectTimeout: UpstreamConnectTimeoutDefault,
		processes: UpstreamProcessesDefault, maxInFlight: UpstreamMaxInFlightDefault,
		refresh: UpstreamRefreshDefault, resultMax: UpstreamResultMaxDefault,
		missingGrace: UpstreamMissingGraceDefault, resolved: map[string]string{},
	}
	var err error
	if u.description, err = optString(m, "description", fail); err != nil {
		return nil, err
	}

	// The transport: a command or a URL, never both. Upstream-level fields
	// take {env.*} only: an argument must never reach argv, a URL's
	// authority or a header.
	cmdV, hasCmd := m.get("command")
	urlV, hasURL := m.get("url")
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
		if e, ok := m.get("env"); ok {
			em, ok := e.(orderedMap)
			if !ok {
				return nil, fail("env", "must map variable names to values")
			}
			for _, kv := range em {
				if !envNameRE.MatchString(kv.key) {
					return nil, fail("env."+kv.key, "not a valid variable name")
				}
				t, err := l.envOnlyTemplate(text(kv.value))
				if err != nil {
					return nil, fail("env."+kv.key, "%v", err)
				}
				u.env = append(u.env, envEntry{name: kv.key, value: t})
			}
		}
		u.inherit = slices.Clone(inheritDefault)
		if in, ok := m.get("inherit"); ok {
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
		if h, ok := m.get("headers"); ok {
			hm, ok := h.(orderedMap)
			if !ok {
				return nil, fail("headers", "must map header names to values")
			}
			for _, kv := range hm {
				if !headerNameRE.MatchString(kv.key) {
					return nil, fail("headers."+kv.key, "not a valid header name")
				}
				t, err := l.envOnlyTemplate(text(kv.value))
				if err != nil {
					return nil, fail("headers."+kv.key, "%v", err)
				}
				u.headers = append(u.headers, headerDecl{name: kv.key, value: t})
			}
		}
		for _, f := range []string{"env", "inherit", "dir"} {
			if _, ok := m.get(f); ok {
				return nil, fail(f, "only a stdio upstream (command) has one")
			}
		}
	}

	if p, ok := m.get("prefix"); ok {
		s, isStr := p.(string)
		if !isStr {
			return nil, fail("prefix", "must be a string")
		}
		u.prefix = s
	}
	inc, hasInc := m.get("include")
	exc, hasExc := m.get("exclude")
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
	if ns, ok := m.get("namespaces"); ok {
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
		{"wait", &u.wait, 0, UpstreamWaitMax},
		{"timeout", &u.timeout, time.Millisecond, l.cfg.EffectTimeout},
		{"connect_timeout", &u.connectTimeout, time.Millisecond, time.Minute},
		{"refresh", &u.refresh, time.Second, 24 * time.Hour},
		{"missing_grace", &u.missingGrace, 0, 30 * 24 * time.Hour},
	}
	for _, d := range durations {
		v, ok := m.get(d.field)
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
		{"result_max", &u.resultMax, 1024, UpstreamResultMaxMax},
	}
	for _, d := range ints {
		v, ok := m.get(d.field)
		if !ok {
			continue
		}
		n, ok := asInt(v)
		if !ok || n < d.min || n > d.max {
			return nil, fail(d.field, "must be a whole number from %d to %d, not %v", d.min, d.max, v)
		}
		*d.dst = n
	}
	if r, ok := m.get("read_only_hints"); ok {
		s, _ := r.(string)
		if s != ReadOnlyHintsTrust && s != ReadOnlyHintsIgnore {
			return nil, fail("read_only_hints", "must be trust or ignore, not %v", r)
		}
		u.readOnlyHints = s
	}

	if t, ok := m.get("tools"); ok {
		tm, ok := t.(orderedMap)
		if !ok {
			return nil, fail("tools", "must map upstream tool names to their declarations")
		}
		for _, kv := range tm {
			td, err := l.upstreamTool(u, kv.key, kv.value)
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
func (l *loader) envOnlyTemplate(s string) (*template, error) {
	t, err := parseTemplate(s, false)
	if err != nil {
		return nil, err
	}
	for _, ph := range t.placeholders() {
		if ph.kind != phEnv {
			return nil, fmt.Errorf("%s: an upstream's transport takes {env.NAME} placeholders only (arguments never reach argv, a URL or a header)", ph.text)
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
		t      *template
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
		for _, ph := range us.t.placeholders() {
			v, ok := l.cfg.LookupEnv(ph.name)
			if !ok || v == "" {
				return fail(us.field, "the environment variable %s is not set (the declaration reads {env.%s})", ph.name, ph.name)
			}
			u.resolved[ph.name] = v
			if us.secret && len(v) >= SecretMinLength && !slices.Contains(u.secrets, v) {
				u.secrets = append(u.secrets, v)
			}
		}
	}
	if u.url != nil {
		raw, _, err := u.url.renderString(&renderCtx{env: u.resolved})
		if err != nil {
			return fail("url", "%v", err)
		}
		parsed, err := url.Parse(raw)
		if err != nil || parsed.Host == "" || (parsed.Scheme != "http" && parsed.Scheme != "https") {
			return fail("url", "%s must be an absolute http(s) URL", u.url.raw)
		}
		// A secret may sit in the query: it is scrubbed like a header's.
		for _, vs := range parsed.Query() {
			for _, v := range vs {
				if len(v) >= SecretMinLength && !slices.Contains(u.secrets, v) {
					u.secrets = append(u.secrets, v)
				}
			}
		}
		if parsed.Scheme != "https" && !isLoopback(parsed.Hostname()) {
			return fail("url", "%s: https unless the host is loopback", u.url.raw)
		}
		if l.cfg.LoopbackOnly && !isLoopback(parsed.Hostname()) {
			return fail("url", "%s: the sandbox and the demo reach loopback upstreams only", u.url.raw)
		}
	}
	slices.SortFunc(u.secrets, func(a, b string) int { return len(b) - len(a) })
	return nil
}

// hash computes the upstream's declaration hashes (RFC 8785 JSON).
func (u *Upstream) hash(decl orderedMap) error {
	transport := map[string]any{"command": u.command}
	if u.url != nil {
		transport = map[string]any{"url": u.url.raw}
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
	if u.sha256, err = canonicalSHA256(plain(withoutDescriptions(decl))); err != nil {
		return err
	}
	return nil
}

// withoutDescriptions drops every description member of a declaration:
// text for agents does not change what is sent.
func withoutDescriptions(v any) any {
	switch v := v.(type) {
	case orderedMap:
		out := make(orderedMap, 0, len(v))
		for _, kv := range v {
			if kv.key == "description" {
				continue
			}
			out = append(out, orderedKV{key: kv.key, value: withoutDescriptions(kv.value)})
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
	raw, err := marshalJSON(v)
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

// upstreamErrorf is errorf for a field of an upstream: the FileError names
// the upstream (and the tool, in field).
func (l *loader) upstreamErrorf(path, upstream, field, format string, args ...any) error {
	return &FileError{File: l.file, Line: l.line(path), Upstream: upstream, Field: field, Err: fmt.Errorf(format, args...)}
}

// knownIn refuses the first member of m not in fields, through fail, its
// field named prefix + member.
func knownIn(m orderedMap, prefix string, fields []string, fail func(string, string, ...any) error) error {
	for _, kv := range m {
		if !slices.Contains(fields, kv.key) {
			return fail(prefix+kv.key, "unknown field (expected one of %s)", strings.Join(fields, ", "))
		}
	}
	return nil
}

func optString(m orderedMap, field string, fail func(string, string, ...any) error) (string, error) {
	v, ok := m.get(field)
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
