package httpapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/outbox-dev/outbox/outbox"
)

// parseQuery parses r's query, refusing parameters other than allowed: a
// misspelt filter must not silently widen a listing.
func parseQuery(r *http.Request, allowed ...string) (url.Values, error) {
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "query", Message: "cannot be parsed: " + err.Error()}
	}
	for name := range query {
		known := false
		for _, a := range allowed {
			known = known || name == a
		}
		if !known {
			msg := "unknown parameter " + quoteShort(name)
			if len(allowed) > 0 {
				msg += "; known: " + strings.Join(allowed, ", ")
			}
			return nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "query", Message: msg}
		}
	}
	return query, nil
}

// checkQuery refuses any query parameter.
func checkQuery(r *http.Request) error {
	_, err := parseQuery(r)
	return err
}

// single returns the one value of a query parameter ("" when absent).
func single(query url.Values, name string) (string, error) {
	switch values := query[name]; len(values) {
	case 0:
		return "", nil
	case 1:
		return values[0], nil
	}
	return "", &outbox.Error{Code: outbox.CodeInvalidArgs, Field: name, Message: "must be given once"}
}
