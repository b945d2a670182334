package declared

import (
	"errors"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/internal/httpsend"
	"github.com/outbox-dev/outbox/internal/effectfile"
)

// SecretMinLength is the length from which an {env.*} value is scrubbed
// from what an effect stores and emits. A shorter value (a flag, a region,
// a port) cannot be a secret worth the name, and scrubbing every
// occurrence of its letters would mangle the provider's answers.
const SecretMinLength = effectfile.SecretMinLength

// ProviderKeyLength is the length of every provider key outbox sends: a
// declared max_key_length below it is refused.
const ProviderKeyLength = effectfile.ProviderKeyLength

// Limits on what an answer leaves behind.
const (
	// ResultMax bounds an intent's result, as JSON.
	ResultMax = effectfile.ResultMax
	// ErrorTextMax bounds the provider's text kept in an intent's error.
	ErrorTextMax = effectfile.ErrorTextMax
)

// Classes an outcome rule may name.
const (
	ClassSuccess   = effectfile.ClassSuccess
	ClassNotSent   = effectfile.ClassNotSent
	ClassPermanent = effectfile.ClassPermanent
	ClassAmbiguous = effectfile.ClassAmbiguous
)

// Config configures Load and Parse.
type Config struct {
	// EffectTimeout is the attempts' deadline (dispatcher.Config.EffectTimeout):
	// a request's default and maximum timeout. Defaults to effects.TimeoutDefault.
	EffectTimeout time.Duration

	// HTTPClient sends the requests. It must not follow redirects.
	// Defaults to a client of httpsend.NewClient.
	HTTPClient *http.Client

	// LookupEnvFunc reads {env.*} variables. Defaults to os.LookupEnv.
	LookupEnvFunc func(name string) (string, bool)

	// LoopbackOnly refuses any base whose host is not loopback: the
	// sandbox's and the demo's rule. Defaults to false.
	LoopbackOnly bool

	// NoEnv skips reading {env.*} (outboxd effects check --no-env): a base
	// from a variable is then not checked. Defaults to false.
	NoEnv bool

	// OnRuleErrorFunc is called, with the effect's name, when an outcome rule
	// fails to evaluate (and so does not match). Defaults to none.
	OnRuleErrorFunc func(effect string)

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
	if out.LookupEnvFunc == nil {
		out.LookupEnvFunc = os.LookupEnv
	}
	if out.HTTPClient == nil {
		out.HTTPClient = httpsend.NewClient(64)
	} else {
		out.HTTPClient = httpsend.Wrap(out.HTTPClient)
	}
	return &out
}

// Load reads and checks the effects file at path (YAML 1.2 or JSON): its
// HTTP effects, as Parse. Its error is a FileErrors: every problem found.
func Load(path string, config *Config) ([]*Effect, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, effectfile.FileErrors{{File: path, Err: err}}
	}
	return Parse(path, data, config)
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// FileError is a declaration refused: which file, line, effect (or MCP
// upstream) and field.
type FileError = effectfile.FileError

// FileErrors is every problem Load or Parse found in a file, by line.
type FileErrors = effectfile.FileErrors

// Parse checks a file's contents; file names it in errors. Its error is a
// FileErrors: every problem found, by line. It returns the declared HTTP
// effects. A file may also declare MCP upstreams (its upstreams member),
// which outboxd checks and runs: Parse leaves them to it.
func Parse(file string, data []byte, config *Config) ([]*Effect, error) {
	src, doc, err := effectfile.ParseSource(file, data)
	if err != nil {
		return nil, err
	}
	l := &loader{src: src, cfg: config.withDefaults()}
	effs := l.declarations(doc)
	if len(l.problems) > 0 {
		return nil, l.problems.Sorted()
	}
	return effs, nil
}

// declarations checks the file's declarations, recording each problem.
func (l *loader) declarations(doc any) []*Effect {
	root, ok := doc.(effectfile.Map)
	if !ok {
		l.problems.Add(&effectfile.FileError{File: l.src.File, Line: 1, Err: errors.New("the file must be a mapping with effects, upstreams or both")})
		return nil
	}
	l.problems.Add(l.known(root, "$", "", []string{"effects", "upstreams"}))
	decls, hasEffects := root.Get("effects")
	declMap, isMap := decls.(effectfile.Map)
	_, hasUpstreams := root.Get("upstreams")
	switch {
	case hasEffects && (!isMap || len(declMap) == 0):
		l.problems.Add(l.errorf("$.effects", "", "effects", "must map each effect's name to its declaration"))
		return nil
	case !hasEffects && !hasUpstreams:
		l.problems.Add(l.errorf("$", "", "effects", "the file declares nothing: effects, upstreams or both"))
		return nil
	}
	var out []*Effect
	tools := map[string]string{}
	for _, reserved := range l.cfg.ReservedTools {
		tools[reserved] = "a built-in effect"
	}
	for _, kv := range declMap {
		e, err := l.effect(kv.Key, kv.Value)
		if err != nil {
			l.problems.Add(err)
			continue
		}
		if other, ok := tools[e.tool]; ok {
			l.problems.Add(l.errorf("$.effects."+kv.Key+".tool", kv.Key, "tool", "the MCP tool name %q is taken by %s", e.tool, other))
			continue
		}
		tools[e.tool] = "effect " + e.name
		out = append(out, e)
	}
	return out
}

// loader checks one file's declarations.
type loader struct {
	src *effectfile.Source
	cfg *Config

	// problems are those found so far.
	problems effectfile.FileErrors
}

// errorf makes a FileError for the node at path (a YAML path such as
// "$.effects.refund.request.url"), with its line.
func (l *loader) errorf(path, effect, field, format string, args ...any) error {
	fe := l.src.Errorf(path, field, format, args...)
	fe.Effect = effect
	return fe
}

// known refuses members of m not in fields, each.
func (l *loader) known(m effectfile.Map, path, effect string, fields []string) error {
	var errs effectfile.FileErrors
	for _, kv := range m {
		if !slices.Contains(fields, kv.Key) {
			errs.Add(l.errorf(path+"."+kv.Key, effect, strings.TrimPrefix(strings.TrimPrefix(path+"."+kv.Key, "$.effects."+effect), "."),
				"unknown field (expected one of %s)", strings.Join(fields, ", ")))
		}
	}
	return errs.Err()
}
