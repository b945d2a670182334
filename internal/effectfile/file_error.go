package effectfile

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

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

// FileErrors is every problem found in an effects file, by line. A
// problem that leaves nothing to check beyond it (a file that is not YAML,
// an unknown preset) is the last found in its scope: the file, or the
// effect.
type FileErrors []*FileError

// Error implements error: the problems, one a line.
func (e FileErrors) Error() string {
	lines := make([]string, len(e))
	for i, fe := range e {
		lines[i] = fe.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, so that errors.As finds the first
// *FileError.
func (e FileErrors) Unwrap() []error {
	errs := make([]error, len(e))
	for i, fe := range e {
		errs[i] = fe
	}
	return errs
}

// Add appends err's problems: a *FileError, or each of a FileErrors.
func (e *FileErrors) Add(err error) {
	var (
		many FileErrors
		one  *FileError
	)
	switch {
	case err == nil:
	case errors.As(err, &many):
		*e = append(*e, many...)
	case errors.As(err, &one):
		*e = append(*e, one)
	default:
		*e = append(*e, &FileError{Err: err})
	}
}

// Err returns the problems as an error: nil when there is none, a
// *FileError when there is one (so that a helper's single problem is
// returned as the helper made it), a FileErrors when there are more.
func (e FileErrors) Err() error {
	switch len(e) {
	case 0:
		return nil
	case 1:
		return e[0]
	}
	return e
}

// Sorted returns the problems by line, keeping the order of those on one.
func (e FileErrors) Sorted() FileErrors {
	slices.SortStableFunc(e, func(a, b *FileError) int { return a.Line - b.Line })
	return e
}
