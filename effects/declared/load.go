package declared

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/google/cel-go/cel"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/internal/httpsend"
)

// ProviderKeyLength is the length of every provider key outbox sends: a
// declared max_key_length below it is refused.
const ProviderKeyLength = 47

// Config configures Load and Parse.
type Config struct {
	// EffectTimeout is OUTBOX_EFFECT_TIMEOUT: a request's default and
	// maximum timeout. Defaults to 30 s.
	EffectTimeout time.Duration

	// HTTPClient sends the requests. It must not follow redirects.
	// Defaults to a client of httpsend.NewClient.
	HTTPClient *http.Client

	// LookupEnv reads {env.*} variables. Defaults to os.LookupEnv.
	LookupEnv func(name string) (string, bool)

	// LoopbackOnly refuses any base whose host is not loopback: the
	// sandbox's and the demo's rule. Defaults to false.
	LoopbackOnly bool

	// NoEnv skips reading {env.*} (outboxd effects check --no-env): a base
	// from a variable is then not checked. Defaults to false.
	NoEnv bool

	// OnRuleError is called, with the effect's name, when an outcome rule
	// fails to evaluate (and so does not match). Defaults to none.
	OnRuleError func(effect string)

	// Reserved are names no declared effect may take (the built-ins').
	// Defaults to none.
	Reserved []string

	// ReservedTools are MCP tool names no declared effect may take.
	// Defaults to none.
	ReservedTools []string

	// Retention is OUTBOX_RETENTION: a dedupe window longer than it is
	// refused (a key pruned before its window ends could be reused for a
	// new action while the provider still remembers it). Zero skips the
	// check.
	Retention time.Duration
}

// FileError is a declaration refused: which file, line, effect and field.
type FileError struct {
	File   string
	Line   int
	Effect string
	// Upstream names the MCP upstream at fault (its tool, in Field).
	Upstream string
	Field    string
	Err      error
}

