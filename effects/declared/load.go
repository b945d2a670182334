package declared

import (
	"crypto/sha256"
	"encoding/hex"
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

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/internal/httpsend"
)

// SecretMinLength is the length from which an {env.*} value is scrubbed
// from what an effect stores and emits. A shorter value (a flag, a region,
// a port) cannot be a secret worth the name, and scrubbing every
// occurrence of its letters would mangle the provider's answers.
const SecretMinLength = 8

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

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

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

// errorf makes a FileError for the node at path (a YAML path such as
// "$.effects.refund.request.url"), with its line.
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

// failFunc makes the error for a field of the declaration being checked:
// field is relative to the declaration ("request.url"), "" for the whole.
type failFunc func(field, format string, args ...any) error

// effectFields are the members of a declaration.
var effectFields = []string{"preset", "description", "tool", "guarantee", "dedupe_window", "max_key_length", "args", "request", "outcome", "result", "lookup"}

// effect checks one declaration: its name and preset here, then its common
// fields, its request and the reading of its answer, its look-up and what
// its guarantee requires, and the environment it reads.
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
		return nil, fail("", "an effect's name must be %s (it names the effect's River queue)", effects.NameRule)
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
	if err := l.effectCommon(e, decl, presetDecl, fail); err != nil {
		return nil, err
	}
	if err := l.effectRequest(e, decl, fail); err != nil {
		return nil, err
	}
	if err := l.effectLookup(e, decl, fail); err != nil {
		return nil, err
	}
	if err := l.effectEnv(e, fail); err != nil {
		return nil, err
	}

	e.sha256 = declarationSHA256(decl)
	return e, nil
}

// agentText are the members of a declaration that only agents read: the
// declaration's hash leaves them out, so that rewording them does not send
// an intent that may have been sent to unknown (declaration_changed). Every
// other member is hashed, a new one included, because a member that
// shapes the request or its reading and escapes the hash could let an
// intent be sent twice under different requests.
var agentText = []string{"description", "tool"}

// declarationSHA256 hashes a resolved declaration (presets applied) less
// its text for agents.
func declarationSHA256(decl orderedMap) string {
	for _, field := range agentText {
		decl = decl.without(field)
	}
	resolved, _ := marshalJSON(decl)
	sum := sha256.Sum256(resolved)
	return hex.EncodeToString(sum[:])
}

