package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/effects"
)

// An upstream may answer a recorded call with a task (MCP's tasks
// extension, SEP-2663): outbox's client declares the extension, records the
// task's id on the attempt before anything else (the call was received:
// the id is the effect's object), and polls tasks/get until the task ends.
// An attempt that dies resumes polling the recorded task on any replica
// instead of calling again (effects.Checkpointer). docs/effects.md,
// "Upstreams that answer with tasks".

// TasksExtension is the tasks extension's identifier.
const TasksExtension = "io.modelcontextprotocol/tasks"

// Codes of an upstream task's ends.
const (
	// CodeUpstreamTaskWorking: the attempt's time ran out while the
	// upstream's task was still working; the next attempt polls it again.
	CodeUpstreamTaskWorking = "upstream_task_working"
	// CodeUpstreamTaskCancelled: the upstream cancelled its task.
	CodeUpstreamTaskCancelled = "upstream_task_cancelled"
)

// The bounds of the interval between two polls of an upstream task,
// whatever it suggests (pollIntervalMs).
const (
	taskPollMin = 100 * time.Millisecond
	taskPollMax = 5 * time.Second
)

// taskCheckpoint is what an attempt records when its call was answered
// with a task.
type taskCheckpoint struct {
	Upstream     string `json:"upstream"`
	UpstreamTask string `json:"upstream_task"`
}

// taskGetParams are tasks/get's and tasks/cancel's parameters.
type taskGetParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

// taskResult is a task as tasks/get answers it (and a CreateTaskResult).
type taskResult struct {
	mcp.ResultBase
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage"`
	PollIntervalMs int64           `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result"`
	Error          *jsonrpc.Error  `json:"error"`
}

// addTaskMethods lets client send tasks/get and tasks/cancel, which the SDK
// does not know, and declares the extension in its capabilities.
func addTaskMethods(client *mcp.Client) error {
	if err := mcp.AddSendingCustomMethod[*taskGetParams, *taskResult](client, "tasks/get"); err != nil {
		return err
	}
	return mcp.AddSendingCustomMethod[*taskGetParams, *taskAck](client, "tasks/cancel")
}

// taskAck is tasks/cancel's empty acknowledgement.
type taskAck struct {
	mcp.ResultBase
}

// taskSlot catches, for one call, the task its upstream answered: the SDK
// decodes a tools/call answer as a CallToolResult, which has no room for a
// task, so the raw answer is read where it passes (the HTTP response body,
// the stdio connection) and put here.
type taskSlot struct {
	mu  sync.Mutex
	raw json.RawMessage
}

type taskSlotKey struct{}

func withTaskSlot(ctx context.Context) (context.Context, *taskSlot) {
	s := &taskSlot{}
	return context.WithValue(ctx, taskSlotKey{}, s), s
}

func (s *taskSlot) get() json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw
}

// inspect puts in the slot the result of msg, a JSON-RPC response, when it
// is a task.
func (s *taskSlot) inspect(msg []byte) {
	var resp struct {
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(msg, &resp) != nil || len(resp.Result) == 0 {
		return
	}
	var probe struct {
		ResultType string `json:"resultType"`
	}
	if json.Unmarshal(resp.Result, &probe) == nil && probe.ResultType == "task" {
		s.mu.Lock()
		s.raw = resp.Result
		s.mu.Unlock()
	}
}

// taskSniffMax bounds what is kept of a response body to find a task in:
// a CreateTaskResult is small.
const taskSniffMax = 1 << 20

// sniffBody wraps an HTTP response body of a call, whose content type is
// ct, so that a task answer lands in slot as the SDK reads it.
func sniffBody(body io.ReadCloser, ct string, slot *taskSlot) io.ReadCloser {
	return &taskSniffer{rc: body, sse: bytes.HasPrefix([]byte(ct), []byte("text/event-stream")), slot: slot}
}

type taskSniffer struct {
	rc   io.ReadCloser
	sse  bool
	slot *taskSlot
	buf  []byte
}

func (s *taskSniffer) Read(b []byte) (int, error) {
	n, err := s.rc.Read(b)
	if n > 0 && len(s.buf) < taskSniffMax {
		s.buf = append(s.buf, b[:n]...)
	}
	if s.sse {
		// One event a line: each complete data line is a message.
		for {
			i := bytes.IndexByte(s.buf, '\n')
			if i < 0 {
				break
			}
			line := bytes.TrimRight(s.buf[:i], "\r")
			if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				s.slot.inspect(bytes.TrimSpace(data))
			}
			s.buf = s.buf[i+1:]
		}
	} else if errors.Is(err, io.EOF) {
		s.slot.inspect(s.buf)
	}
	return n, err
}

