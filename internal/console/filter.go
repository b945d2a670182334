package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/outbox"
)

// filterForm is the intents filter as the form shows it: the query's
// values as given.
type filterForm struct {
	Namespace, State, Effect, Key, From, To string
}

func (f filterForm) values() url.Values {
	v := url.Values{}
	for name, value := range map[string]string{"namespace": f.Namespace, "state": f.State, "effect": f.Effect, "key": f.Key, "from": f.From, "to": f.To} {
		if value != "" {
			v.Set(name, value)
		}
	}
	return v
}

// dateLayouts are the "created between" fields' forms: what an
// <input type="datetime-local"> sends, with or without seconds, a date
// alone, and RFC 3339. A time without a zone is UTC, as the pages show
// times.
var dateLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02", time.RFC3339}

func parseTime(s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	for _, layout := range dateLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return &t, nil
		}
	}
	return nil, fmt.Errorf("%q is not a time such as 2025-06-01T09:30 (UTC)", s)
}

// parseFilter reads the intents filter from r's query, within what p
// sees.
func parseFilter(r *http.Request, p *principal) (filterForm, *filter, string) {
	q := r.URL.Query()
	form := filterForm{
		Namespace: strings.TrimSpace(q.Get("namespace")), State: q.Get("state"), Effect: strings.TrimSpace(q.Get("effect")),
		Key: q.Get("key"), From: q.Get("from"), To: q.Get("to"),
	}
	f := &filter{Namespace: form.Namespace, Effect: form.Effect, KeyPrefix: form.Key}
	if p.namespace != "" {
		// A token sees its namespace only, whatever the query says.
		form.Namespace, f.Namespace = p.namespace, p.namespace
	}
	var problems []string
	if form.State != "" {
		if !outbox.State(form.State).Valid() {
			problems = append(problems, fmt.Sprintf("%q is not a state", form.State))
		} else {
			f.States = []string{form.State}
		}
	}
	var err error
	if f.CreatedAfter, err = parseTime(form.From); err != nil {
		problems = append(problems, "created from: "+err.Error())
	}
	if f.CreatedBefore, err = parseTime(form.To); err != nil {
		problems = append(problems, "created before: "+err.Error())
	}
	return form, f, strings.Join(problems, "; ")
}
