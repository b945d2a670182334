// Package effectfile is the machinery of outbox's effects file that both of
// its kinds of declaration use: declared HTTP effects (effects/declared)
// and MCP upstreams (internal/upstream). It holds the file's YAML tree with
// its positions (Map, Source), the problems found, by line (FileError,
// FileErrors), placeholders and templates (Template, RenderCtx), compiled
// CEL conditions (Condition), the outcome-rule and result parsers, the
// checks of argument schemas and of URLs, and the limits both enforce.
// docs/effects.md is the file's reference.
package effectfile

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// SecretMinLength is the length from which an {env.*} value is scrubbed
// from what an effect stores and emits. A shorter value (a flag, a region,
// a port) cannot be a secret worth the name, and scrubbing every
// occurrence of its letters would mangle the provider's answers.
const SecretMinLength = 8

// ProviderKeyLength is the length of every provider key outbox sends: a
// declared max_key_length below it is refused.
const ProviderKeyLength = 47

// Limits on what an answer leaves behind.
const (
	// ResultMax bounds an intent's result, as JSON.
	ResultMax = 64 << 10
	// ErrorTextMax bounds the provider's text kept in an intent's error.
	ErrorTextMax = 2 << 10
)

// FailFunc makes the error for a field of the declaration being checked:
// field is relative to the declaration ("request.url"), "" for the whole.
type FailFunc func(field, format string, args ...any) error

// Source is an effects file being checked: its name and its YAML tree,
// which gives each problem its line.
type Source struct {
	// File names the file in errors.
	File string
	// AST is the file's YAML tree.
	AST *ast.File
}

// ParseSource parses an effects file's contents (YAML 1.2 or JSON): its
// tree, and its document with every mapping a Map. Its error is a
// FileErrors.
func ParseSource(file string, data []byte) (*Source, any, error) {
	astFile, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, nil, FileErrors{yamlError(file, err)}
	}
	var doc any
	if err := yaml.UnmarshalWithOptions(data, &doc, yaml.UseOrderedMap()); err != nil {
		return nil, nil, FileErrors{yamlError(file, err)}
	}
	return &Source{File: file, AST: astFile}, Ordered(doc), nil
}

// Line finds the line of a YAML path ("$.effects.refund.args"), or of the
// nearest enclosing node that has one.
func (s *Source) Line(path string) int {
	for path != "" {
		if p, err := yaml.PathString(path); err == nil {
			if node, err := p.FilterFile(s.AST); err == nil && node != nil && node.GetToken() != nil {
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

// Errorf makes a FileError for the node at path (a YAML path such as
// "$.effects.refund.request.url"), with its line; the caller names the
// effect or upstream at fault in it.
func (s *Source) Errorf(path, field, format string, args ...any) *FileError {
	return &FileError{File: s.File, Line: s.Line(path), Field: field, Err: fmt.Errorf(format, args...)}
}
