package migrations

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// GrantsSQL is the SQL that lets role enqueue through outbox's SQL functions
// in schema, for namespaces (all when empty): outboxd migrate print-grants'
// output (docs/operations.md, "Database roles"). It lives with the
// migrations because it names the signatures of the functions they define.
func GrantsSQL(schema, role string, namespaces []string) string {
	s, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	var b strings.Builder
	fmt.Fprintf(&b, "-- Lets %s enqueue through outbox's SQL functions in schema %s; run as the schema's owner.\n", r, s)
	fmt.Fprintf(&b, "GRANT USAGE ON SCHEMA %s TO %s;\n", s, r)
	// Both signatures of each: the later ones take require_approval.
	fmt.Fprintf(&b, "GRANT EXECUTE ON FUNCTION %s.enqueue(text, text, text, jsonb, text), "+
		"%s.enqueue(text, text, text, jsonb, text, boolean), "+
		"%s.outbox_enqueue_many(text[], text[], text[], jsonb[], text[], text[]), "+
		"%s.outbox_enqueue_many(text[], text[], text[], jsonb[], text[], text[], boolean[]) TO %s;\n", s, s, s, s, r)
	if len(namespaces) == 0 {
		namespaces = []string{"*"}
	}
	for _, ns := range namespaces {
		fmt.Fprintf(&b, "INSERT INTO %s.outbox_namespace_grant (role_name, namespace) VALUES (%s, %s) ON CONFLICT DO NOTHING;\n",
			s, sqlLiteral(role), sqlLiteral(ns))
	}
	return b.String()
}

// sqlLiteral quotes s as an SQL string literal.
func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
