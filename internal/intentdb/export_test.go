package intentdb

import (
	"reflect"
	"strings"
)

// SQLDrainQueue is the drain's read of the dispatch queue, for its plan's
// test.
func (q *Queries) SQLDrainQueue() string { return q.sqlDrainQueue }

// RenderedStatements returns every statement q holds, rendered.
func (q *Queries) RenderedStatements() map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(q).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() == reflect.String && strings.HasPrefix(f.Name, "sql") {
			out[f.Name] = v.Field(i).String()
		}
	}
	return out
}