// Error implements error: "effects.yaml:12: effect refund: dedupe_window: ...".
func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Effect != "" {
		b.WriteString("effect " + e.Effect + ": ")
	}
	if e.Upstream != "" {
		b.WriteString("upstream " + e.Upstream + ": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the underlying error.
func (e *FileError) Unwrap() error { return e.Err }

// Load reads and checks the effects file at path (YAML 1.2 or JSON).
func Load(path string, config *Config) ([]*Effect, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	return Parse(path, data, config)
}

var (
	toolNameRE   = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	codeRE       = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// File is an effects file's declarations: HTTP effects and MCP
// upstreams.
type File struct {
	// Effects are the declared HTTP effects.
	Effects []*Effect
	// Upstreams are the declared MCP upstreams; their tools come from the
	// lock (Bind).
	Upstreams []*Upstream
}

// Parse checks a file's contents; file names it in errors. It returns the
// declared HTTP effects; ParseFile returns the upstreams too.
func Parse(file string, data []byte, config *Config) ([]*Effect, error) {
	f, err := ParseFile(file, data, config)
	if err != nil {
		return nil, err
	}
	return f.Effects, nil
}

// LoadFile reads and checks the effects file at path: its effects and its
// upstreams.
func LoadFile(path string, config *Config) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	return ParseFile(path, data, config)
}

// ParseFile checks a file's contents; file names it in errors.
func ParseFile(file string, data []byte, config *Config) (*File, error) {
	cfg := Config{}
	if config != nil {
		cfg = *config
	}
	if cfg.EffectTimeout <= 0 {
		cfg.EffectTimeout = 30 * time.Second
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = httpsend.NewClient(64)
	} else {
		cfg.HTTPClient = httpsend.Wrap(cfg.HTTPClient)
	}

	astFile, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, yamlError(file, err)
	}
	var doc any
	if err := yaml.UnmarshalWithOptions(data, &doc, yaml.UseOrderedMap()); err != nil {
		return nil, yamlError(file, err)
	}
	l := &loader{file: file, ast: astFile, cfg: &cfg}
	root, ok := ordered(doc).(orderedMap)
	if !ok {
		return nil, &FileError{File: file, Line: 1, Err: errors.New("the file must be a mapping with effects, upstreams or both")}
	}
	if err := l.known(root, "$", "", []string{"effects", "upstreams"}); err != nil {
		return nil, err
	}
	decls, hasEffects := root.get("effects")
	declMap, isMap := decls.(orderedMap)
	ups, hasUpstreams := root.get("upstreams")
	upMap, upIsMap := ups.(orderedMap)
	switch {
	case hasEffects && (!isMap || len(declMap) == 0):
		return nil, l.errorf("$.effects", "", "effects", "must map each effect's name to its declaration")
	case hasUpstreams && (!upIsMap || len(upMap) == 0):
		return nil, l.errorf("$.upstreams", "", "upstreams", "must map each upstream's name to its declaration")
	case !hasEffects && !hasUpstreams:
		return nil, l.errorf("$", "", "effects", "the file declares nothing: effects, upstreams or both")
	}
	out := &File{}
	tools := map[string]string{}
	for _, reserved := range cfg.ReservedTools {
		tools[reserved] = "a built-in effect"
	}
	for _, kv := range declMap {
		e, err := l.effect(kv.key, kv.value)
		if err != nil {
			return nil, err
		}
		if other, ok := tools[e.tool]; ok {
			return nil, l.errorf("$.effects."+kv.key+".tool", kv.key, "tool", "the MCP tool name %q is taken by %s", e.tool, other)
		}
		tools[e.tool] = "effect " + e.name
		out.Effects = append(out.Effects, e)
	}
	for _, kv := range upMap {
		u, err := l.upstream(kv.key, kv.value)
		if err != nil {
			return nil, err
		}
		out.Upstreams = append(out.Upstreams, u)
	}
	return out, nil
}

// yamlError turns the parser's error into a FileError with its line.
func yamlError(file string, err error) error {
	var syntax yaml.Error
	if errors.As(err, &syntax) {
		line := 0
		if tok := syntax.GetToken(); tok != nil && tok.Position != nil {
			line = tok.Position.Line
		}
		return &FileError{File: file, Line: line, Err: errors.New(strings.TrimSpace(firstLine(syntax.GetMessage())))}
	}
	return &FileError{File: file, Err: errors.New(firstLine(err.Error()))}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// ordered converts the YAML decoder's values: yaml.MapSlice into
// orderedMap, recursively; other values as they are.
func ordered(v any) any {
	switch v := v.(type) {
	case yaml.MapSlice:
		m := make(orderedMap, 0, len(v))
		for _, item := range v {
			m = append(m, orderedKV{key: fmt.Sprint(item.Key), value: ordered(item.Value)})
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = ordered(item)
		}
		return out
	}
	return v
}

func (m orderedMap) get(key string) (any, bool) {
	for _, kv := range m {
		if kv.key == key {
			return kv.value, true
		}
	}
	return nil, false
}

// plain converts an orderedMap tree into maps, for JSON Schema.
func plain(v any) any {
	switch v := v.(type) {
	case orderedMap:
		m := make(map[string]any, len(v))
		for _, kv := range v {
			m[kv.key] = plain(kv.value)
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = plain(item)
		}
		return out
	}
	return v
}

// loader checks one file's declarations.
type loader struct {
	file string
	ast  *ast.File
	cfg  *Config
}

// line finds the line of a YAML path ("$.effects.refund.args"), or of the
// nearest enclosing node that has one.
func (l *loader) line(path string) int {
	for path != "" {
		if p, err := yaml.PathString(path); err == nil {
			if node, err := p.FilterFile(l.ast); err == nil && node != nil && node.GetToken() != nil {
				return node.GetToken().Position.Line
			}
		}
		i := strings.LastIndexAny(path, ".[")
		if i <= 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

func (l *loader) errorf(path, effect, field, format string, args ...any) error {
	return &FileError{File: l.file, Line: l.line(path), Effect: effect, Field: field, Err: fmt.Errorf(format, args...)}
}

// known refuses members of m not in fields.
func (l *loader) known(m orderedMap, path, effect string, fields []string) error {
	for _, kv := range m {
		if !slices.Contains(fields, kv.key) {
			return l.errorf(path+"."+kv.key, effect, strings.TrimPrefix(strings.TrimPrefix(path+"."+kv.key, "$.effects."+effect), "."),
				"unknown field (expected one of %s)", strings.Join(fields, ", "))
		}
	}
	return nil
}

// fields of a declaration, of its request and of its look-up.
var (
	effectFields  = []string{"preset", "description", "tool", "guarantee", "dedupe_window", "max_key_length", "args", "request", "outcome", "result", "lookup"}
	requestFields = []string{"method", "url", "headers", "encoding", "form_arrays", "body", "timeout"}
	lookupFields  = []string{"method", "url", "headers", "items", "match", "found", "missing", "result", "timeout"}
	ruleFields    = []string{"when", "class", "code"}
)

// effect checks one declaration.
func (l *loader) effect(name string, v any) (*Effect, error) {
	base := "$.effects." + name
	fail := func(field, format string, args ...any) error {
		path := base
		if field != "" {
			path += "." + field
		}
		return l.errorf(path, name, field, format, args...)
	}
	if !effects.ValidName(name) {
		return nil, fail("", "an effect's name must match ^[a-z][a-z0-9_]{0,63}$")
	}
	if slices.Contains(l.cfg.Reserved, name) {
		return nil, fail("", "the name of a built-in effect")
	}
	decl, ok := v.(orderedMap)
	if !ok {
		return nil, fail("", "must be a mapping")
	}
	if err := l.known(decl, base, name, effectFields); err != nil {
		return nil, err
	}
	var presetDecl orderedMap
	if p, ok := decl.get("preset"); ok {
		pname, _ := p.(string)
		preset, ok := Preset(pname)
		if !ok {
			return nil, fail("preset", "unknown preset %q (outboxd effects presets lists them)", p)
		}
		presetDecl = preset.decl
		merged, err := mergePatch(preset.decl, decl.without("preset"))
		if err != nil {
			return nil, fail("preset", "%v", err)
		}
		decl = merged
	}

	e := &Effect{name: name, tool: name, client: l.cfg.HTTPClient, onRuleError: l.cfg.OnRuleError, env: map[string]string{}}
	str := func(field string, required bool) (string, error) {
		v, ok := decl.get(field)
		if !ok {
			if required {
				return "", fail(field, "required")
			}
			return "", nil
		}
		s, ok := v.(string)
		if !ok || (required && strings.TrimSpace(s) == "") {
			return "", fail(field, "must be a non-empty string")
		}
		return s, nil
	}
	var err error
	if e.description, err = str("description", true); err != nil {
		return nil, err
	}
	if tool, err := str("tool", false); err != nil {
		return nil, err
	} else if tool != "" {
		e.tool = tool
	}
	if !toolNameRE.MatchString(e.tool) {
		return nil, fail("tool", "an MCP tool name must match %s", toolNameRE)
	}
	g, err := str("guarantee", true)
	if err != nil {
		return nil, err
	}
	e.guarantee = effects.Guarantee(g)
	if !e.guarantee.Valid() {
		return nil, fail("guarantee", "must be deduplicated, reconcilable or at_most_once, not %q", g)
	}

	if presetDecl != nil {
		if pg, _ := presetDecl.get("guarantee"); pg != g && g != string(effects.GuaranteeAtMostOnce) {
			return nil, fail("guarantee", "an override may weaken the preset's guarantee (%v) to at_most_once, never change it otherwise", pg)
		}
	}

	window, err := str("dedupe_window", false)
	if err != nil {
		return nil, err
	}
	switch {
	case e.guarantee == effects.GuaranteeDeduplicated && window == "":
		return nil, fail("dedupe_window", "required for a deduplicated effect: the provider's documented window (a Go duration such as 24h)")
	case e.guarantee != effects.GuaranteeDeduplicated && window != "":
		return nil, fail("dedupe_window", "only a deduplicated effect has one")
	case window != "":
		if e.window, err = time.ParseDuration(window); err != nil || e.window <= 0 {
			return nil, fail("dedupe_window", "must be a positive Go duration such as 24h, not %q", window)
		}
		if presetDecl != nil {
			if pw, ok := presetDecl.get("dedupe_window"); ok {
				if d, err := time.ParseDuration(fmt.Sprint(pw)); err == nil && e.window > d {
					return nil, fail("dedupe_window", "an override may shorten the preset's window (%s), never lengthen it", d)
				}
			}
		}
		if l.cfg.Retention > 0 && l.cfg.Retention < e.window {
			return nil, fail("dedupe_window", "longer than OUTBOX_RETENTION (%s): a key pruned inside the provider's window could be reused for a new action", l.cfg.Retention)
		}
	}
	if mk, ok := decl.get("max_key_length"); ok {
		n, ok := asInt(mk)
		if !ok || n < ProviderKeyLength {
			return nil, fail("max_key_length", "the provider's limit must be a whole number of at least %d, the provider key's length", ProviderKeyLength)
		}
	}

	// The arguments' schema.
	args, ok := decl.get("args")
	if !ok {
		return nil, fail("args", "required: the arguments' JSON Schema")
	}
	argsMap, ok := args.(orderedMap)
	if !ok {
		return nil, fail("args", "must be a JSON Schema object")
	}
	if err := l.schema(e, argsMap, fail); err != nil {
		return nil, err
	}

	// The request.
	reqV, ok := decl.get("request")
	if !ok {
		return nil, fail("request", "required")
	}
	reqMap, ok := reqV.(orderedMap)
	if !ok {
		return nil, fail("request", "must be a mapping")
	}
	if err := l.known(reqMap, base+".request", name, requestFields); err != nil {
		return nil, err
	}
	if e.request, err = l.request(e, reqMap, "request", false, fail); err != nil {
		return nil, err
	}

	// Outcome rules.
	if rules, ok := decl.get("outcome"); ok {
		list, ok := rules.([]any)
		if !ok {
			return nil, fail("outcome", "must be a list of rules")
		}
		for i, r := range list {
			field := fmt.Sprintf("outcome[%d]", i)
			rm, ok := r.(orderedMap)
			if !ok {
				return nil, fail(field, "must be a mapping with when and class")
			}
			if err := l.known(rm, base+"."+field, name, ruleFields); err != nil {
				return nil, err
			}
			when, _ := rm.get("when")
			whenS, _ := when.(string)
			cond, err := compileCondition(whenS, false, cel.BoolType)
			if err != nil {
				return nil, fail(field+".when", "%v", err)
			}
			class, _ := rm.get("class")
			classS, _ := class.(string)
			if !slices.Contains([]string{ClassSuccess, ClassNotSent, ClassPermanent, ClassAmbiguous}, classS) {
				return nil, fail(field+".class", "must be success, not_sent, permanent or ambiguous, not %v", class)
			}
			code := ""
			if c, ok := rm.get("code"); ok {
				code, _ = c.(string)
				if !codeRE.MatchString(code) {
					return nil, fail(field+".code", "an error code is snake_case, such as card_declined")
				}
			}
			e.rules = append(e.rules, rule{when: cond, class: classS, code: code})
		}
	}
	if e.result, err = l.result(decl, "result", fail); err != nil {
		return nil, err
	}

	// The look-up, and the guarantee's checks.
	lookupV, hasLookup := decl.get("lookup")
	switch {
	case e.guarantee == effects.GuaranteeReconcilable && !hasLookup:
		return nil, fail("lookup", "required for a reconcilable effect: how to ask the provider whether the effect exists")
	case e.guarantee != effects.GuaranteeReconcilable && hasLookup:
		return nil, fail("lookup", "only a reconcilable effect has one (this one is %s)", e.guarantee)
	case hasLookup:
		if e.lookup, err = l.lookup(e, lookupV, fail); err != nil {
			return nil, err
		}
	}
	if e.guarantee != effects.GuaranteeAtMostOnce && !usesProviderKey(e.request) {
		return nil, fail("request", "a %s effect must send {provider_key} (in the URL, a header or the body): it is what the provider recognises a repeat by", e.guarantee)
	}
	if e.lookup != nil && !usesProviderKey(e.lookup.request) && !e.lookup.conditionsUseProviderKey() {
		return nil, fail("lookup", "a look-up must use {provider_key}: it is what the effect is found by")
	}

	// The environment.
	for _, ph := range e.allPlaceholders() {
		if ph.kind != phEnv {
			continue
		}
		if l.cfg.NoEnv {
			continue
		}
		v, ok := l.cfg.LookupEnv(ph.name)
		if !ok || v == "" {
			return nil, fail("", "the environment variable %s is not set (the declaration reads {env.%s})", ph.name, ph.name)
		}
		e.env[ph.name] = v
		if !slices.Contains(e.secrets, v) {
			e.secrets = append(e.secrets, v)
		}
	}
	if !l.cfg.NoEnv {
		for _, d := range e.requests() {
			if err := d.url.resolveBase(e.env, l.cfg.LoopbackOnly); err != nil {
				return nil, fail("", "url %s: %v", d.url.raw, err)
			}
		}
	}
	// The longest secrets first, so that one holding another is redacted
	// whole.
	slices.SortFunc(e.secrets, func(a, b string) int { return len(b) - len(a) })

	resolved, _ := marshalJSON(decl)
	sum := sha256.Sum256(resolved)
	e.sha256 = hex.EncodeToString(sum[:])
	return e, nil
}

func (m orderedMap) without(key string) orderedMap {
	out := make(orderedMap, 0, len(m))
	for _, kv := range m {
		if kv.key != key {
			out = append(out, kv)
		}
	}
	return out
}

func asInt(v any) (int, bool) {
	switch v := v.(type) {
	case uint64:
		return int(v), true
	case int64:
		return int(v), true
	case int:
		return v, true
	case float64:
		if v == float64(int(v)) {
			return int(v), true
		}
	}
	return 0, false
}

// schema checks and compiles the args' schema.
func (l *loader) schema(e *Effect, m orderedMap, fail func(string, string, ...any) error) error {
	if t, _ := m.get("type"); t != "object" {
		return fail("args.type", "the top level must be a plain type: object")
	}
	for _, kw := range []string{"oneOf", "anyOf", "allOf", "not", "if", "then", "else"} {
		if _, ok := m.get(kw); ok {
			return fail("args."+kw, "not at the top level: hosts such as Anthropic's API refuse a tool whose input schema has a combinator there, and then every tool of the server fails")
		}
	}
	if s, ok := m.get("$schema"); ok && s != "https://json-schema.org/draft/2020-12/schema" {
		return fail("args.$schema", "only JSON Schema 2020-12 (https://json-schema.org/draft/2020-12/schema)")
	}
	if ref := remoteRef(m); ref != "" {
		return fail("args", "$ref %q: only local references (#/$defs/...) are allowed", ref)
	}
	doc := plain(m)
	raw, err := marshalJSON(doc)
	if err != nil {
		return fail("args", "not representable as JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fail("args", "%v", err)
	}
	if err := c.AddResource("args.json", parsed); err != nil {
		return fail("args", "%v", err)
	}
	sch, err := c.Compile("args.json")
	if err != nil {
		return fail("args", "not a valid JSON Schema 2020-12: %s", firstLine(err.Error()))
	}
	e.schema, e.schemaJSON = sch, raw
	return nil
}

// noLoader refuses every remote schema.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("remote schema %s refused", url)
}

// remoteRef returns the first $ref that is not local, or "".
func remoteRef(v any) string {
	switch v := v.(type) {
	case orderedMap:
		for _, kv := range v {
			if kv.key == "$ref" || kv.key == "$dynamicRef" {
				if s, ok := kv.value.(string); ok && !strings.HasPrefix(s, "#") {
					return s
				}
			}
			if r := remoteRef(kv.value); r != "" {
				return r
			}
		}
	case []any:
		for _, item := range v {
			if r := remoteRef(item); r != "" {
				return r
			}
		}
	}
	return ""
}

// request checks a request (the effect's, or a look-up's members).
func (l *loader) request(e *Effect, m orderedMap, field string, lookup bool, fail func(string, string, ...any) error) (*requestDecl, error) {
	d := &requestDecl{timeout: l.cfg.EffectTimeout, formArrays: formArraysIndexed}
	method := http.MethodPost
	if lookup {
		method = http.MethodGet
	}
	if v, ok := m.get("method"); ok {
		s, _ := v.(string)
		method = strings.ToUpper(s)
	}
	if !slices.Contains([]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}, method) {
		return nil, fail(field+".method", "must be GET, POST, PUT, PATCH or DELETE")
	}
	d.method = method
	u, _ := m.get("url")
	us, _ := u.(string)
	if us == "" {
		return nil, fail(field+".url", "required")
	}
	var err error
	if d.url, err = parseURLTemplate(us, lookup); err != nil {
		return nil, fail(field+".url", "%v", err)
	}
	if h, ok := m.get("headers"); ok {
		hm, ok := h.(orderedMap)
		if !ok {
			return nil, fail(field+".headers", "must map header names to values")
		}
		for _, kv := range hm {
			f := field + ".headers." + kv.key
			if !headerNameRE.MatchString(kv.key) {
				return nil, fail(f, "not a valid header name")
			}
			switch http.CanonicalHeaderKey(kv.key) {
			case "Host", "Content-Length", "Transfer-Encoding", "Connection":
				return nil, fail(f, "cannot be declared: the HTTP client sets it")
			}
			vs, ok := kv.value.(string)
			if !ok {
				vs = text(kv.value)
			}
			t, err := parseTemplate(vs, lookup)
			if err != nil {
				return nil, fail(f, "%v", err)
			}
			d.headers = append(d.headers, headerDecl{name: kv.key, value: t})
		}
	}
	if enc, ok := m.get("encoding"); ok {
		switch enc {
		case "json":
		case "form":
			d.form = true
		default:
			return nil, fail(field+".encoding", "must be json or form, not %v", enc)
		}
	}
	if fa, ok := m.get("form_arrays"); ok {
		if !d.form {
			return nil, fail(field+".form_arrays", "only with encoding: form")
		}
		s, _ := fa.(string)
		if !slices.Contains([]string{formArraysIndexed, formArraysBrackets, formArraysRepeat}, s) {
			return nil, fail(field+".form_arrays", "must be indexed, brackets or repeat")
		}
		d.formArrays = s
	}
	if b, ok := m.get("body"); ok {
		if method == http.MethodGet {
			return nil, fail(field+".body", "a GET sends no body")
		}
		if d.body, err = compileBody(b, lookup); err != nil {
			return nil, fail(field+".body", "%v", err)
		}
		if d.form && !d.body.isObj {
			return nil, fail(field+".body", "a form body is a mapping")
		}
	}
	if t, ok := m.get("timeout"); ok {
		ts, _ := t.(string)
		d.timeout, err = time.ParseDuration(ts)
		if err != nil || d.timeout <= 0 {
			return nil, fail(field+".timeout", "must be a positive Go duration such as 10s")
		}
		if d.timeout > l.cfg.EffectTimeout {
			return nil, fail(field+".timeout", "at most OUTBOX_EFFECT_TIMEOUT (%s), the attempt's lease", l.cfg.EffectTimeout)
		}
	}
	// Every argument a placeholder names must exist in the schema: a typo
	// would otherwise drop a member silently.
	for _, ph := range d.placeholders() {
		if ph.kind == phArgs && len(ph.path) > 0 && !schemaHas(e.schemaJSON, ph.path) {
			return nil, fail(field, "%s: no such property in args", ph.text)
		}
	}
	return d, nil
}

func (d *requestDecl) placeholders() []*placeholder {
	phs := d.url.placeholders()
	for _, h := range d.headers {
		phs = append(phs, h.value.placeholders()...)
	}
	return append(phs, d.body.placeholders()...)
}

// conditionsUseProviderKey reports whether the look-up's match (or found)
// names provider_key: a listing may find the effect by the key alone.
func (d *lookupDecl) conditionsUseProviderKey() bool {
	for _, c := range []*condition{d.match, d.found} {
		if c != nil && c.usesProviderKey {
			return true
		}
	}
	return false
}

func usesProviderKey(d *requestDecl) bool {
	for _, ph := range d.placeholders() {
		if ph.kind == phProviderKey {
			return true
		}
	}
	return false
}

func (e *Effect) requests() []*requestDecl {
	if e.lookup != nil {
		return []*requestDecl{e.request, e.lookup.request}
	}
	return []*requestDecl{e.request}
}

func (e *Effect) allPlaceholders() []*placeholder {
	var phs []*placeholder
	for _, d := range e.requests() {
		phs = append(phs, d.placeholders()...)
	}
	return phs
}

// schemaHas reports whether path names a property of the schema: through
// properties for objects and items (or prefixItems) for arrays.
func schemaHas(schemaJSON json.RawMessage, path []string) bool {
	var node any
	if json.Unmarshal(schemaJSON, &node) != nil {
		return false
	}
	root := node
	for _, seg := range path {
		m, ok := node.(map[string]any)
		if !ok {
			return false
		}
		if ref, ok := m["$ref"].(string); ok && strings.HasPrefix(ref, "#/") {
			if target, ok := resolvePointer(root, ref[1:]); ok {
				m, _ = target.(map[string]any)
			}
		}
		if props, ok := m["properties"].(map[string]any); ok {
			if next, ok := props[seg]; ok {
				node = next
				continue
			}
		}
		if items, ok := m["items"].(map[string]any); ok {
			if _, err := fmt.Sscanf(seg, "%d", new(int)); err == nil {
				node = items
				continue
			}
		}
		return false
	}
	return true
}

// result checks a result mapping: names to JSON pointers.
func (l *loader) result(m orderedMap, field string, fail func(string, string, ...any) error) ([]resultField, error) {
	v, ok := m.get(field)
	if !ok {
		return nil, nil
	}
	rm, ok := v.(orderedMap)
	if !ok {
		return nil, fail(field, "must map names to JSON pointers such as /id")
	}
	var out []resultField
	for _, kv := range rm {
		p, _ := kv.value.(string)
		if p != "" && !strings.HasPrefix(p, "/") {
			return nil, fail(field+"."+kv.key, "a JSON pointer starts with /, such as /id")
		}
		out = append(out, resultField{name: kv.key, pointer: p})
	}
	return out, nil
}

// lookup checks a look-up.
func (l *loader) lookup(e *Effect, v any, fail func(string, string, ...any) error) (*lookupDecl, error) {
	m, ok := v.(orderedMap)
	if !ok {
		return nil, fail("lookup", "must be a mapping")
	}
	if err := l.known(m, "$.effects."+e.name+".lookup", e.name, lookupFields); err != nil {
		return nil, err
	}
	d := &lookupDecl{}
	var err error
	if d.request, err = l.request(e, m, "lookup", true, fail); err != nil {
		return nil, err
	}
	get := func(f string) string { s, _ := m.get(f); str, _ := s.(string); return str }
	items, match, found, missing := get("items"), get("match"), get("found"), get("missing")
	switch {
	case items != "" || match != "":
		if items == "" || match == "" {
			return nil, fail("lookup.items", "items and match go together")
		}
		if found != "" || missing != "" {
			return nil, fail("lookup.found", "either items and match, or found and missing")
		}
		if d.items, err = compileCondition(items, false, cel.ListType(cel.DynType)); err != nil {
			return nil, fail("lookup.items", "%v", err)
		}
		if d.match, err = compileCondition(match, true, cel.BoolType); err != nil {
			return nil, fail("lookup.match", "%v", err)
		}
	case found != "" && missing != "":
		if d.found, err = compileCondition(found, false, cel.BoolType); err != nil {
			return nil, fail("lookup.found", "%v", err)
		}
		if d.missing, err = compileCondition(missing, false, cel.BoolType); err != nil {
			return nil, fail("lookup.missing", "%v", err)
		}
	default:
		return nil, fail("lookup", "needs items and match (a listing), or found and missing (a fetch by key)")
	}
	if d.result, err = l.result(m, "result", func(field, format string, args ...any) error {
		return fail("lookup."+field, format, args...)
	}); err != nil {
		return nil, err
	}
	return d, nil
}

// mergePatch applies an RFC 7396 merge patch to a preset's declaration:
// members of the patch replace the preset's, null removes one, mappings
// merge.
func mergePatch(target, patch orderedMap) (orderedMap, error) {
	out := append(orderedMap{}, target...)
	for _, kv := range patch {
		i := slices.IndexFunc(out, func(t orderedKV) bool { return t.key == kv.key })
		switch {
		case kv.value == nil:
			if i >= 0 {
				out = slices.Delete(out, i, i+1)
			}
		case i >= 0:
			pm, pok := kv.value.(orderedMap)
			tm, tok := out[i].value.(orderedMap)
			if pok && tok {
				merged, err := mergePatch(tm, pm)
				if err != nil {
					return nil, err
				}
				out[i].value = merged
			} else {
				out[i].value = kv.value
			}
		default:
			out = append(out, kv)
		}
	}
	return out, nil
}
