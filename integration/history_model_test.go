package integration

import (
	"fmt"
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
)

// histInput is one client operation on a key, as recorded.
type histInput struct {
	Op  string // enqueue, get, wait, cancel, resolve, approve
	Key string
	// Outcome is resolve's: succeeded or failed.
	Outcome string
}

// histOutput is the operation's completion: ok, fail (a definite refusal:
// nothing changed), or info (no answer, or a 5xx: it may have taken effect).
type histOutput struct {
	Result    string // ok, fail, info
	Status    int
	Code      string
	ID        int64
	State     string
	Duplicate bool
}

// histState is the model's state of one key: the intent's id (0 when none
// is known), its state as last observed, and what in-doubt (info)
// operations may yet have done.
type histState struct {
	ID    int64
	State string
	// MaybeEnqueued: an enqueue ended info, so the intent may exist.
	MaybeEnqueued bool
	// MaybeCancelled, MaybeResolved, MaybeApproved: the operation ended
	// info, so its transition may appear later.
	MaybeCancelled, MaybeResolved, MaybeApproved bool
}

// successors are the intent state machine's moves made by outboxd itself
// (drain, workers, reconciler, expiry); the client's moves (approve,
// cancel, an operator's resolve) are the operations' own.
var successors = map[string][]string{
	"pending": {"running", "succeeded", "failed", "unknown"},
	"running": {"pending", "succeeded", "failed", "unknown"},
	// An approval that expires is cancelled by the reconciler.
	"awaiting_approval": {"cancelled"},
}

// reachable reports whether outboxd alone can take an intent from one state
// to another, allowing what in-doubt operations of s may have done.
func (s histState) reachable(from, to string) bool {
	seen := map[string]bool{from: true}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			return true
		}
		next := append([]string(nil), successors[cur]...)
		if s.MaybeApproved && cur == "awaiting_approval" {
			next = append(next, "pending")
		}
		if s.MaybeCancelled && (cur == "pending" || cur == "awaiting_approval") {
			next = append(next, "cancelled")
		}
		if s.MaybeResolved && cur == "unknown" {
			next = append(next, "succeeded", "failed")
		}
		for _, n := range next {
			if !seen[n] {
				seen[n] = true
				queue = append(queue, n)
			}
		}
	}
	return false
}

// observe checks an answer that names the intent: the one id per key, and
// a state reachable by legal moves from the last one (a terminal state
// never changes, but for an operator's resolve of unknown).
func (s histState) observe(id int64, state string) (bool, histState) {
	switch {
	case s.ID == 0 && !s.MaybeEnqueued:
		return false, s // an intent nobody enqueued
	case s.ID != 0 && s.ID != id:
		return false, s // a second intent for the key
	case s.ID != 0 && !s.reachable(s.State, state):
		return false, s
	}
	s.ID, s.State = id, state
	return true, s
}