func (s *taskSniffer) Close() error { return s.rc.Close() }

// taskTransport wraps a stdio transport so that a task answer to a call
// lands in the call's slot: the call's context reaches the connection's
// Write with its request, and the answer comes back by its id.
type taskTransport struct{ mcp.Transport }

func (t taskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &taskConn{Connection: c, slots: map[any]*taskSlot{}}, nil
}

type taskConn struct {
	mcp.Connection
	mu    sync.Mutex
	slots map[any]*taskSlot
}

func (c *taskConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" && req.ID.IsValid() {
		if slot, ok := ctx.Value(taskSlotKey{}).(*taskSlot); ok {
			c.mu.Lock()
			c.slots[req.ID.Raw()] = slot
			c.mu.Unlock()
		}
	}
	return c.Connection.Write(ctx, msg)
}

func (c *taskConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if resp, ok := msg.(*jsonrpc.Response); ok && err == nil {
		c.mu.Lock()
		slot := c.slots[resp.ID.Raw()]
		delete(c.slots, resp.ID.Raw())
		c.mu.Unlock()
		if slot != nil && resp.Error == nil {
			b, _ := json.Marshal(map[string]json.RawMessage{"result": resp.Result})
			slot.inspect(b)
		}
	}
	return msg, err
}

// executeTask carries on a call its upstream answered with the task raw:
// the task's id is recorded on the attempt first, then the task is polled.
func (t *Tool) executeTask(ctx context.Context, req *effects.Request, raw json.RawMessage) (json.RawMessage, error) {
	var created taskResult
	if err := json.Unmarshal(raw, &created); err != nil || created.TaskID == "" {
		return nil, effects.Ambiguous(CodeUpstreamError, fmt.Errorf("upstream %s tool %s answered a task without an id", t.conn.u.name, t.locked.Name))
	}
	if req.CheckpointFunc != nil {
		cp, _ := json.Marshal(taskCheckpoint{Upstream: t.conn.u.name, UpstreamTask: created.TaskID})
		if err := req.CheckpointFunc(ctx, cp); err != nil {
			// The upstream has the call: without its task recorded, a next
			// attempt could not resume it.
			return nil, effects.Ambiguous(CodeUpstreamLost, fmt.Errorf("upstream %s tool %s answered task %s, which could not be recorded: %w", t.conn.u.name, t.locked.Name, created.TaskID, err))
		}
	}
	return t.pollTask(ctx, req, &created)
}

// resumeTask polls the task an earlier attempt recorded, instead of calling
// again.
func (t *Tool) resumeTask(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	var cp taskCheckpoint
	if err := json.Unmarshal(req.Checkpoint, &cp); err != nil || cp.UpstreamTask == "" {
		return nil, effects.Ambiguous(CodeUpstreamLost, fmt.Errorf("upstream %s tool %s: an unreadable checkpoint", t.conn.u.name, t.locked.Name))
	}
	return t.pollTask(ctx, req, &taskResult{TaskID: cp.UpstreamTask, Status: "working"})
}

