package mcpserver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/outbox"
)

// TasksExtension is the MCP tasks extension's identifier (SEP-2663), which
// the server declares in its capabilities and a client declares in each
// request's capabilities to be answered with tasks.
const TasksExtension = "io.modelcontextprotocol/tasks"

// The tasks extension's methods.
const (
	methodTasksGet    = "tasks/get"
	methodTasksUpdate = "tasks/update"
	methodTasksCancel = "tasks/cancel"
)

// The task statuses of the extension.
const (
	taskWorking       = "working"
	taskInputRequired = "input_required"
	taskCompleted     = "completed"
	taskCancelled     = "cancelled"
)

// The outcomes counted by Config.TaskFunc (outbox_mcp_tasks_total).
const (
	// TaskCreated: a call was answered with a new task.
	TaskCreated = "created"
	// TaskJoined: a duplicate call was answered with the task of the
	// first.
	TaskJoined = "joined"
	// TaskPolledToEnd: a tasks/get answered a task in a terminal status.
	TaskPolledToEnd = "polled_to_end"
)

// Poll intervals by what a task waits for (docs/agents.md): a queued or
// running intent ends in seconds; one an operator must approve or resolve
// waits for a person.
const (
	pollWorking  = time.Second
	pollOperator = 30 * time.Second
	pollUnknown  = 60 * time.Second
)

// codeMissingCapability is the JSON-RPC error of a request that needs a
// capability the client did not declare (MCP 2026-07-28).
const codeMissingCapability = -32021

// task is a task as the extension's Task and DetailedTask shapes carry it.
type task struct {
	TaskID         string              `json:"taskId"`
	Status         string              `json:"status"`
	StatusMessage  string              `json:"statusMessage,omitempty"`
	CreatedAt      string              `json:"createdAt"`
	LastUpdatedAt  string              `json:"lastUpdatedAt"`
	TTLMs          *int64              `json:"ttlMs"`
	PollIntervalMs int64               `json:"pollIntervalMs,omitempty"`
	InputRequests  mcp.InputRequestMap `json:"inputRequests,omitempty"`
	Result         json.RawMessage     `json:"result,omitempty"`
}

// taskResult is CreateTaskResult (resultType "task", the answer of a call)
// and GetTaskResult (resultType "complete", the answer of tasks/get).
type taskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	task
}

// taskParams are tasks/get's and tasks/cancel's parameters.
type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

// updateTaskParams are tasks/update's parameters.
type updateTaskParams struct {
	mcp.ParamsBase
	TaskID         string                     `json:"taskId"`
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
}

// ackResult is the empty acknowledgement of tasks/update and tasks/cancel.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// TaskIDs derives MCP task ids from the state key: the server's, and the
// console's, which shows each intent's. It is safe for concurrent use.
type TaskIDs struct {
	pool     *pgxpool.Pool
	queries  *intentdb.Queries
	stateKey []byte

	// derived is made from the state key on first use (mu).
	derived *stateKeys
	mu      sync.Mutex
}

// NewTaskIDs returns the task ids of schema, from stateKey (StateKeySize
// bytes, OUTBOX_STATE_KEY), or, when it is nil, the key migrate generated in
// the schema, read from pool on first use.
func NewTaskIDs(pool *pgxpool.Pool, schema string, stateKey []byte) *TaskIDs {
	return &TaskIDs{pool: pool, queries: intentdb.New(schema), stateKey: stateKey}
}

// TaskID returns the task id of the intent intentID of namespace.
func (t *TaskIDs) TaskID(ctx context.Context, namespace string, intentID int64) (string, error) {
	keys, err := t.keys(ctx)
	if err != nil {
		return "", err
	}
	return taskIDOf(keys, namespace, intentID), nil
}

// keys returns the keys derived from the state key: from the config, or
// read once from the database (the key migrate generated), so that every
// replica derives the same task ids and opens the states another sealed.
func (t *TaskIDs) keys(ctx context.Context) (*stateKeys, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.derived != nil {
		return t.derived, nil
	}
	master := t.stateKey
	if master == nil {
		var err error
		if master, err = t.queries.StateKey(ctx, t.pool); err != nil {
			return nil, fmt.Errorf("error reading the state key (outbox_state_key, made by migrate; or set OUTBOX_STATE_KEY): %w", err)
		}
	}
	keys, err := newStateKeys(master)
	if err != nil {
		return nil, err
	}
	t.derived = keys
	return keys, nil
}