// intentModel is the specification each key's history must be
// linearizable against.
var intentModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(histInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return histState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(histState), input.(histInput), output.(histOutput)
		switch out.Result {
		case "info":
			switch in.Op {
			case "enqueue":
				s.MaybeEnqueued = true
			case "cancel":
				s.MaybeCancelled = true
			case "resolve":
				s.MaybeResolved = true
			case "approve":
				s.MaybeApproved = true
			}
			return true, s
		case "fail":
			// A definite refusal changes nothing. A read that finds no
			// intent is a refusal too, valid only while none is known.
			if out.Code == "not_found" {
				return s.ID == 0, s
			}
			return true, s
		}
		switch in.Op {
		case "enqueue":
			if s.ID == 0 && !out.Duplicate {
				s.ID, s.State = out.ID, out.State
				return out.State == "pending" || out.State == "awaiting_approval", s
			}
			if !out.Duplicate {
				return false, s // a second "new" answer for the key
			}
			return s.observe(out.ID, out.State)
		case "get", "wait":
			return s.observe(out.ID, out.State)
		case "cancel":
			if s.ID != 0 && s.State != "cancelled" && !s.reachable(s.State, "pending") && s.State != "awaiting_approval" {
				return false, s
			}
			if out.State != "cancelled" {
				return false, s
			}
			if s.ID == 0 && !s.MaybeEnqueued || s.ID != 0 && s.ID != out.ID {
				return false, s
			}
			s.ID, s.State = out.ID, "cancelled"
			return true, s
		case "resolve":
			if !s.reachable(s.State, "unknown") || out.State != in.Outcome || s.ID != out.ID {
				return false, s
			}
			s.State = out.State
			return true, s
		case "approve":
			if s.State != "awaiting_approval" || s.ID != out.ID || out.State != "pending" && !s.reachable("pending", out.State) {
				return false, s
			}
			s.State = out.State
			return true, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(histInput), output.(histOutput)
		switch out.Result {
		case "info":
			return fmt.Sprintf("%s(%s) -> info %d %s", in.Op, in.Key, out.Status, out.Code)
		case "fail":
			return fmt.Sprintf("%s(%s) -> fail %d %s", in.Op, in.Key, out.Status, out.Code)
		}
		return fmt.Sprintf("%s(%s%s) -> %d %s dup=%v", in.Op, in.Key, in.Outcome, out.ID, out.State, out.Duplicate)
	},
	DescribeState: func(state any) string {
		s := state.(histState)
		return fmt.Sprintf("id=%d %s maybe(enq=%v cancel=%v resolve=%v approve=%v)", s.ID, s.State,
			s.MaybeEnqueued, s.MaybeCancelled, s.MaybeResolved, s.MaybeApproved)
	},
}

// infoReturn is an info operation's completion: it may take effect at any
// time after its call.
const infoReturn = math.MaxInt64 / 2

// TestHistoryModel shows that the model refuses the anomalies it exists
// for, so that TestHistory's check can fail.
func TestHistoryModel(t *testing.T) {
	t.Parallel()
	op := func(call, ret int64, in histInput, out histOutput) porcupine.Operation {
		return porcupine.Operation{Input: in, Call: call, Output: out, Return: ret}
	}
	enq := histInput{Op: "enqueue", Key: "k"}
	get := histInput{Op: "get", Key: "k"}
	for name, h := range map[string][]porcupine.Operation{
		"TwoIntentsForAKey": {
			op(0, 1, enq, histOutput{Result: "ok", ID: 1, State: "pending"}),
			op(2, 3, enq, histOutput{Result: "ok", ID: 2, State: "pending"}),
		},
		"DuplicateAnswersAnotherID": {
			op(0, 1, enq, histOutput{Result: "ok", ID: 1, State: "pending"}),
			op(2, 3, enq, histOutput{Result: "ok", ID: 2, State: "pending", Duplicate: true}),
		},
		"TerminalStateChanges": {
			op(0, 1, enq, histOutput{Result: "ok", ID: 1, State: "pending"}),
			op(2, 3, get, histOutput{Result: "ok", ID: 1, State: "succeeded"}),
			op(4, 5, get, histOutput{Result: "ok", ID: 1, State: "failed"}),
		},
		"IntentNobodyEnqueued": {
			op(0, 1, get, histOutput{Result: "ok", ID: 1, State: "pending"}),
		},
	} {
		require.False(t, porcupine.CheckOperations(intentModel, h), name)
	}
	// An in-doubt enqueue may have recorded the intent; an operator may
	// resolve unknown.
	require.True(t, porcupine.CheckOperations(intentModel, []porcupine.Operation{
		op(0, infoReturn, enq, histOutput{Result: "info"}),
		op(2, 3, get, histOutput{Result: "ok", ID: 1, State: "unknown"}),
		op(4, 5, histInput{Op: "resolve", Key: "k", Outcome: "succeeded"}, histOutput{Result: "ok", ID: 1, State: "succeeded"}),
	}))
}
