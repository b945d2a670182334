package declared

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/effectfile"
)

// effectFields are the members of a declaration.
var effectFields = []string{"preset", "description", "tool", "guarantee", "dedupe_window", "max_key_length", "args", "request", "outcome", "result", "lookup"}

// effect checks one declaration in three steps: its name and its
// resolved declaration (the preset, if any, merged in), the checks that
// fill in the effect, then its hash. Its error holds every problem found:
// a check that needs what an earlier one refused is skipped.
func (l *loader) effect(name string, v any) (*Effect, error) {
	base := "$.effects." + name
	fail := func(field, format string, args ...any) error {
		path := base
		if field != "" {
			path += "." + field
		}
		return l.errorf(path, name, field, format, args...)
	}
	decl, presetDecl, errs := l.resolveDeclaration(name, v, fail)
	if decl == nil {
		return nil, errs.Err()
	}
	e := &Effect{name: name, tool: name, client: l.cfg.HTTPClient, onRuleError: l.cfg.OnRuleErrorFunc, env: map[string]string{}}
	errs = append(errs, l.checkEffect(e, decl, presetDecl, fail)...)
	if len(errs) > 0 {
		return nil, errs.Err()
	}
	e.sha256 = declarationSHA256(decl)
	return e, nil
}

// resolveDeclaration checks the effect's name and decodes its declaration,
// merging it into its preset's when it names one. It returns the resolved
// declaration and the preset's (nil without a preset), which bounds what
// an override may change; decl is nil when the rest cannot be checked.
func (l *loader) resolveDeclaration(name string, v any, fail effectfile.FailFunc) (decl, presetDecl effectfile.Map, errs effectfile.FileErrors) {
	if !effects.ValidName(name) {
		errs.Add(fail("", "an effect's name must be %s (it names the effect's River queue)", effects.NameRule))
	}
	if slices.Contains(l.cfg.Reserved, name) {
		errs.Add(fail("", "the name of a built-in effect"))
	}
	decl, ok := v.(effectfile.Map)
	if !ok {
		errs.Add(fail("", "must be a mapping"))
		return nil, nil, errs
	}
	errs.Add(l.known(decl, "$.effects."+name, name, effectFields))
	p, ok := decl.Get("preset")
	if !ok {
		return decl, nil, errs
	}
	pname, _ := p.(string)
	preset, ok := Preset(pname)
	if !ok {
		// The preset's fields are what the rest is checked against.
		errs.Add(fail("preset", "unknown preset %q (outboxd effects presets lists them)", p))
		return nil, nil, errs
	}
	merged, err := effectfile.MergePatch(preset.decl, decl.Without("preset"))
	if err != nil {
		errs.Add(fail("preset", "%v", err))
		return nil, nil, errs
	}
	return merged, preset.decl, errs
}