// taskIDBytes is a task id's length before encoding: a MAC of the intent
// under the state key (16 bytes, 128 bits) and the intent's id (8 bytes).
const taskIDBytes = 8 + 16

// taskID returns the task id of the intent id in the server's namespace: a
// keyed MAC of (namespace, id) and the intent's id. Every replica computes the
// same one (the key is in the database), it never changes, and it cannot
// be guessed, nor taken to another namespace, without the key.
func (s *server) taskID(keys *stateKeys, intentID int64) string {
	return taskIDOf(keys, s.namespace, intentID)
}

func taskIDOf(keys *stateKeys, namespace string, intentID int64) string {
	// The MAC first: ids read as random from their first character.
	b := make([]byte, taskIDBytes)
	copy(b, keys.taskMAC(namespace, intentID))
	binary.BigEndian.PutUint64(b[16:], uint64(intentID))
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseTaskID returns the intent id of a task id of the server's namespace;
// false for anything else, which the caller answers as a task that does not
// exist.
func (s *server) parseTaskID(keys *stateKeys, id string) (int64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || len(b) != taskIDBytes {
		return 0, false
	}
	intentID := int64(binary.BigEndian.Uint64(b[16:]))
	if subtle.ConstantTimeCompare(b[:16], keys.taskMAC(s.namespace, intentID)) != 1 {
		return 0, false
	}
	return intentID, true
}

// taskMAC is the MAC part of the task id of (namespace, intentID).
func (k *stateKeys) taskMAC(namespace string, intentID int64) []byte {
	m := hmac.New(sha256.New, k.task)
	m.Write([]byte(namespace))
	m.Write([]byte{0})
	_ = binary.Write(m, binary.BigEndian, intentID)
	return m.Sum(nil)[:16]
}

// declaresTasks reports whether a request's client capabilities declare
// the tasks extension; a server must not answer a task to one that does
// not.
func declaresTasks(caps *mcp.ClientCapabilities) bool {
	if caps == nil {
		return false
	}
	_, ok := caps.Extensions[TasksExtension]
	return ok
}

// metaDeclaresTasks is declaresTasks for a custom method's parameters,
// whose request the SDK does not hand over: the capabilities are read
// from params._meta as the SDK reads them.
func metaDeclaresTasks(meta mcp.Meta) bool {
	raw, ok := meta[mcp.MetaKeyClientCapabilities]
	if !ok {
		return false
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return false
	}
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(b, &caps) != nil {
		return false
	}
	_, ok = caps.Extensions[TasksExtension]
	return ok
}

// missingTasksCapability is the error of a tasks/* request whose client did
// not declare the extension.
func missingTasksCapability() error {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}})
	return &jsonrpc.Error{Code: codeMissingCapability, Message: "Missing required client capability", Data: data}
}

// taskNotFound is the error for a task id that names no task the caller
// may see: one of another namespace is answered the same.
func taskNotFound() error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
}

// taskSlot carries, through the context of one tools/call, the task its
// handler answers with: the handler's type is the SDK's (a CallToolResult),
// so the answer is swapped for the task by answerTasks, outside it.
type taskSlot struct{ result *taskResult }

type taskSlotKey struct{}

// answerTasks is the receiving middleware that answers a tools/call with
// the task its handler put in the call's taskSlot, in place of the tool
// result.
func answerTasks() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != methodCallTool {
				return next(ctx, method, req)
			}
			slot := &taskSlot{}
			res, err := next(context.WithValue(ctx, taskSlotKey{}, slot), method, req)
			if err == nil && slot.result != nil {
				return slot.result, nil
			}
			return res, err
		}
	}
}

// answerWithTask makes the call whose context is ctx answer t
// (CreateTaskResult) instead of a tool result; false when the call did not
// come through answerTasks.
func answerWithTask(ctx context.Context, t *task) bool {
	slot, ok := ctx.Value(taskSlotKey{}).(*taskSlot)
	if !ok {
		return false
	}
	slot.result = &taskResult{ResultType: "task", task: *t}
	return true
}

