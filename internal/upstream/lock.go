package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/effectfile"
)

// LockVersion is the lock file format's version.
const LockVersion = 1

// Tool classes in the lock.
const (
	ClassRecorded    = "recorded"
	ClassPassthrough = "passthrough"
	ClassWithdrawn   = "withdrawn"
	// ClassLookup is a tool that is not mirrored but that a reconcilable
	// tool's look-up calls: pinned, so that its drift is seen too.
	ClassLookup = "lookup"
)

// textMax bounds text from an upstream that reaches the model.
const textMax = 2 << 10

// Lock is the upstreams' pinned catalogue: what `outboxd effects pin`
// listed, per upstream and tool. Every process reads tools, schemas and
// hashes from it, so none needs an upstream to start, and replicas agree.
type Lock struct {
	Version   int                        `json:"version"`
	Upstreams map[string]*LockedUpstream `json:"upstreams"`
}

// LockedUpstream is one upstream's pinned catalogue.
type LockedUpstream struct {
	// DeclarationSHA256 is the upstream's declaration the lock was pinned
	// for: another declaration refuses start until pinned again.
	DeclarationSHA256 string `json:"declaration_sha256"`
	// FieldSHA256 hashes each field of that declaration, by name, so that
	// a lock for another declaration can say what changed.
	FieldSHA256 map[string]string `json:"field_sha256,omitempty"`
	// Server is the upstream's name and version from its handshake.
	Server string        `json:"server,omitempty"`
	Tools  []*LockedTool `json:"tools"`
}

// LockedTool is one pinned tool.
type LockedTool struct {
	// Name is the tool's upstream name.
	Name string `json:"name"`
	// Mirrored is its name on outbox's MCP endpoints.
	Mirrored string `json:"mirrored"`
	// Class is recorded, passthrough, withdrawn or lookup.
	Class string `json:"class"`
	// Guarantee is a recorded tool's.
	Guarantee effects.Guarantee `json:"guarantee,omitempty"`
	// Withdrawn says why a tool is not mirrored.
	Withdrawn string `json:"withdrawn,omitempty"`
	// Title is the upstream's title of the tool (its own, else its
	// annotations'), cleaned and capped.
	Title string `json:"title,omitempty"`
	// Description is the upstream's, cleaned and capped.
	Description string `json:"description"`
	// InputSchema is the upstream's input schema, as listed.
	InputSchema json.RawMessage `json:"input_schema"`
	// Annotations are the upstream's hints, as listed.
	Annotations *mcp.ToolAnnotations `json:"annotations,omitempty"`
	// ListedSHA256 hashes what the upstream listed (name, input schema,
	// annotations): a live listing that differs is drift.
	ListedSHA256 string `json:"listed_sha256"`
}

// LockPath is the default path of the lock of the effects file at path:
// beside it, with ".lock" added.
func LockPath(effectsFile string) string { return effectsFile + ".lock" }

// ReadLock reads a lock file.
func ReadLock(path string) (*Lock, error) {
	data, err := os.ReadFile(path) //nolint:gosec // the operator's own lock file, named by OUTBOX_EFFECTS_LOCK
	if err != nil {
		return nil, err
	}
	var lock Lock
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&lock); err != nil {
		return nil, fmt.Errorf("%s: not a lock file: %w", path, err)
	}
	if lock.Version != LockVersion {
		return nil, fmt.Errorf("%s: lock version %d, expected %d", path, lock.Version, LockVersion)
	}
	return &lock, nil
}

// WriteLock writes lock to path, atomically (a temporary file renamed).
func WriteLock(path string, lock *Lock) error {
	data, err := json.MarshalIndent(lock, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil { //nolint:gosec // the lock holds no secret: schemas and names
		return err
	}
	return os.Rename(tmp, path)
}

var nonNameRE = regexp.MustCompile(`[^a-z0-9]+`)

// MirroredName is a tool's name on outbox's endpoints: prefix + upstream
// name, lower-cased, every run of characters outside [a-z0-9] one _, no
// leading or trailing _. It is "" when the result is no valid effect name
// (empty, starting with a digit, or longer than 64 characters).
func MirroredName(prefix, name string) string {
	s := nonNameRE.ReplaceAllString(strings.ToLower(prefix+name), "_")
	s = strings.Trim(s, "_")
	if !effects.ValidName(s) {
		return ""
	}
	return s
}

// cleanText strips control and invisible format characters from text an
// upstream sends toward the model, and caps it.
func cleanText(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r):
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	if len(s) > textMax {
		s = strings.ToValidUTF8(s[:textMax], "")
	}
	return s
}