// str reads an optional or required string member of a declaration.
func str(decl orderedMap, field string, required bool, fail failFunc) (string, error) {
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

// effectCommon checks the description, the tool's name, the guarantee and
// its window; presetDecl, when the declaration extends a preset, bounds
// what an override may change.
func (l *loader) effectCommon(e *Effect, decl, presetDecl orderedMap, fail failFunc) error {
	var err error
	if e.description, err = str(decl, "description", true, fail); err != nil {
		return err
	}
	if tool, err := str(decl, "tool", false, fail); err != nil {
		return err
	} else if tool != "" {
		e.tool = tool
	}
	if !toolNameRE.MatchString(e.tool) {
		return fail("tool", "an MCP tool name must match %s", toolNameRE)
	}
	g, err := str(decl, "guarantee", true, fail)
	if err != nil {
		return err
	}
	e.guarantee = effects.Guarantee(g)
	if !e.guarantee.Valid() {
		return fail("guarantee", "must be deduplicated, reconcilable or at_most_once, not %q", g)
	}

	if presetDecl != nil {
		if pg, _ := presetDecl.get("guarantee"); pg != g && g != string(effects.GuaranteeAtMostOnce) {
			return fail("guarantee", "an override may weaken the preset's guarantee (%v) to at_most_once, never change it otherwise", pg)
		}
	}

	window, err := str(decl, "dedupe_window", false, fail)
	if err != nil {
		return err
	}
	switch {
	case e.guarantee == effects.GuaranteeDeduplicated && window == "":
		return fail("dedupe_window", "required for a deduplicated effect: the provider's documented window (a Go duration such as 24h)")
	case e.guarantee != effects.GuaranteeDeduplicated && window != "":
		return fail("dedupe_window", "only a deduplicated effect has one")
	case window != "":
		if e.window, err = time.ParseDuration(window); err != nil || e.window <= 0 {
			return fail("dedupe_window", "must be a positive Go duration such as 24h, not %q", window)
		}
		if presetDecl != nil {
			if pw, ok := presetDecl.get("dedupe_window"); ok {
				if d, err := time.ParseDuration(fmt.Sprint(pw)); err == nil && e.window > d {
					return fail("dedupe_window", "an override may shorten the preset's window (%s), never lengthen it", d)
				}
			}
		}
		if l.cfg.Retention > 0 && l.cfg.Retention < e.window {
			return fail("dedupe_window", "longer than OUTBOX_RETENTION (%s): a key pruned inside the provider's window could be reused for a new action", l.cfg.Retention)
		}
	}
	if mk, ok := decl.get("max_key_length"); ok {
		n, ok := asInt(mk)
		if !ok || n < ProviderKeyLength {
			return fail("max_key_length", "the provider's limit must be a whole number of at least %d, the provider key's length", ProviderKeyLength)
		}
	}
	return nil
}

// effectRequest checks the arguments' schema, the request, and how its
// answer is read: the outcome rules and the result.
func (l *loader) effectRequest(e *Effect, decl orderedMap, fail failFunc) error {
	args, ok := decl.get("args")
	if !ok {
		return fail("args", "required: the arguments' JSON Schema")
	}
	argsMap, ok := args.(orderedMap)
	if !ok {
		return fail("args", "must be a JSON Schema object")
	}
	if err := l.schema(e, argsMap, fail); err != nil {
		return err
	}

	reqV, ok := decl.get("request")
	if !ok {
		return fail("request", "required")
	}
	reqMap, ok := reqV.(orderedMap)
	if !ok {
		return fail("request", "must be a mapping")
	}
	if err := l.known(reqMap, "$.effects."+e.name+".request", e.name, requestFields); err != nil {
		return err
	}
	var err error
	if e.request, err = l.request(e, reqMap, "request", false, fail); err != nil {
		return err
	}
	if e.rules, err = l.outcome(e, decl, fail); err != nil {
		return err
	}
	if e.result, err = l.result(decl, "result", fail); err != nil {
		return err
	}
	return nil
}

// effectLookup checks the look-up, and that the requests carry what the
// guarantee relies on.
func (l *loader) effectLookup(e *Effect, decl orderedMap, fail failFunc) error {
	lookupV, hasLookup := decl.get("lookup")
	switch {
	case e.guarantee == effects.GuaranteeReconcilable && !hasLookup:
		return fail("lookup", "required for a reconcilable effect: how to ask the provider whether the effect exists")
	case e.guarantee != effects.GuaranteeReconcilable && hasLookup:
		return fail("lookup", "only a reconcilable effect has one (this one is %s)", e.guarantee)
	case hasLookup:
		var err error
		if e.lookup, err = l.lookup(e, lookupV, fail); err != nil {
			return err
		}
	}
	if e.guarantee != effects.GuaranteeAtMostOnce && !usesProviderKey(e.request) {
		return fail("request", "a %s effect must send {provider_key} (in the URL, a header or the body): it is what the provider recognises a repeat by", e.guarantee)
	}
	if e.lookup != nil && !usesProviderKey(e.lookup.request) && !e.lookup.conditionsUseProviderKey() {
		return fail("lookup", "a look-up must use {provider_key}: it is what the effect is found by")
	}
	return nil
}

// effectEnv reads the {env.*} variables the requests name, keeps their
// values of SecretMinLength or more as secrets to scrub, and checks the
// bases they resolve to.
func (l *loader) effectEnv(e *Effect, fail failFunc) error {
	if l.cfg.NoEnv {
		return nil
	}
	for _, ph := range e.allPlaceholders() {
		if ph.kind != phEnv {
			continue
		}
		v, ok := l.cfg.LookupEnv(ph.name)
		if !ok || v == "" {
			return fail("", "the environment variable %s is not set (the declaration reads {env.%s})", ph.name, ph.name)
		}
		e.env[ph.name] = v
		if len(v) >= SecretMinLength && !slices.Contains(e.secrets, v) {
			e.secrets = append(e.secrets, v)
		}
	}
	for _, d := range e.requests() {
		if err := d.url.resolveBase(e.env, l.cfg.LoopbackOnly); err != nil {
			return fail("", "url %s: %v", d.url.raw, err)
		}
	}
	// The longest secrets first, so that one holding another is redacted
	// whole.
	slices.SortFunc(e.secrets, func(a, b string) int { return len(b) - len(a) })
	return nil
}