// taskCall answers a tools/call that declared the tasks extension, for
// answer's intent, once committed: the tool's result if the intent has
// ended within the tool's wait, or else its task.
func (s *server) taskCall(ctx context.Context, req *mcp.CallToolRequest, tool *EffectTool, answer enqueueAnswer) (*mcp.CallToolResult, error) {
	keys, err := s.stateKeys(ctx)
	if err != nil {
		return s.errorResult(ctx, tool.Name, err), nil
	}
	intent := answer.Intent
	if !intent.State.Terminal() {
		intent = s.awaitUpstream(ctx, tool, intent)
	}
	if intent.State.Terminal() && intent.State != outbox.StateUnknown {
		answer.Intent = intent
		answer.NextStep = nextStep(intent)
		return s.toolResult(tool, answer)
	}
	t, err := s.taskOf(ctx, keys, req.Extra, toolCaps(req), tool, intent)
	if err != nil {
		return s.errorResult(ctx, tool.Name, err), nil
	}
	if !answerWithTask(ctx, t) {
		answer.Intent = intent
		return s.toolResult(tool, answer)
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("mcp.task.id", t.TaskID))
	if s.taskFunc != nil {
		if answer.Duplicate || answer.PossibleDuplicateOf != "" {
			s.taskFunc(TaskJoined)
		} else {
			s.taskFunc(TaskCreated)
		}
	}
	return &mcp.CallToolResult{}, nil
}

// toolCaps returns what a tools/call's client declared it can do.
func toolCaps(req *mcp.CallToolRequest) *mcp.ClientCapabilities {
	if req == nil {
		return nil
	}
	return req.ClientCapabilities()
}

// toolResult is the tool result for an answer: a recorded upstream tool's
// or an effect tool's.
func (s *server) toolResult(tool *EffectTool, answer enqueueAnswer) (*mcp.CallToolResult, error) {
	if tool.Upstream != "" {
		return upstreamResult(answer)
	}
	return jsonResult(answer)
}

