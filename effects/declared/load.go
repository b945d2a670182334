package declared

import (
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
