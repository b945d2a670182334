package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-dev/outbox/internal/apierror"
	"github.com/outbox-dev/outbox/outbox"
)

// listAnswer is GET /v1/intents' answer.
type listAnswer struct {
	Intents    []*outbox.Intent `json:"intents"`
	NextCursor *string          `json:"next_cursor"`
}

// get is GET /v1/intents/{key}[?wait=30s].
func (h *Handler) get(w http.ResponseWriter, r *http.Request, namespace string) error {
	query, err := parseQuery(r, "wait")
	if err != nil {
		return err
	}
	var wait time.Duration
	if s, err := single(query, "wait"); err != nil {
		return err
	} else if s != "" {
		if wait, err = time.ParseDuration(s); err != nil || wait < 0 || wait > apierror.WaitMax {
			return &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "wait",
				Message: fmt.Sprintf("must be a duration from 0s to 60s, such as 30s; got %s", quoteShort(s))}
		}
	}
	intent, err := h.readIntent(r.Context(), namespace, r.PathValue("key"), wait)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, intent)
	return nil
}

// readIntent reads the intent, first waiting up to wait for it to be
// terminal. A wait that ends first answers the intent as it stands.
func (h *Handler) readIntent(ctx context.Context, namespace, key string, wait time.Duration) (*outbox.Intent, error) {
	if wait <= 0 {
		return h.client.Get(ctx, namespace, key)
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	intent, err := h.waits.Wait(waitCtx, namespace, key)
	if err == nil || ctx.Err() != nil || waitCtx.Err() == nil {
		return intent, err
	}
	// The wait ended, not the request: answer the intent as it stands
	// now. What the wait last read may be older (a claim, an attempt
	// wakes no wait).
	return h.client.Get(ctx, namespace, key)
}

// list is GET /v1/intents?state=&effect=&limit=&cursor=.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, namespace string) error {
	query, err := parseQuery(r, "state", "effect", "limit", "cursor")
	if err != nil {
		return err
	}
	params := &outbox.ListParams{Namespace: namespace, Limit: outbox.ListLimitDefault}
	for _, v := range query["state"] {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				params.States = append(params.States, outbox.State(s))
			}
		}
	}
	if params.Effect, err = single(query, "effect"); err != nil {
		return err
	}
	if params.Cursor, err = single(query, "cursor"); err != nil {
		return err
	}
	if s, err := single(query, "limit"); err != nil {
		return err
	} else if s != "" {
		limit, err := strconv.Atoi(s)
		if err != nil || limit < 1 || limit > outbox.ListLimitMax {
			return &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "limit",
				Message: fmt.Sprintf("must be a whole number from 1 to %d; got %s", outbox.ListLimitMax, quoteShort(s))}
		}
		params.Limit = limit
	}
	res, err := h.client.List(r.Context(), params)
	if err != nil {
		return err
	}
	answer := listAnswer{Intents: res.Intents}
	if res.NextCursor != "" {
		answer.NextCursor = &res.NextCursor
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}