// taskOf returns intent's task as the extension shows it (docs/agents.md,
// "Tasks and approvals in the host", has the table).
func (s *server) taskOf(ctx context.Context, keys *stateKeys, extra *mcp.RequestExtra, caps *mcp.ClientCapabilities, tool *EffectTool, intent *outbox.Intent) (*task, error) {
	t := &task{
		TaskID:        s.taskID(keys, intent.ID),
		CreatedAt:     intent.CreatedAt.UTC().Format(time.RFC3339Nano),
		LastUpdatedAt: intent.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
	poll := pollWorking
	switch intent.State {
	case outbox.StatePending:
		t.Status, t.StatusMessage = taskWorking, "queued"
	case outbox.StateRunning:
		t.Status, t.StatusMessage = taskWorking, fmt.Sprintf("attempt %d", max(intent.Attempts, 1))
	case outbox.StateAwaitingApproval:
		rule := ""
		if intent.ApprovalRule != nil {
			rule = *intent.ApprovalRule
		}
		t.Status, poll = taskWorking, pollOperator
		t.StatusMessage = fmt.Sprintf("awaiting approval (rule %s): an operator decides; do not retry", rule)
		if s.publicURL != "" {
			t.StatusMessage += "; the operator's page: " + s.consoleURL(intent)
		}
		if outbox.HostMayApprove(rule) && canElicitForm(caps) {
			req, err := s.approvalRequest(ctx, keys, principalOf(extra, s.actorDefault), tool, intent)
			if err != nil {
				return nil, err
			}
			t.Status, poll = taskInputRequired, pollWorking
			t.StatusMessage = "awaiting approval: the person at the host may approve or deny"
			t.InputRequests = mcp.InputRequestMap{req.id.hex(): req.elicit}
		}
	case outbox.StateUnknown:
		t.Status, poll = taskWorking, pollUnknown
		t.StatusMessage = "unknown: the provider may have acted; an operator decides; do not retry"
	case outbox.StateSucceeded, outbox.StateFailed:
		res, err := s.finalResult(tool, intent)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(res)
		if err != nil {
			return nil, fmt.Errorf("error encoding task result: %w", err)
		}
		t.Status, t.Result = taskCompleted, b
	case outbox.StateCancelled:
		t.Status, t.StatusMessage = taskCancelled, "cancelled"
		if intent.Error != nil {
			t.StatusMessage = "cancelled: " + intent.Error.Code
			if intent.Error.Message != "" {
				t.StatusMessage += ": " + intent.Error.Message
			}
		}
	}
	t.PollIntervalMs = poll.Milliseconds()
	if intent.State.Terminal() && intent.State != outbox.StateUnknown && intent.CompletedAt != nil {
		// Kept until retention prunes the intent; unlimited (null) until
		// then.
		left := max(time.Until(intent.CompletedAt.Add(s.retention)), 0).Milliseconds()
		t.TTLMs = &left
	}
	return t, nil
}

// finalResult is the tool result of an ended intent, as a call within the
// wait gets it; a failed intent is a result with isError (a task fails only
// on a JSON-RPC error, per the extension).
func (s *server) finalResult(tool *EffectTool, intent *outbox.Intent) (*mcp.CallToolResult, error) {
	answer := enqueueAnswer{Intent: intent}
	if tool != nil && tool.Upstream != "" {
		return upstreamResult(answer)
	}
	res, err := jsonResult(answer)
	if err != nil {
		return nil, err
	}
	if intent.State == outbox.StateFailed {
		code, msg := string(intent.State), ""
		if intent.Error != nil {
			code, msg = intent.Error.Code, intent.Error.Message
		}
		res.IsError = true
		res.Content = append([]mcp.Content{&mcp.TextContent{Text: "failed: " + code + ": " + msg}}, res.Content...)
	}
	return res, nil
}

// principalOf names who calls, for the approvals a host gives: over HTTP
// the token's name, otherwise (stdio) who serves.
func principalOf(extra *mcp.RequestExtra, actorDefault string) string {
	if extra != nil && extra.TokenInfo != nil {
		return access.APIActor(extra.TokenInfo.UserID)
	}
	return actorDefault
}

// principalFromContext is principalOf for a custom method, whose request
// the SDK does not hand over: the token is in the context.
func (s *server) principalFromContext(ctx context.Context) (string, []string) {
	if info := auth.TokenInfoFromContext(ctx); info != nil {
		return access.APIActor(info.UserID), info.Scopes
	}
	return s.actorDefault, nil
}

// allowed reports whether a token's scopes (its role; none over stdio,
// where the local user acts) allow action.
func allowed(scopes []string, action access.Action) bool {
	return scopes == nil || access.AllowNamed(scopes, action)
}

// addTaskMethods registers tasks/get, tasks/update and tasks/cancel.
func (s *server) addTaskMethods(srv *mcp.Server) error {
	if err := mcp.AddReceivingCustomMethod(srv, methodTasksGet, s.tasksGet); err != nil {
		return fmt.Errorf("mcpserver: %w", err)
	}
	if err := mcp.AddReceivingCustomMethod(srv, methodTasksUpdate, s.tasksUpdate); err != nil {
		return fmt.Errorf("mcpserver: %w", err)
	}
	if err := mcp.AddReceivingCustomMethod(srv, methodTasksCancel, s.tasksCancel); err != nil {
		return fmt.Errorf("mcpserver: %w", err)
	}
	return nil
}

// taskIntent returns the intent of a task id the caller may see, or
// taskNotFound.
func (s *server) taskIntent(ctx context.Context, keys *stateKeys, taskID string) (*outbox.Intent, error) {
	id, ok := s.parseTaskID(keys, taskID)
	if !ok {
		return nil, taskNotFound()
	}
	// The MAC binds the namespace already; the read checks it again.
	intent, err := s.client.GetByID(ctx, s.namespace, id)
	if errors.Is(err, outbox.ErrNotFound) {
		return nil, taskNotFound()
	}
	if err != nil {
		return nil, fmt.Errorf("error reading task: %w", err)
	}
	return intent, nil
}

// toolOf returns the tool whose effect intent runs, for its result's
// shape; nil when no listed tool records it (a result is then an effect
// tool's).
func (s *server) toolOf(intent *outbox.Intent) *EffectTool {
	return s.toolsByEffect[intent.Effect]
}

func (s *server) tasksGet(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (*taskResult, error) {
	if !metaDeclaresTasks(p.Meta) {
		return nil, missingTasksCapability()
	}
	if _, scopes := s.principalFromContext(ctx); !allowed(scopes, access.ActionRead) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "this token's role may not read tasks"}
	}
	keys, err := s.stateKeys(ctx)
	if err != nil {
		return nil, err
	}
	intent, err := s.taskIntent(ctx, keys, p.TaskID)
	if err != nil {
		return nil, err
	}
	t, err := s.taskOf(ctx, keys, extraFromContext(ctx), capsFromMeta(p.Meta), s.toolOf(intent), intent)
	if err != nil {
		return nil, err
	}
	if s.taskFunc != nil && (t.Status == taskCompleted || t.Status == taskCancelled) {
		s.taskFunc(TaskPolledToEnd)
	}
	return &taskResult{ResultType: "complete", task: *t}, nil
}

