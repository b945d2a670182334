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
	// EffectTimeout is the attempts' deadline (dispatcher.Config.EffectTimeout):
	// a request's default and maximum timeout. Defaults to effects.TimeoutDefault.
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

	// Retention is how long terminal intents are kept
	// (dispatcher.Config.Retention): a dedupe window longer than it is
	// refused (a key pruned before its window ends could be reused for a
	// new action while the provider still remembers it). Zero skips the
	// check.
	Retention time.Duration
}

// withDefaults returns a copy of c with every zero setting at its default.
// A non-positive EffectTimeout is taken as unset.
func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	if out.EffectTimeout <= 0 {
		out.EffectTimeout = effects.TimeoutDefault
	}
	if out.LookupEnv == nil {
		out.LookupEnv = os.LookupEnv
	}
	if out.HTTPClient == nil {
		out.HTTPClient = httpsend.NewClient(64)
	} else {
		out.HTTPClient = httpsend.Wrap(out.HTTPClient)
	}
	return &out
}

// Load reads and checks the effects file at path (YAML 1.2 or JSON). Its
// error is a FileErrors: every problem found.
func Load(path string, config *Config) ([]*Effect, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, FileErrors{{File: path, Err: err}}
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

// Parse checks a file's contents; file names it in errors. Its error is a
// FileErrors: every problem found, by line. It returns the declared HTTP
// effects; ParseFile returns the upstreams too.
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
		return nil, FileErrors{{File: path, Err: err}}
	}
	return ParseFile(path, data, config)
}

// ParseFile checks a file's contents: its effects and its upstreams. Its
// error is a FileErrors.
func ParseFile(file string, data []byte, config *Config) (*File, error) {
	cfg := config.withDefaults()
	astFile, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, FileErrors{yamlError(file, err)}
	}
	var doc any
	if err := yaml.UnmarshalWithOptions(data, &doc, yaml.UseOrderedMap()); err != nil {
		return nil, FileErrors{yamlError(file, err)}
	}
	l := &loader{file: file, ast: astFile, cfg: cfg}
	f := l.declarations(doc)
	if len(l.problems) > 0 {
		return nil, l.problems.sorted()
	}
	return f, nil
}

// declarations checks the file's declarations, recording each problem.
func (l *loader) declarations(doc any) *File {
	out := &File{}
	root, ok := ordered(doc).(orderedMap)
	if !ok {
		l.problems.add(&FileError{File: l.file, Line: 1, Err: errors.New("the file must be a mapping with effects, upstreams or both")})
		return nil
	}
	l.problems.add(l.known(root, "$", "", []string{"effects", "upstreams"}))
	decls, hasEffects := root.get("effects")
	declMap, isMap := decls.(orderedMap)
	ups, hasUpstreams := root.get("upstreams")
	upMap, upIsMap := ups.(orderedMap)
	switch {
	case hasEffects && (!isMap || len(declMap) == 0):
		l.problems.add(l.errorf("$.effects", "", "effects", "must map each effect's name to its declaration"))
		return nil
	case hasUpstreams && (!upIsMap || len(upMap) == 0):
		l.problems.add(l.errorf("$.upstreams", "", "upstreams", "must map each upstream's name to its declaration"))
		return nil
	case !hasEffects && !hasUpstreams:
		l.problems.add(l.errorf("$", "", "effects", "the file declares nothing: effects, upstreams or both"))
		return nil
	}
	tools := map[string]string{}
	for _, reserved := range l.cfg.ReservedTools {
		tools[reserved] = "a built-in effect"
	}
	for _, kv := range declMap {
		e, err := l.effect(kv.key, kv.value)
		if err != nil {
			l.problems.add(err)
			continue
		}
		if other, ok := tools[e.tool]; ok {
			l.problems.add(l.errorf("$.effects."+kv.key+".tool", kv.key, "tool", "the MCP tool name %q is taken by %s", e.tool, other))
			continue
		}
		tools[e.tool] = "effect " + e.name
		out.Effects = append(out.Effects, e)
	}
	for _, kv := range upMap {
		u, err := l.upstream(kv.key, kv.value)
		if err != nil {
			l.problems.add(err)
			continue
		}
		out.Upstreams = append(out.Upstreams, u)
	}
	return out
}

