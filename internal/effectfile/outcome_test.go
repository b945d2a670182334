package effectfile_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/effectfile"
)

// parseOutcome checks the outcome rules of a YAML declaration; a when that
// is "bad" does not compile.
func parseOutcome(t *testing.T, yaml string) ([]effectfile.Rule, error) {
	t.Helper()
	_, doc, err := effectfile.ParseSource("effects.yaml", []byte(yaml))
	require.NoError(t, err)
	compile := func(expr string) (*effectfile.Condition, error) {
		if expr == "bad" {
			return nil, errors.New("does not compile")
		}
		return &effectfile.Condition{Expr: expr}, nil
	}
	fail := func(field, format string, args ...any) error {
		return &effectfile.FileError{File: "effects.yaml", Field: field, Err: fmt.Errorf(format, args...)}
	}
	return effectfile.ParseOutcome(doc.(effectfile.Map), compile, fail)
}

// One parser checks the outcome rules of HTTP effects and of upstream
// tools, and it reports every problem of every rule, not the first.
func TestParseOutcome(t *testing.T) {
	t.Parallel()

	t.Run("EveryProblem", func(t *testing.T) {
		t.Parallel()
		_, err := parseOutcome(t, `outcome:
  - {when: bad, class: permanent}
  - {when: "true", class: broken, code: Not-Snake}
  - {when: "true", class: success, extra: 1}
  - just a string
`)
		var errs effectfile.FileErrors
		require.ErrorAs(t, err, &errs)
		var fields []string
		for _, fe := range errs {
			fields = append(fields, fe.Field)
		}
		require.Equal(t, []string{
			"outcome[0].when",
			"outcome[1].class", "outcome[1].code",
			"outcome[2].extra",
			"outcome[3]",
		}, fields)
	})

	t.Run("Rules", func(t *testing.T) {
		t.Parallel()
		rules, err := parseOutcome(t, `outcome:
  - {when: "status == 409", class: success}
  - {when: "status == 402", class: permanent, code: card_declined}
`)
		require.NoError(t, err)
		require.Len(t, rules, 2)
		require.Equal(t, effectfile.ClassSuccess, rules[0].Class)
		require.Equal(t, "status == 409", rules[0].When.Expr)
		require.Equal(t, "card_declined", rules[1].Code)
	})

	t.Run("NotAList", func(t *testing.T) {
		t.Parallel()
		_, err := parseOutcome(t, "outcome: {when: x}\n")
		require.ErrorContains(t, err, "must be a list of rules")
	})

	t.Run("None", func(t *testing.T) {
		t.Parallel()
		rules, err := parseOutcome(t, "other: 1\n")
		require.NoError(t, err)
		require.Empty(t, rules)
	})
}
