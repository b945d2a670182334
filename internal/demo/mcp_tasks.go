package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outbox-dev/outbox/internal/mcpwire"
	"github.com/outbox-dev/outbox/outbox"
)

// wireHost is a host that speaks MCP 2026-07-28 on the wire (package
// mcpwire): it sees the tasks and input requests an SDK's tool call hides.
type wireHost struct {
	endpoint, token string
	http            *http.Client
	ids             atomic.Int64
}

// call sends method and returns its result, or the JSON-RPC error as an
// error.
func (h *wireHost) call(ctx context.Context, method string, params map[string]any, tasks, elicit bool) (json.RawMessage, error) {
	params["_meta"] = mcpwire.Meta("demo-host", tasks, elicit)
	body, err := mcpwire.Request(h.ids.Add(1), method, params)
	if err != nil {
		return nil, err
	}
	raw, err := mcpwire.Post(ctx, h.http, h.endpoint, h.token, method, params, body)
	if err != nil {
		return nil, err
	}
	var resp mcpwire.Response
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("%s: JSON-RPC error %d: %s", method, resp.Error.Code, resp.Error.Message)
	}
	return resp.Result, nil
}

// wireAnswer is what the demo reads of an answer: a task, an input
// request, or a tool result.
type wireAnswer struct {
	ResultType    string `json:"resultType"`
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	RequestState  string `json:"requestState"`
	InputRequests map[string]struct {
		Params struct {
			Message string `json:"message"`
		} `json:"params"`
	} `json:"inputRequests"`
	Result            json.RawMessage `json:"result"`
	StructuredContent struct {
		State     string `json:"state"`
		Duplicate bool   `json:"duplicate"`
	} `json:"structuredContent"`
}

// mcpTasksLane is part 6.
type mcpTasksLane struct {
	// joined: the re-issued call was answered with the first call's task,
	// or, when the intent had already ended, with its stored result as a
	// duplicate of it.
	joined          bool
	polls           int
	final           *outbox.Intent
	charges         int
	asked           string
	approved        *outbox.Intent
	approvedCharges int
}

// mcpTasks is part 6: a host that speaks MCP 2026-07-28 calls charge_card;
// its stream breaks before it reads the answer, and it re-issues the call
// under a new request id, as the protocol says it must: the same task,
// polled to one charge. Then a charge its caller asked a person to approve
// (require_approval "host") is approved from the host.
func (s *Story) mcpTasks(ctx context.Context) error {
	done := s.out.Progress("a host re-issues a charge after its stream broke, then approves another")
	defer done()
	h := &wireHost{endpoint: s.env.BaseURL + "/mcp", token: s.env.Token, http: &http.Client{Timeout: WaitMax}}
	stripe := s.env.Sandbox.Stripe
	lane := &s.tasks

	key := "demo-" + s.run + "-order-1004"
	args := map[string]any{"amount": 4200, "currency": chargeCurrency, "customer": chargeCustomer,
		"payment_method": chargePaymentMethod, "description": "order 1004", "idempotency_key": key}
	// The answer of the first call is lost with its stream: only the
	// re-issued call's is read.
	first, err := h.call(ctx, "tools/call", map[string]any{"name": "charge_card", "arguments": args}, true, false)
	if err != nil {
		return err
	}
	var a1, a2 wireAnswer
	_ = json.Unmarshal(first, &a1)
	second, err := h.call(ctx, "tools/call", map[string]any{"name": "charge_card", "arguments": args}, true, false)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(second, &a2); err != nil {
		return err
	}
	lane.joined = a2.TaskID != "" && a2.TaskID == a1.TaskID || a2.ResultType != "task" && a2.StructuredContent.Duplicate
	if a2.ResultType == "task" {
		for deadline := time.Now().Add(WaitMax); time.Now().Before(deadline); {
			raw, err := h.call(ctx, "tasks/get", map[string]any{"taskId": a2.TaskID}, true, false)
			if err != nil {
				return err
			}
			lane.polls++
			var t wireAnswer
			if err := json.Unmarshal(raw, &t); err != nil {
				return err
			}
			if t.Status != "working" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	final, err := s.env.Client.Get(ctx, s.env.Namespace, key)
	if err != nil {
		return err
	}
	lane.final = final
	lane.charges = stripe.EffectsFor(final.ProviderKey)

	key2 := "demo-" + s.run + "-order-1005"
	args2 := map[string]any{"amount": 1500, "currency": chargeCurrency, "customer": chargeCustomer,
		"payment_method": chargePaymentMethod, "description": "order 1005", "idempotency_key": key2, "require_approval": "host"}
	raw, err := h.call(ctx, "tools/call", map[string]any{"name": "charge_card", "arguments": args2}, false, true)
	if err != nil {
		return err
	}
	var ask wireAnswer
	if err := json.Unmarshal(raw, &ask); err != nil {
		return err
	}
	if ask.ResultType != "input_required" || len(ask.InputRequests) != 1 {
		return errors.New("the charge the host may approve was not asked of the host: " + string(raw))
	}
	var id string
	for k, r := range ask.InputRequests {
		id, lane.asked = k, r.Params.Message
	}
	// The person at the host approves: the call is retried with the answer
	// and the sealed requestState.
	if _, err := h.call(ctx, "tools/call", map[string]any{"name": "charge_card", "arguments": args2, "requestState": ask.RequestState,
		"inputResponses": map[string]any{id: map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}}}, false, true); err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, WaitMax)
	defer cancel()
	if lane.approved, err = s.env.Client.Wait(waitCtx, s.env.Namespace, key2); err != nil {
		return err
	}
	lane.approvedCharges = stripe.EffectsFor(lane.approved.ProviderKey)
	done()

	short := func(id string) string {
		if len(id) > 10 {
			return id[:10] + "…"
		}
		return id
	}
	tw := s.out.Table()
	fmt.Fprintf(tw, "   call 1\ttask %s %s; the stream breaks before the host reads it\n", short(a1.TaskID), a1.Status)
	if a2.ResultType == "task" {
		fmt.Fprintf(tw, "   call 2\tre-issued under a new request id: task %s, the same\n", short(a2.TaskID))
	} else {
		fmt.Fprintf(tw, "   call 2\tre-issued under a new request id: the charge had ended, so its stored result (%s, duplicate)\n", a2.StructuredContent.State)
	}
	fmt.Fprintf(tw, "   tasks/get\t%s: %s, %s\n", plural(lane.polls, "poll"), final.State, plural(lane.charges, "charge"))
	fmt.Fprintf(tw, "   host approval\tinput_required %q; approved from the host: %s, %s\n",
		strings.SplitN(lane.asked, "\n", 2)[0], lane.approved.State, plural(lane.approvedCharges, "charge"))
	tw.Flush() //nolint:errcheck // the writer's errors are its own
	s.check(lane.joined, "a call re-issued under a new request id joined the first call's task")
	s.check(final.State == outbox.StateSucceeded && lane.charges == 1, fmt.Sprintf("the task ended with one charge (%s)", plural(lane.charges, "charge")))
	approvedByHost := lane.approved.ApprovedBy != nil && strings.HasPrefix(*lane.approved.ApprovedBy, "host ")
	s.check(lane.approved.State == outbox.StateSucceeded && lane.approvedCharges == 1 && approvedByHost,
		"a charge approved from the host ran once, recorded as the host's approval")
	return nil
}