// cleanListing returns an upstream's text for the lock and the model:
// scrubbed of the upstream's secrets, then cleaned and capped.
func (u *Upstream) cleanListing(s string) string { return cleanText(u.scrub(s)) }

// cleanSchema returns an input schema as the lock keeps it and the model
// reads it: every string scrubbed of the upstream's secrets, and every
// description and title (a parameter's included) cleaned and capped as
// the tool's description is. A schema that is not JSON is returned as it
// is, for the pin to refuse.
func (u *Upstream) cleanSchema(raw json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case string:
			return u.scrub(v)
		case map[string]any:
			out := make(map[string]any, len(v))
			for k, item := range v {
				if s, ok := item.(string); ok && (k == "description" || k == "title") {
					out[u.scrub(k)] = cleanText(u.scrub(s))
					continue
				}
				out[u.scrub(k)] = walk(item)
			}
			return out
		case []any:
			for i, item := range v {
				v[i] = walk(item)
			}
			return v
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return raw
	}
	return out
}

// cleanAnnotations returns an upstream's annotations with their title
// cleaned, capped and scrubbed.
func (u *Upstream) cleanAnnotations(a *mcp.ToolAnnotations) *mcp.ToolAnnotations {
	if a == nil {
		return nil
	}
	c := *a
	c.Title = u.cleanListing(a.Title)
	return &c
}

// listedSHA256 hashes what an upstream listed for a tool.
func listedSHA256(t *mcp.Tool) string {
	sum, _ := canonicalSHA256(map[string]any{"name": t.Name, "input_schema": t.InputSchema, "annotations": t.Annotations})
	return sum
}

// PinOpts are what Pin checks names against.
type PinOpts struct {
	// Taken are names no mirrored tool may take: the effects' and their
	// tools', and outbox's own tools. Name to what holds it.
	Taken map[string]string
}

