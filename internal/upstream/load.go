package upstream

import (
	"os"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/internal/effectfile"
)

// File is an effects file's declarations: HTTP effects and MCP upstreams.
type File struct {
	// Effects are the declared HTTP effects.
	Effects []*declared.Effect
	// Upstreams are the declared MCP upstreams; their tools come from the
	// lock (Bind).
	Upstreams []*Upstream
}

// LoadFile reads and checks the effects file at path: its effects and its
// upstreams. Its error is an effectfile.FileErrors.
func LoadFile(path string, config *declared.Config) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, effectfile.FileErrors{{File: path, Err: err}}
	}
	return ParseFile(path, data, config)
}

// ParseFile checks a file's contents: its effects (declared.Parse) and its
// upstreams. Its error is an effectfile.FileErrors: every problem found in
// either, by line.
func ParseFile(file string, data []byte, config *declared.Config) (*File, error) {
	src, doc, err := effectfile.ParseSource(file, data)
	if err != nil {
		return nil, err
	}
	var problems effectfile.FileErrors
	out := &File{}
	if out.Effects, err = declared.Parse(file, data, config); err != nil {
		problems.Add(err)
	}
	l := &loader{src: src, cfg: withDefaults(config)}
	out.Upstreams = l.upstreams(doc)
	problems = append(problems, l.problems...)
	if len(problems) > 0 {
		return nil, problems.Sorted()
	}
	return out, nil
}

// withDefaults returns a copy of c with the settings an upstream reads at
// their defaults, as declared.Parse fills them.
func withDefaults(c *declared.Config) *declared.Config {
	if c == nil {
		c = &declared.Config{}
	}
	out := *c
	if out.EffectTimeout <= 0 {
		out.EffectTimeout = effects.TimeoutDefault
	}
	if out.LookupEnvFunc == nil {
		out.LookupEnvFunc = os.LookupEnv
	}
	return &out
}

// upstreams checks the file's upstreams member, recording each problem.
// The file's shape (a mapping, its members) is declared.Parse's to check.
func (l *loader) upstreams(doc any) []*Upstream {
	root, ok := doc.(effectfile.Map)
	if !ok {
		return nil
	}
	ups, has := root.Get("upstreams")
	if !has {
		return nil
	}
	upMap, isMap := ups.(effectfile.Map)
	if !isMap || len(upMap) == 0 {
		l.problems.Add(l.src.Errorf("$.upstreams", "upstreams", "must map each upstream's name to its declaration"))
		return nil
	}
	var out []*Upstream
	for _, kv := range upMap {
		u, err := l.upstream(kv.Key, kv.Value)
		if err != nil {
			l.problems.Add(err)
			continue
		}
		out = append(out, u)
	}
	return out
}

// loader checks one file's upstreams.
type loader struct {
	src *effectfile.Source
	cfg *declared.Config

	// problems are those found so far.
	problems effectfile.FileErrors
}

// upstreamErrorf makes a FileError for a field of an upstream, at path:
// the FileError names the upstream (and the tool, in field).
func (l *loader) upstreamErrorf(path, upstream, field, format string, args ...any) error {
	fe := l.src.Errorf(path, field, format, args...)
	fe.Upstream = upstream
	return fe
}

// headerDecl is one header an HTTP upstream is sent.
type headerDecl struct {
	name  string
	value *effectfile.Template
}