// loader checks one file's declarations.
type loader struct {
	file string
	ast  *ast.File
	cfg  *Config

	// problems are those found so far.
	problems FileErrors
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

// known refuses members of m not in fields, each.
func (l *loader) known(m orderedMap, path, effect string, fields []string) error {
	var errs FileErrors
	for _, kv := range m {
		if !slices.Contains(fields, kv.key) {
			errs.add(l.errorf(path+"."+kv.key, effect, strings.TrimPrefix(strings.TrimPrefix(path+"."+kv.key, "$.effects."+effect), "."),
				"unknown field (expected one of %s)", strings.Join(fields, ", ")))
		}
	}
	return errs.err()
}

// failFunc makes the error for a field of the declaration being checked:
// field is relative to the declaration ("request.url"), "" for the whole.
type failFunc func(field, format string, args ...any) error

// effectFields are the members of a declaration.
var effectFields = []string{"preset", "description", "tool", "guarantee", "dedupe_window", "max_key_length", "args", "request", "outcome", "result", "lookup"}

// effect checks one declaration: its name and preset here, then its common
// fields, its request and the reading of its answer, its look-up and what
// its guarantee requires, and the environment it reads. Its error holds
// every problem found: a check that needs what an earlier one refused is
// skipped.
func (l *loader) effect(name string, v any) (*Effect, error) {
	base := "$.effects." + name
	fail := func(field, format string, args ...any) error {
		path := base
		if field != "" {
			path += "." + field
		}
		return l.errorf(path, name, field, format, args...)
	}
	var errs FileErrors
	if !effects.ValidName(name) {
		errs.add(fail("", "an effect's name must be %s (it names the effect's River queue)", effects.NameRule))
	}
	if slices.Contains(l.cfg.Reserved, name) {
		errs.add(fail("", "the name of a built-in effect"))
	}
	decl, ok := v.(orderedMap)
	if !ok {
		errs.add(fail("", "must be a mapping"))
		return nil, errs.err()
	}
	errs.add(l.known(decl, base, name, effectFields))
	var presetDecl orderedMap
	if p, ok := decl.get("preset"); ok {
		pname, _ := p.(string)
		preset, ok := Preset(pname)
		if !ok {
			// The preset's fields are what the rest is checked against.
			errs.add(fail("preset", "unknown preset %q (outboxd effects presets lists them)", p))
			return nil, errs.err()
		}
		presetDecl = preset.decl
		merged, err := mergePatch(preset.decl, decl.without("preset"))
		if err != nil {
			errs.add(fail("preset", "%v", err))
			return nil, errs.err()
		}
		decl = merged
	}

	e := &Effect{name: name, tool: name, client: l.cfg.HTTPClient, onRuleError: l.cfg.OnRuleError, env: map[string]string{}}
	errs.add(l.effectCommon(e, decl, presetDecl, fail))
	errs.add(l.effectRequest(e, decl, fail))
	errs.add(l.effectLookup(e, decl, fail))
	errs.add(l.effectEnv(e, fail))
	if len(errs) > 0 {
		return nil, errs.err()
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
	var errs FileErrors
	var err error
	if e.description, err = str(decl, "description", true, fail); err != nil {
		errs.add(err)
	}
	if tool, err := str(decl, "tool", false, fail); err != nil {
		errs.add(err)
	} else if tool != "" {
		e.tool = tool
	}
	if !toolNameRE.MatchString(e.tool) {
		errs.add(fail("tool", "an MCP tool name must match %s", toolNameRE))
	}
	g, err := str(decl, "guarantee", true, fail)
	if err != nil {
		// The window's checks, and the look-up's, depend on the guarantee.
		errs.add(err)
		return errs.err()
	}
	e.guarantee = effects.Guarantee(g)
	if !e.guarantee.Valid() {
		errs.add(fail("guarantee", "must be deduplicated, reconcilable or at_most_once, not %q", g))
		return errs.err()
	}
	if presetDecl != nil {
		if pg, _ := presetDecl.get("guarantee"); pg != g && g != string(effects.GuaranteeAtMostOnce) {
			errs.add(fail("guarantee", "an override may weaken the preset's guarantee (%v) to at_most_once, never change it otherwise", pg))
			// What depends on the guarantee is not checked against one
			// refused.
			e.guarantee = ""
			return errs.err()
		}
	}

	window, err := str(decl, "dedupe_window", false, fail)
	switch {
	case err != nil:
		errs.add(err)
	case e.guarantee == effects.GuaranteeDeduplicated && window == "":
		errs.add(fail("dedupe_window", "required for a deduplicated effect: the provider's documented window (a Go duration such as 24h)"))
	case e.guarantee != effects.GuaranteeDeduplicated && window != "":
		errs.add(fail("dedupe_window", "only a deduplicated effect has one"))
	case window != "":
		if e.window, err = time.ParseDuration(window); err != nil || e.window <= 0 {
			errs.add(fail("dedupe_window", "must be a positive Go duration such as 24h, not %q", window))
			break
		}
		if presetDecl != nil {
			if pw, ok := presetDecl.get("dedupe_window"); ok {
				if d, err := time.ParseDuration(fmt.Sprint(pw)); err == nil && e.window > d {
					errs.add(fail("dedupe_window", "an override may shorten the preset's window (%s), never lengthen it", d))
				}
			}
		}
		if l.cfg.Retention > 0 && l.cfg.Retention < e.window {
			errs.add(fail("dedupe_window", "longer than OUTBOX_RETENTION (%s): a key pruned inside the provider's window could be reused for a new action", l.cfg.Retention))
		}
	}
	if mk, ok := decl.get("max_key_length"); ok {
		n, ok := asInt(mk)
		if !ok || n < ProviderKeyLength {
			errs.add(fail("max_key_length", "the provider's limit must be a whole number of at least %d, the provider key's length", ProviderKeyLength))
		}
	}
	return errs.err()
}

// effectRequest checks the arguments' schema, the request, and how its
// answer is read: the outcome rules and the result. e.request stays nil
// when the request is refused.
func (l *loader) effectRequest(e *Effect, decl orderedMap, fail failFunc) error {
	var errs FileErrors
	if args, ok := decl.get("args"); !ok {
		errs.add(fail("args", "required: the arguments' JSON Schema"))
	} else if argsMap, ok := args.(orderedMap); !ok {
		errs.add(fail("args", "must be a JSON Schema object"))
	} else {
		errs.add(l.schema(e, argsMap, fail))
	}

	if reqV, ok := decl.get("request"); !ok {
		errs.add(fail("request", "required"))
	} else if reqMap, ok := reqV.(orderedMap); !ok {
		errs.add(fail("request", "must be a mapping"))
	} else {
		errs.add(l.known(reqMap, "$.effects."+e.name+".request", e.name, requestFields))
		d, err := l.request(e, reqMap, "request", false, fail)
		errs.add(err)
		e.request = d
	}
	var err error
	if e.rules, err = l.outcome(e, decl, fail); err != nil {
		errs.add(err)
	}
	if e.result, err = l.result(decl, "result", fail); err != nil {
		errs.add(err)
	}
	return errs.err()
}

// effectLookup checks the look-up, and that the requests carry what the
// guarantee relies on. It needs a valid guarantee, and checks a request's
// provider key only once the request was accepted.
func (l *loader) effectLookup(e *Effect, decl orderedMap, fail failFunc) error {
	if !e.guarantee.Valid() {
		return nil
	}
	var errs FileErrors
	lookupV, hasLookup := decl.get("lookup")
	switch {
	case e.guarantee == effects.GuaranteeReconcilable && !hasLookup:
		errs.add(fail("lookup", "required for a reconcilable effect: how to ask the provider whether the effect exists"))
	case e.guarantee != effects.GuaranteeReconcilable && hasLookup:
		errs.add(fail("lookup", "only a reconcilable effect has one (this one is %s)", e.guarantee))
	case hasLookup:
		d, err := l.lookup(e, lookupV, fail)
		errs.add(err)
		e.lookup = d
	}
	if e.request != nil && e.guarantee != effects.GuaranteeAtMostOnce && !usesProviderKey(e.request) {
		errs.add(fail("request", "a %s effect must send {provider_key} (in the URL, a header or the body): it is what the provider recognises a repeat by", e.guarantee))
	}
	if e.lookup != nil && !usesProviderKey(e.lookup.request) && !e.lookup.conditionsUseProviderKey() {
		errs.add(fail("lookup", "a look-up must use {provider_key}: it is what the effect is found by"))
	}
	return errs.err()
}

// effectEnv reads the {env.*} variables the accepted requests name, keeps
// their values of SecretMinLength or more as secrets to scrub, and checks
// the bases they resolve to.
func (l *loader) effectEnv(e *Effect, fail failFunc) error {
	if l.cfg.NoEnv {
		return nil
	}
	var errs FileErrors
	missing := map[string]bool{}
	for _, ph := range e.allPlaceholders() {
		if ph.kind != phEnv || missing[ph.name] {
			continue
		}
		v, ok := l.cfg.LookupEnv(ph.name)
		if !ok || v == "" {
			missing[ph.name] = true
			errs.add(fail("", "the environment variable %s is not set (the declaration reads {env.%s})", ph.name, ph.name))
			continue
		}
		e.env[ph.name] = v
		if len(v) >= SecretMinLength && !slices.Contains(e.secrets, v) {
			e.secrets = append(e.secrets, v)
		}
	}
	if len(errs) > 0 {
		// A base read from a missing variable cannot be resolved.
		return errs.err()
	}
	for _, d := range e.requests() {
		if err := d.url.resolveBase(e.env, l.cfg.LoopbackOnly); err != nil {
			errs.add(fail("", "url %s: %v", d.url.raw, err))
		}
	}
	// The longest secrets first, so that one holding another is redacted
	// whole.
	slices.SortFunc(e.secrets, func(a, b string) int { return len(b) - len(a) })
	return errs.err()
}