// Pin classifies the tools an upstream listed into its lock entry. Names
// taken elsewhere (opts.Taken, then earlier tools of the same run) and
// schemas outbox cannot mirror withdraw a tool; problems lists each, for
// `effects pin` to refuse (a withdrawn tool is a warning at start, an
// error when pinning).
func (u *Upstream) Pin(server string, listed []*mcp.Tool, opts *PinOpts) (entry *LockedUpstream, problems []string) {
	entry = &LockedUpstream{DeclarationSHA256: u.sha256, FieldSHA256: u.fieldSHA256, Server: u.cleanListing(server)}
	taken := map[string]string{}
	if opts != nil {
		for k, v := range opts.Taken {
			taken[k] = v
		}
	}
	seen := map[string]bool{}
	for _, t := range listed {
		if t == nil || !u.mirrors(t.Name) {
			continue
		}
		seen[t.Name] = true
		// What the upstream says is kept for the model scrubbed, cleaned and
		// capped; the listing's hash, for drift, is of what it said.
		lt := &LockedTool{Name: t.Name, Description: u.cleanListing(t.Description), Annotations: u.cleanAnnotations(t.Annotations), ListedSHA256: listedSHA256(t)}
		lt.Title = t.Title
		if lt.Title == "" && t.Annotations != nil {
			lt.Title = t.Annotations.Title
		}
		lt.Title = u.cleanListing(lt.Title)
		lt.InputSchema, _ = json.Marshal(t.InputSchema)
		lt.InputSchema = u.cleanSchema(lt.InputSchema)
		decl := u.toolDecl(t.Name)
		withdraw := func(format string, args ...any) {
			lt.Class, lt.Withdrawn = ClassWithdrawn, fmt.Sprintf(format, args...)
			problems = append(problems, fmt.Sprintf("upstream %s: tool %s: %s", u.name, t.Name, lt.Withdrawn))
		}
		entry.Tools = append(entry.Tools, lt)

		lt.Mirrored = MirroredName(u.prefix, t.Name)
		if decl != nil && decl.mirrored != "" {
			lt.Mirrored = decl.mirrored
		}
		switch {
		case lt.Mirrored == "":
			withdraw("its mirrored name %q is no valid name (at most 64 characters of a-z, 0-9 and single _): give it a name:", u.prefix+t.Name)
			continue
		case taken[lt.Mirrored] != "":
			withdraw("its mirrored name %s is taken by %s: give it a name:", lt.Mirrored, taken[lt.Mirrored])
			continue
		}
		taken[lt.Mirrored] = "upstream " + u.name + " tool " + t.Name

		switch {
		case decl != nil && decl.passthrough:
			lt.Class = ClassPassthrough
		case decl == nil && u.readOnlyHints == ReadOnlyHintsTrust && t.Annotations != nil && t.Annotations.ReadOnlyHint:
			lt.Class = ClassPassthrough
		default:
			lt.Class = ClassRecorded
			lt.Guarantee = effects.GuaranteeAtMostOnce
			if decl != nil {
				lt.Guarantee = decl.guarantee
			}
		}
		if lt.Class == ClassPassthrough {
			continue
		}
		schema := lt.InputSchema
		if decl != nil && decl.args != nil {
			schema, _ = effectfile.MarshalJSON(effectfile.Plain(decl.args))
		}
		if err := checkMirrorable(schema); err != nil {
			withdraw("%v (args: in its declaration gives a replacement schema)", err)
			continue
		}
		if decl != nil {
			if err := decl.checkAgainst(schema); err != nil {
				withdraw("%v", err)
				continue
			}
		}
	}
	for _, d := range u.tools {
		if !seen[d.name] {
			problems = append(problems, fmt.Sprintf("upstream %s: tool %s is declared, but the upstream does not list it", u.name, d.name))
		}
		if d.lookup != nil && d.lookup.tool != "" {
			var lookupTool *LockedTool
			for _, lt := range entry.Tools {
				if lt.Name == d.lookup.tool {
					lookupTool = lt
				}
			}
			if lookupTool == nil {
				// A look-up tool need not be mirrored, but must exist, and
				// is pinned as a look-up: its listing is compared too.
				for _, t := range listed {
					if t.Name == d.lookup.tool {
						lookupTool = &LockedTool{Name: t.Name, Class: ClassLookup, Description: cleanText(t.Description),
							Annotations: t.Annotations, ListedSHA256: listedSHA256(t)}
						lookupTool.InputSchema, _ = json.Marshal(t.InputSchema)
						if t.Annotations == nil || !t.Annotations.ReadOnlyHint {
							if decl := u.toolDecl(t.Name); decl == nil || !decl.passthrough {
								lookupTool.Class = ClassRecorded
							}
						}
						if lookupTool.Class == ClassLookup && !slices.ContainsFunc(entry.Tools, func(lt *LockedTool) bool { return lt.Name == t.Name }) {
							entry.Tools = append(entry.Tools, lookupTool)
						}
					}
				}
			}
			switch {
			case lookupTool == nil:
				problems = append(problems, fmt.Sprintf("upstream %s: tool %s: lookup.tool %s is not listed by the upstream", u.name, d.name, d.lookup.tool))
			case lookupTool.Class == ClassRecorded:
				problems = append(problems, fmt.Sprintf("upstream %s: tool %s: lookup.tool %s is recorded, not pass-through (declare it passthrough: true if it only reads)", u.name, d.name, d.lookup.tool))
			}
		}
	}
	return entry, problems
}

// checkMirrorable refuses an input schema outbox cannot mirror: not a plain
// object, a top-level combinator, a property outbox takes for itself, or
// no valid schema by its own $schema.
func checkMirrorable(schema json.RawMessage) error {
	var m map[string]any
	if err := json.Unmarshal(schema, &m); err != nil || m == nil {
		return errors.New("its input schema is not a JSON object")
	}
	if t, ok := m["type"]; ok && t != "object" {
		return errors.New("its input schema is not a plain type: object")
	}
	for _, kw := range []string{"oneOf", "anyOf", "allOf", "not", "if", "then", "else"} {
		if _, ok := m[kw]; ok {
			return fmt.Errorf("its input schema has a top-level %s, which hosts refuse", kw)
		}
	}
	if props, ok := m["properties"].(map[string]any); ok {
		for _, r := range reservedArgs {
			if _, ok := props[r]; ok {
				return fmt.Errorf("it already has a property %s, which outbox takes for itself", r)
			}
		}
	}
	if _, err := compileSchema(schema); err != nil {
		return fmt.Errorf("its input schema is not valid: %s", effectfile.FirstLine(err.Error()))
	}
	return nil
}