// checkEffect checks a resolved declaration's common fields, its request
// and the reading of its answer, its look-up and what its guarantee
// requires, and the environment it reads, filling in e as it goes.
func (l *loader) checkEffect(e *Effect, decl, presetDecl effectfile.Map, fail effectfile.FailFunc) effectfile.FileErrors {
	var errs effectfile.FileErrors
	errs.Add(l.effectCommon(e, decl, presetDecl, fail))
	errs.Add(l.effectRequest(e, decl, fail))
	errs.Add(l.effectLookup(e, decl, fail))
	errs.Add(l.effectEnv(e, fail))
	return errs
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
func declarationSHA256(decl effectfile.Map) string {
	for _, field := range agentText {
		decl = decl.Without(field)
	}
	resolved, _ := effectfile.MarshalJSON(decl)
	sum := sha256.Sum256(resolved)
	return hex.EncodeToString(sum[:])
}

// str reads an optional or required string member of a declaration.
func str(decl effectfile.Map, field string, required bool, fail effectfile.FailFunc) (string, error) {
	v, ok := decl.Get(field)
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
func (l *loader) effectCommon(e *Effect, decl, presetDecl effectfile.Map, fail effectfile.FailFunc) error {
	var errs effectfile.FileErrors
	var err error
	if e.description, err = str(decl, "description", true, fail); err != nil {
		errs.Add(err)
	}
	if tool, err := str(decl, "tool", false, fail); err != nil {
		errs.Add(err)
	} else if tool != "" {
		e.tool = tool
	}
	if !toolNameRE.MatchString(e.tool) {
		errs.Add(fail("tool", "an MCP tool name must match %s", toolNameRE))
	}
	g, err := str(decl, "guarantee", true, fail)
	if err != nil {
		// The window's checks, and the look-up's, depend on the guarantee.
		errs.Add(err)
		return errs.Err()
	}
	e.guarantee = effects.Guarantee(g)
	if !e.guarantee.Valid() {
		errs.Add(fail("guarantee", "must be deduplicated, reconcilable or at_most_once, not %q", g))
		return errs.Err()
	}
	if presetDecl != nil {
		if pg, _ := presetDecl.Get("guarantee"); pg != g && g != string(effects.GuaranteeAtMostOnce) {
			errs.Add(fail("guarantee", "an override may weaken the preset's guarantee (%v) to at_most_once, never change it otherwise", pg))
			// What depends on the guarantee is not checked against one
			// refused.
			e.guarantee = ""
			return errs.Err()
		}
	}

	window, err := str(decl, "dedupe_window", false, fail)
	switch {
	case err != nil:
		errs.Add(err)
	case e.guarantee == effects.GuaranteeDeduplicated && window == "":
		errs.Add(fail("dedupe_window", "required for a deduplicated effect: the provider's documented window (a Go duration such as 24h)"))
	case e.guarantee != effects.GuaranteeDeduplicated && window != "":
		errs.Add(fail("dedupe_window", "only a deduplicated effect has one"))
	case window != "":
		if e.window, err = time.ParseDuration(window); err != nil || e.window <= 0 {
			errs.Add(fail("dedupe_window", "must be a positive Go duration such as 24h, not %q", window))
			break
		}
		if presetDecl != nil {
			if pw, ok := presetDecl.Get("dedupe_window"); ok {
				if d, err := time.ParseDuration(fmt.Sprint(pw)); err == nil && e.window > d {
					errs.Add(fail("dedupe_window", "an override may shorten the preset's window (%s), never lengthen it", d))
				}
			}
		}
		if l.cfg.Retention > 0 && l.cfg.Retention < e.window {
			errs.Add(fail("dedupe_window", "longer than OUTBOX_RETENTION (%s): a key pruned inside the provider's window could be reused for a new action", l.cfg.Retention))
		}
	}
	if mk, ok := decl.Get("max_key_length"); ok {
		n, ok := effectfile.AsInt(mk)
		if !ok || n < ProviderKeyLength {
			errs.Add(fail("max_key_length", "the provider's limit must be a whole number of at least %d, the provider key's length", ProviderKeyLength))
		}
	}
	return errs.Err()
}

// effectRequest checks the arguments' schema, the request, and how its
// answer is read: the outcome rules and the result. e.request stays nil
// when the request is refused.
func (l *loader) effectRequest(e *Effect, decl effectfile.Map, fail effectfile.FailFunc) error {
	var errs effectfile.FileErrors
	if args, ok := decl.Get("args"); !ok {
		errs.Add(fail("args", "required: the arguments' JSON Schema"))
	} else if argsMap, ok := args.(effectfile.Map); !ok {
		errs.Add(fail("args", "must be a JSON Schema object"))
	} else {
		errs.Add(l.schema(e, argsMap, fail))
	}

	if reqV, ok := decl.Get("request"); !ok {
		errs.Add(fail("request", "required"))
	} else if reqMap, ok := reqV.(effectfile.Map); !ok {
		errs.Add(fail("request", "must be a mapping"))
	} else {
		errs.Add(l.known(reqMap, "$.effects."+e.name+".request", e.name, requestFields))
		d, err := l.request(e, reqMap, "request", false, fail)
		errs.Add(err)
		e.request = d
	}
	var err error
	if e.rules, err = effectfile.ParseOutcome(decl, func(expr string) (*effectfile.Condition, error) {
		return compileCondition(expr, false, cel.BoolType)
	}, fail); err != nil {
		errs.Add(err)
	}
	if e.result, err = effectfile.ParseResult(decl, "result", fail); err != nil {
		errs.Add(err)
	}
	return errs.Err()
}

// effectLookup checks the look-up, and that the requests carry what the
// guarantee relies on. It needs a valid guarantee, and checks a request's
// provider key only once the request was accepted.
func (l *loader) effectLookup(e *Effect, decl effectfile.Map, fail effectfile.FailFunc) error {
	if !e.guarantee.Valid() {
		return nil
	}
	var errs effectfile.FileErrors
	lookupV, hasLookup := decl.Get("lookup")
	switch {
	case e.guarantee == effects.GuaranteeReconcilable && !hasLookup:
		errs.Add(fail("lookup", "required for a reconcilable effect: how to ask the provider whether the effect exists"))
	case e.guarantee != effects.GuaranteeReconcilable && hasLookup:
		errs.Add(fail("lookup", "only a reconcilable effect has one (this one is %s)", e.guarantee))
	case hasLookup:
		d, err := l.lookup(e, lookupV, fail)
		errs.Add(err)
		e.lookup = d
	}
	if e.request != nil && e.guarantee != effects.GuaranteeAtMostOnce && !usesProviderKey(e.request) {
		errs.Add(fail("request", "a %s effect must send {provider_key} (in the URL, a header or the body): it is what the provider recognises a repeat by", e.guarantee))
	}
	if e.lookup != nil && !usesProviderKey(e.lookup.request) && !e.lookup.conditionsUseProviderKey() {
		errs.Add(fail("lookup", "a look-up must use {provider_key}: it is what the effect is found by"))
	}
	return errs.Err()
}

// effectEnv reads the {env.*} variables the accepted requests name, keeps
// their values of SecretMinLength or more as secrets to scrub, and checks
// the bases they resolve to.
func (l *loader) effectEnv(e *Effect, fail effectfile.FailFunc) error {
	if l.cfg.NoEnv {
		return nil
	}
	var errs effectfile.FileErrors
	missing := map[string]bool{}
	for _, ph := range e.allPlaceholders() {
		if ph.Kind != effectfile.KindEnv || missing[ph.Name] {
			continue
		}
		v, ok := l.cfg.LookupEnvFunc(ph.Name)
		if !ok || v == "" {
			missing[ph.Name] = true
			errs.Add(fail("", "the environment variable %s is not set (the declaration reads {env.%s})", ph.Name, ph.Name))
			continue
		}
		e.env[ph.Name] = v
		if len(v) >= SecretMinLength && !slices.Contains(e.secrets, v) {
			e.secrets = append(e.secrets, v)
		}
	}
	if len(errs) > 0 {
		// A base read from a missing variable cannot be resolved.
		return errs.Err()
	}
	for _, d := range e.requests() {
		if err := d.url.resolveBase(e.env, l.cfg.LoopbackOnly); err != nil {
			errs.Add(fail("", "url %s: %v", d.url.raw, err))
		}
	}
	// The longest secrets first, so that one holding another is redacted
	// whole.
	slices.SortFunc(e.secrets, func(a, b string) int { return len(b) - len(a) })
	return errs.Err()
}
