package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/outbox"
)

// Task status notifications (the tasks extension's "Task Status
// Notifications", over SEP-2575's subscriptions/listen): a client lists
// task ids in a listen request's params.notifications.taskIds; the server
// acknowledges the ones it will report on, sends each one's DetailedTask at
// once and again whenever its status or status message changes, and ends
// the stream with the listen result once every acknowledged task has
// ended.
//
// The SDK serves subscriptions/listen itself but knows nothing of taskIds
// (its NotificationSubscriptions drops them) and offers a server no way to
// send a notification of its own, so outbox answers such a listen request
// ahead of the SDK: on /mcp in ListenHandler, over stdio in ListenTransport's
// connection. A listen request without taskIds reaches the SDK unchanged.
// One that asks for tasks and for other notifications as well
// (toolsListChanged...) is served for the tasks only, and acknowledged for
// them only: as SEP-2575 allows, the acknowledgement omits what the server
// does not honour, and the client opens a second listen for the rest.

// The subscriptions' methods and notifications (SEP-2575), and the tasks
// extension's notification.
const (
	methodSubscriptionsListen     = "subscriptions/listen"
	notificationSubscriptionsAckd = "notifications/subscriptions/acknowledged"
	notificationCancelled         = "notifications/cancelled"
	notificationTasks             = "notifications/tasks"
)

// The extension's failed status, which outbox never reports (a failed
// intent is a completed task whose result has isError) but a listen ends
// on all the same.
const taskFailed = "failed"

// listenTaskIDsMax bounds the task ids of one listen request: each is read
// again at every change of any of them.
const listenTaskIDsMax = 100

// listenRereadInterval is how often a listen reads its tasks again without
// a signal: a safety net for a lost notification, and a sign of life on the
// stream for proxies.
const listenRereadInterval = 30 * time.Second

// servers maps each MCP server New returned to its tool handlers' state,
// for ListenHandler and ListenTransport, which are handed the SDK's
// server. The key is weak: a server no longer in use is dropped from the
// map.
var servers = struct {
	mu sync.Mutex
	m  map[weak.Pointer[mcp.Server]]*server
}{m: map[weak.Pointer[mcp.Server]]*server{}}

// register records that srv's handlers share s.
func register(srv *mcp.Server, s *server) {
	key := weak.Make(srv)
	servers.mu.Lock()
	servers.m[key] = s
	servers.mu.Unlock()
	runtime.AddCleanup(srv, func(key weak.Pointer[mcp.Server]) {
		servers.mu.Lock()
		delete(servers.m, key)
		servers.mu.Unlock()
	}, key)
}

// serverOf returns the state of srv, a server New returned; nil for any
// other.
func serverOf(srv *mcp.Server) *server {
	if srv == nil {
		return nil
	}
	servers.mu.Lock()
	defer servers.mu.Unlock()
	return servers.m[weak.Make(srv)]
}

// taskListenRequest is a subscriptions/listen request that asks for task
// status notifications.
type taskListenRequest struct {
	id      jsonrpc.ID
	meta    mcp.Meta
	taskIDs []string
	// err, when set, is the answer: the request asked for tasks in a
	// shape that cannot be served (taskIds not a list of strings).
	err *jsonrpc.Error
}

// parseTaskListen returns msg as a listen request that asks for task
// notifications (a non-empty params.notifications.taskIds); nil for any
// other message, which the SDK serves.
func parseTaskListen(msg jsonrpc.Message) *taskListenRequest {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != methodSubscriptionsListen || !req.ID.IsValid() {
		return nil
	}
	var params struct {
		Meta          mcp.Meta                   `json:"_meta"`
		Notifications map[string]json.RawMessage `json:"notifications"`
	}
	if json.Unmarshal(req.Params, &params) != nil {
		return nil
	}
	raw, ok := params.Notifications["taskIds"]
	if !ok || string(raw) == "null" {
		return nil
	}
	l := &taskListenRequest{id: req.ID, meta: params.Meta}
	if err := json.Unmarshal(raw, &l.taskIDs); err != nil {
		l.err = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "params.notifications.taskIds must be a list of task ids (strings)"}
		return l
	}
	if len(l.taskIDs) == 0 {
		// Asks for no task: the SDK serves the rest as it would.
		return nil
	}
	if len(l.taskIDs) > listenTaskIDsMax {
		l.err = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("params.notifications.taskIds lists %d task ids; at most %d may be listened to at once", len(l.taskIDs), listenTaskIDsMax)}
	}
	return l
}

// listenedTask is one acknowledged task of a listen.
type listenedTask struct {
	id     string
	intent *outbox.Intent
	// sent is the status and status message last sent; ended once a
	// terminal one was.
	sent  [2]string
	ended bool
}

// taskListen is one listen stream's acknowledged tasks.
type taskListen struct {
	s     *server
	req   *taskListenRequest
	keys  *stateKeys
	tasks []*listenedTask
}