// pollTask polls task until it ends or ctx (the attempt's time) does. An
// operator's cancel of the intent (req.CancelRequestedFunc) is passed to
// the upstream as tasks/cancel, once per attempt, and the task is polled on
// to the end the upstream reports.
func (t *Tool) pollTask(ctx context.Context, req *effects.Request, task *taskResult) (json.RawMessage, error) {
	cancelSent := false
	for {
		switch task.Status {
		case "completed":
			var res mcp.CallToolResult
			if err := json.Unmarshal(task.Result, &res); err != nil {
				return nil, effects.Ambiguous(CodeUpstreamError, fmt.Errorf("upstream %s tool %s: task %s completed with an unreadable result", t.conn.u.name, t.locked.Name, task.TaskID))
			}
			return t.classify(&res, nil, req)
		case "failed":
			rpcErr := task.Error
			if rpcErr == nil {
				rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "upstream task failed: " + task.StatusMessage}
			}
			return t.classify(nil, rpcErr, req)
		case "cancelled":
			if cancelSent {
				// Stopped at the operator's request: the intent ends
				// cancelled.
				return nil, effects.Cancelled(CodeUpstreamTaskCancelled, fmt.Errorf("upstream %s tool %s: task %s cancelled at the operator's request: %s", t.conn.u.name, t.locked.Name, task.TaskID, t.conn.u.scrub(task.StatusMessage)))
			}
			// The tool's rules decide, as for an error after the send.
			return t.classify(nil, &jsonrpc.Error{Code: codeTaskCancelled, Message: "upstream task cancelled: " + task.StatusMessage}, req)
		case "input_required":
			// outbox declares no elicitation to its upstreams: nobody can
			// answer, and the upstream has the call.
			return nil, effects.Ambiguous(CodeUpstreamInputRequired, fmt.Errorf("upstream %s tool %s: task %s asks for input, which outbox never gives", t.conn.u.name, t.locked.Name, task.TaskID))
		}
		if !cancelSent && req.CancelRequestedFunc != nil {
			if requested, err := req.CancelRequestedFunc(ctx); err == nil && requested {
				// The ack is empty whatever the upstream does; what it did
				// shows in the task's status. A cancel that fails to send
				// is sent again at the next poll.
				if err := t.cancelTask(ctx, task.TaskID); err != nil {
					t.conn.logger.WarnContext(ctx, "upstream task cancel failed", "task", task.TaskID, "error", t.conn.u.scrub(err.Error()))
				} else {
					cancelSent = true
				}
			}
		}
		wait := min(max(time.Duration(task.PollIntervalMs)*time.Millisecond, taskPollMin), taskPollMax)
		if cancelSent {
			wait = min(wait, time.Second) // the end the cancel brings is awaited closely
		}
		select {
		case <-ctx.Done():
			return nil, effects.NotSent(CodeUpstreamTaskWorking, fmt.Errorf("upstream %s tool %s: task %s still working when the attempt's time ran out; the next attempt polls it again", t.conn.u.name, t.locked.Name, task.TaskID))
		case <-time.After(wait):
		}
		next, err := t.getTask(ctx, task.TaskID)
		if err != nil {
			if ctx.Err() != nil {
				continue // reported as still working above
			}
			var rpcErr *jsonrpc.Error
			if errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeInvalidParams {
				// The upstream no longer knows the task (expired, or lost
				// in its restart): what it did is not known.
				return nil, effects.Ambiguous(CodeUpstreamLost, fmt.Errorf("upstream %s tool %s: task %s is unknown to the upstream: %s", t.conn.u.name, t.locked.Name, task.TaskID, t.conn.u.scrub(rpcErr.Message)))
			}
			// A poll that failed (the session went away): polled again.
			t.conn.logger.WarnContext(ctx, "upstream task poll failed", "task", task.TaskID, "error", t.conn.u.scrub(err.Error()))
			continue
		}
		next.PollIntervalMs = max(next.PollIntervalMs, 0)
		task = next
	}
}

// codeTaskCancelled is the JSON-RPC code an upstream task's cancellation is
// classified under (the code JSON-RPC implementations use for a cancelled
// request).
const codeTaskCancelled = -32800

// getTask sends tasks/get over a session of the upstream's.
func (t *Tool) getTask(ctx context.Context, id string) (*taskResult, error) {
	_, s, release, err := t.conn.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return mcp.CallCustomMethod[*taskGetParams, *taskResult](ctx, s, "tasks/get", &taskGetParams{TaskID: id})
}

// cancelTask sends tasks/cancel over a session of the upstream's.
func (t *Tool) cancelTask(ctx context.Context, id string) error {
	_, s, release, err := t.conn.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	_, err = mcp.CallCustomMethod[*taskGetParams, *taskAck](ctx, s, "tasks/cancel", &taskGetParams{TaskID: id})
	return err
}

// Checkpoints implements effects.Checkpointer: a call answered with a task
// records the task, and the next attempt polls it.
func (t *Tool) Checkpoints() bool { return true }