// compileSchema compiles an upstream's schema by its own $schema (draft-07
// or 2020-12; 2020-12 when it names none), with local references only.
func compileSchema(schema json.RawMessage) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(effectfile.NoLoader{})
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	if m, ok := parsed.(map[string]any); ok {
		if s, ok := m["$schema"].(string); ok && !slices.Contains([]string{
			"http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema",
			"https://json-schema.org/draft/2020-12/schema",
		}, s) {
			return nil, fmt.Errorf("$schema %s: only draft-07 and 2020-12", s)
		}
	}
	if err := c.AddResource("upstream.json", parsed); err != nil {
		return nil, err
	}
	return c.Compile("upstream.json")
}

// checkAgainst checks a tool's declaration against the schema it is
// mirrored with: the marker's and key_arg's arguments are strings of it, a
// look-up's {args.*} are required arguments.
func (d *ToolDecl) checkAgainst(schema json.RawMessage) error {
	var m struct {
		Properties map[string]struct {
			Type      any    `json:"type"`
			MaxLength *int   `json:"maxLength"`
			MinLength *int   `json:"minLength"`
			Format    string `json:"format"`
			Pattern   string `json:"pattern"`
			Enum      []any  `json:"enum"`
			Const     any    `json:"const"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(schema, &m)
	isString := func(name string) (bool, *int) {
		p, ok := m.Properties[name]
		if !ok {
			return false, nil
		}
		switch t := p.Type.(type) {
		case string:
			return t == "string", p.MaxLength
		case []any:
			return slices.Contains(t, any("string")), p.MaxLength
		}
		return false, nil
	}
	if d.keyArg != "" {
		ok, maxLen := isString(d.keyArg)
		switch {
		case !ok:
			return fmt.Errorf("key_arg %s is not a string property of the upstream's schema", d.keyArg)
		case maxLen != nil && *maxLen < effectfile.ProviderKeyLength:
			return fmt.Errorf("key_arg %s: its maxLength %d is below the provider key's %d characters", d.keyArg, *maxLen, effectfile.ProviderKeyLength)
		}
		// outbox fills key_arg with the provider key: a constraint beyond
		// a string's length would refuse every call at the upstream.
		p := m.Properties[d.keyArg]
		switch {
		case p.MinLength != nil && *p.MinLength > effectfile.ProviderKeyLength:
			return fmt.Errorf("key_arg %s: its minLength %d is above the provider key's %d characters", d.keyArg, *p.MinLength, effectfile.ProviderKeyLength)
		case p.Format != "":
			return fmt.Errorf("key_arg %s: its schema has a format (%s) that the provider key outbox sets would not meet", d.keyArg, p.Format)
		case p.Pattern != "":
			return fmt.Errorf("key_arg %s: its schema has a pattern that the provider key outbox sets would not meet", d.keyArg)
		case p.Enum != nil || p.Const != nil:
			return fmt.Errorf("key_arg %s: its schema allows fixed values only (enum or const), never the provider key outbox sets", d.keyArg)
		}
	}
	if d.marker != nil {
		if ok, _ := isString(d.marker.arg); !ok {
			return fmt.Errorf("marker.arg %s is not a string property of the upstream's schema", d.marker.arg)
		}
	}
	if d.lookup != nil {
		var phs []*effectfile.Placeholder
		field := "lookup.args"
		for _, t := range d.lookup.argT {
			phs = append(phs, t.Placeholders()...)
		}
		if d.lookup.http != nil {
			phs, field = d.lookup.http.Placeholders(), "lookup"
		}
		for _, ph := range phs {
			if ph.Kind == effectfile.KindArgs && len(ph.Path) > 0 && !slices.Contains(m.Required, ph.Path[0]) {
				return fmt.Errorf("%s: %s is not a required argument of the tool: a call without it could not be looked up", field, ph.Text)
			}
		}
	}
	return nil
}