// openTaskListen checks a listen request for task notifications and
// returns what it will report on: the tasks of the server's namespace among
// those asked for. A task id of another namespace, forged or of a pruned
// intent is left out, as for a task that does not exist. The error is the
// request's answer, before any stream.
func (s *server) openTaskListen(ctx context.Context, req *taskListenRequest) (*taskListen, *jsonrpc.Error) {
	if req.err != nil {
		return nil, req.err
	}
	if !metaDeclaresTasks(req.meta) {
		var jerr *jsonrpc.Error
		_ = errors.As(missingTasksCapability(), &jerr)
		return nil, jerr
	}
	if _, scopes := s.principalFromContext(ctx); !allowed(scopes, access.ActionRead) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "this token's role may not read tasks"}
	}
	keys, err := s.stateKeys(ctx)
	if err != nil {
		s.logger.ErrorContext(ctx, "task listen: reading the state key", "error", err)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "task notifications are unavailable"}
	}
	l := &taskListen{s: s, req: req, keys: keys}
	seen := map[string]bool{}
	for _, id := range req.taskIDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		intent, err := s.taskIntent(ctx, keys, id)
		var jerr *jsonrpc.Error
		if errors.As(err, &jerr) {
			continue // not a task the caller may see
		}
		if err != nil {
			s.logger.ErrorContext(ctx, "task listen: reading a task", "error", err)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "error reading tasks"}
		}
		l.tasks = append(l.tasks, &listenedTask{id: id, intent: intent})
	}
	return l, nil
}

// listenStream carries a listen's messages to its client.
type listenStream interface {
	// send writes one message.
	send(msg jsonrpc.Message) error
	// idle is called when nothing was sent for a while: an HTTP stream
	// writes a comment so that proxies keep it open.
	idle() error
}

// run serves the listen on stream until every acknowledged task has
// ended (then it sends the listen result) or ctx ends (the client went
// away, or stopped the subscription): the acknowledgement first, then
// each task's DetailedTask at once and after every change of its status or
// status message. It returns the stream's error, or ctx's.
func (l *taskListen) run(ctx context.Context, stream listenStream) error {
	s := l.s
	subMeta := mcp.Meta{mcp.MetaKeySubscriptionID: l.req.id.Raw()}
	agreed := map[string]any{}
	if len(l.tasks) > 0 {
		ids := make([]string, len(l.tasks))
		for i, t := range l.tasks {
			ids[i] = t.id
		}
		agreed["taskIds"] = ids
	}
	if err := stream.send(notification(notificationSubscriptionsAckd, map[string]any{"_meta": subMeta, "notifications": agreed})); err != nil {
		return err
	}
	var wake <-chan struct{}
	if len(l.tasks) > 0 {
		ids := make([]int64, len(l.tasks))
		for i, t := range l.tasks {
			ids[i] = t.intent.ID
		}
		// Watched before the first read: a change after it is signalled.
		wake = s.client.Watch(ctx, ids)
	}
	ticker := time.NewTicker(listenRereadInterval)
	defer ticker.Stop()
	extra, caps := extraFromContext(ctx), capsFromMeta(l.req.meta)
	for first := true; ; first = false {
		open := 0
		for _, lt := range l.tasks {
			if lt.ended {
				continue
			}
			if !first {
				intent, err := s.client.Get(ctx, s.namespace, lt.intent.Key)
				if errors.Is(err, outbox.ErrNotFound) {
					// Pruned: nothing more will be said of it.
					lt.ended = true
					continue
				}
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					// Read again at the next signal or tick.
					s.logger.WarnContext(ctx, "task listen: reading a task", "error", err)
					open++
					continue
				}
				lt.intent = intent
			}
			t, err := s.taskOf(ctx, l.keys, extra, caps, s.toolOf(lt.intent), lt.intent)
			if err != nil {
				s.logger.WarnContext(ctx, "task listen: building a task's status", "error", err)
				open++
				continue
			}
			now := [2]string{t.Status, t.StatusMessage}
			if first || now != lt.sent {
				params := struct {
					Meta mcp.Meta `json:"_meta"`
					task
				}{subMeta, *t}
				if err := stream.send(notification(notificationTasks, params)); err != nil {
					return err
				}
				lt.sent = now
			}
			if isTerminalTask(t.Status) {
				lt.ended = true
				continue
			}
			open++
		}
		if open == 0 {
			result, _ := json.Marshal(map[string]any{"resultType": "complete", "_meta": subMeta})
			return stream.send(&jsonrpc.Response{ID: l.req.id, Result: result})
		}
		select {
		case <-wake:
		case <-ticker.C:
			// A safety net for a change whose notification was lost,
			// and a sign of life on the stream.
			if err := stream.idle(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// isTerminalTask reports whether a task's status is final.
func isTerminalTask(status string) bool {
	return status == taskCompleted || status == taskCancelled || status == taskFailed
}

// notification returns the JSON-RPC notification method with params.
func notification(method string, params any) *jsonrpc.Request {
	b, err := json.Marshal(params)
	if err != nil {
		// The package's own shapes: an error is a bug.
		panic(fmt.Sprintf("mcpserver: encoding %s: %v", method, err))
	}
	return &jsonrpc.Request{Method: method, Params: b}
}

// errorResponse is the JSON-RPC error answer to the request id.
func errorResponse(id jsonrpc.ID, jerr *jsonrpc.Error) *jsonrpc.Response {
	return &jsonrpc.Response{ID: id, Error: jerr}
}

// cancelledID returns the request id a notifications/cancelled names.
func cancelledID(msg jsonrpc.Message) (jsonrpc.ID, bool) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != notificationCancelled || req.ID.IsValid() {
		return jsonrpc.ID{}, false
	}
	var params struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(req.Params, &params) != nil {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(params.RequestID)
	if err != nil || !id.IsValid() {
		return jsonrpc.ID{}, false
	}
	return id, true
}
