package effectfile

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Classes an outcome rule may name.
const (
	ClassSuccess   = "success"
	ClassNotSent   = "not_sent"
	ClassPermanent = "permanent"
	ClassAmbiguous = "ambiguous"
)

// Rule is one outcome rule: when its condition holds, the answer is of its
// class (and, for a failure, its code).
type Rule struct {
	When  *Condition
	Class string
	Code  string
}

var (
	// CodeRE is an error code's form: snake_case, at most 64 characters.
	CodeRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	// HeaderNameRE is an HTTP header name's form (RFC 9110 token).
	HeaderNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// ruleFields are the members of an outcome rule.
var ruleFields = []string{"when", "class", "code"}

// ParseOutcome checks a declaration's outcome rules (its outcome member),
// which classify an answer before the default classes do. compile compiles
// a rule's when in the caller's CEL environment (an HTTP answer's, an MCP
// result's). Every problem is reported, each through fail; no rule is
// returned when there is one.
func ParseOutcome(decl Map, compile func(expr string) (*Condition, error), fail FailFunc) ([]Rule, error) {
	rules, ok := decl.Get("outcome")
	if !ok {
		return nil, nil
	}
	list, ok := rules.([]any)
	if !ok {
		return nil, fail("outcome", "must be a list of rules")
	}
	var errs FileErrors
	var out []Rule
	for i, r := range list {
		field := fmt.Sprintf("outcome[%d]", i)
		rm, ok := r.(Map)
		if !ok {
			errs.Add(fail(field, "must be a mapping with when and class"))
			continue
		}
		before := len(errs)
		for _, kv := range rm {
			if !slices.Contains(ruleFields, kv.Key) {
				errs.Add(fail(field+"."+kv.Key, "unknown field (expected one of %s)", strings.Join(ruleFields, ", ")))
			}
		}
		when, _ := rm.Get("when")
		whenS, _ := when.(string)
		cond, err := compile(whenS)
		if err != nil {
			errs.Add(fail(field+".when", "%v", err))
		}
		class, _ := rm.Get("class")
		classS, _ := class.(string)
		if !slices.Contains([]string{ClassSuccess, ClassNotSent, ClassPermanent, ClassAmbiguous}, classS) {
			errs.Add(fail(field+".class", "must be success, not_sent, permanent or ambiguous, not %v", class))
		}
		code := ""
		if c, ok := rm.Get("code"); ok {
			code, _ = c.(string)
			if !CodeRE.MatchString(code) {
				errs.Add(fail(field+".code", "an error code is snake_case, such as card_declined"))
			}
		}
		if len(errs) == before {
			out = append(out, Rule{When: cond, Class: classS, Code: code})
		}
	}
	if len(errs) > 0 {
		return nil, errs.Err()
	}
	return out, nil
}
