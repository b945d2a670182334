package declared

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/effects"
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
		return nil, errs.err()
	}
	e := &Effect{name: name, tool: name, client: l.cfg.HTTPClient, onRuleError: l.cfg.OnRuleError, env: map[string]string{}}
	errs = append(errs, l.checkEffect(e, decl, presetDecl, fail)...)
	if len(errs) > 0 {
		return nil, errs.err()
	}
	e.sha256 = declarationSHA256(decl)
	return e, nil
}

// resolveDeclaration checks the effect's name and decodes its declaration,
// merging it into its preset's when it names one. It returns the resolved
// declaration and the preset's (nil without a preset), which bounds what
// an override may change; decl is nil when the rest cannot be checked.
func (l *loader) resolveDeclaration(name string, v any, fail failFunc) (decl, presetDecl orderedMap, errs FileErrors) {
	if !effects.ValidName(name) {
		errs.add(fail("", "an effect's name must be %s (it names the effect's River queue)", effects.NameRule))
	}
	if slices.Contains(l.cfg.Reserved, name) {
		errs.add(fail("", "the name of a built-in effect"))
	}
	decl, ok := v.(orderedMap)
	if !ok {
		errs.add(fail("", "must be a mapping"))
		return nil, nil, errs
	}
	errs.add(l.known(decl, "$.effects."+name, name, effectFields))
	p, ok := decl.get("preset")
	if !ok {
		return decl, nil, errs
	}
	pname, _ := p.(string)
	preset, ok := Preset(pname)
	if !ok {
		// The preset's fields are what the rest is checked against.
		errs.add(fail("preset", "unknown preset %q (outboxd effects presets lists them)", p))
		return nil, nil, errs
	}
	merged, err := mergePatch(preset.decl, decl.without("preset"))
	if err != nil {
		errs.add(fail("preset", "%v", err))
		return nil, nil, errs
	}
	return merged, preset.decl, errs
}

// checkEffect checks a resolved declaration's common fields, its request
// and the reading of its answer, its look-up and what its guarantee
// requires, and the environment it reads, filling in e as it goes.
func (l *loader) checkEffect(e *Effect, decl, presetDecl orderedMap, fail failFunc) FileErrors {
	var errs FileErrors
	errs.add(l.effectCommon(e, decl, presetDecl, fail))
	errs.add(l.effectRequest(e, decl, fail))
	errs.add(l.effectLookup(e, decl, fail))
	errs.add(l.effectEnv(e, fail))
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