func (s *server) tasksCancel(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (*ackResult, error) {
	if !metaDeclaresTasks(p.Meta) {
		return nil, missingTasksCapability()
	}
	principal, scopes := s.principalFromContext(ctx)
	if !allowed(scopes, access.ActionCancel) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "this token's role may not cancel"}
	}
	keys, err := s.stateKeys(ctx)
	if err != nil {
		return nil, err
	}
	intent, err := s.taskIntent(ctx, keys, p.TaskID)
	if err != nil {
		return nil, err
	}
	// outbox's cancel rule decides: an intent that may have been sent is
	// not cancelled. The acknowledgement is empty either way, as the
	// extension says; tasks/get tells what became of it.
	_, err = s.client.Cancel(ctx, &outbox.CancelParams{Namespace: s.namespace, Key: intent.Key, By: principal, Note: "tasks/cancel"})
	var oe *outbox.Error
	if err != nil && !errors.As(err, &oe) {
		return nil, fmt.Errorf("error cancelling task: %w", err)
	}
	return &ackResult{ResultType: "complete"}, nil
}

func (s *server) tasksUpdate(ctx context.Context, ss *mcp.ServerSession, p *updateTaskParams) (*ackResult, error) {
	if !metaDeclaresTasks(p.Meta) {
		return nil, missingTasksCapability()
	}
	principal, scopes := s.principalFromContext(ctx)
	keys, err := s.stateKeys(ctx)
	if err != nil {
		return nil, err
	}
	intent, err := s.taskIntent(ctx, keys, p.TaskID)
	if err != nil {
		return nil, err
	}
	if intent.State != outbox.StateAwaitingApproval || intent.ApprovalRule == nil || !outbox.HostMayApprove(*intent.ApprovalRule) {
		// Nothing is outstanding: responses are ignored, as the
		// extension says.
		return &ackResult{ResultType: "complete"}, nil
	}
	if !allowed(scopes, access.ActionEnqueue) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "this token's role may not answer approvals"}
	}
	id, err := s.approvalID(ctx, keys, principal, intent.ID)
	if err != nil {
		return nil, err
	}
	raw, ok := p.InputResponses[id.hex()]
	if !ok {
		// Keys never issued, already answered, or issued to another
		// principal: ignored.
		return &ackResult{ResultType: "complete"}, nil
	}
	decision, err := parseDecision(raw)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	st := &requestState{ID: id.hex(), Intent: intent.ID, Namespace: s.namespace, Principal: principal,
		ArgsSHA256: intent.ArgsSHA256, Tool: intent.Effect, Expires: s.approvalExpiry(intent).Unix()}
	if _, err := s.applyDecision(ctx, st, intent, decision, clientName(ss)); err != nil {
		var oe *outbox.Error
		if errors.As(err, &oe) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: oe.Error()}
		}
		return nil, err
	}
	return &ackResult{ResultType: "complete"}, nil
}

// extraFromContext rebuilds what a custom method's request would carry of
// its token, for taskOf.
func extraFromContext(ctx context.Context) *mcp.RequestExtra {
	if info := auth.TokenInfoFromContext(ctx); info != nil {
		return &mcp.RequestExtra{TokenInfo: info}
	}
	return nil
}

// capsFromMeta reads the client capabilities a request's _meta declares.
func capsFromMeta(meta mcp.Meta) *mcp.ClientCapabilities {
	raw, ok := meta[mcp.MetaKeyClientCapabilities]
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var caps mcp.ClientCapabilities
	if json.Unmarshal(b, &caps) != nil {
		return nil
	}
	return &caps
}

// clientName is the MCP client's name from a session's handshake, for the
// record of a decision; "mcp" when it gave none (a stateless request).
func clientName(ss *mcp.ServerSession) string {
	if ss != nil {
		if p := ss.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
			return sanitizeClientName(p.ClientInfo.Name)
		}
	}
	return "mcp"
}
