package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-dev/outbox/internal/access"
	"github.com/outbox-dev/outbox/internal/intentdb"
	"github.com/outbox-dev/outbox/internal/keyguard"
	"github.com/outbox-dev/outbox/outbox"
)

const (
	// ListLimitDefault is list_intents' page size when the call names none:
	// smaller than the HTTP API's, because every intent listed costs the
	// model context.
	ListLimitDefault = 20

	// NameDefault is the server's name in MCP's initialize answer.
	NameDefault = "outbox"

	// VersionDefault is Config.Version's default.
	VersionDefault = "dev"

	// ApprovalTTLDefault is Config.ApprovalTTL's default, the
	// dispatcher's.
	ApprovalTTLDefault = 24 * time.Hour

	// RetentionDefault is Config.Retention's default, the dispatcher's.
	RetentionDefault = 168 * time.Hour
)

// keyArgument is the argument of every mutating tool that carries the
// idempotency key; it is not part of the effect's arguments.
const keyArgument = "idempotency_key"

// newActionArgument is the argument of every mutating tool with which the
// model confirms that a call identical to one it made moments before under
// another key is a new action; not part of the effect's arguments either.
const newActionArgument = "new_action"

// requireApprovalArgument is the argument of every mutating tool with which
// the model asks a person to approve the action before it runs; not part of
// the effect's arguments.
const requireApprovalArgument = "require_approval"

// Config configures an MCP server.
type Config struct {
	// Actor names who acts when a call carries no token (over stdio, or
	// over HTTP without tokens), for the intent's enqueued_by: an audit
	// actor of package access. Over HTTP with tokens the token names it.
	// Defaults to access.CLIActor(), the local user.
	Actor string

	// ApprovalFunc, when set, is called with via (ViaHost) and the
	// decision (approved, denied, decline, cancel) of each approval
	// answered from the MCP host, for outbox_mcp_approvals_total. Defaults
	// to nil.
	ApprovalFunc func(via, decision string)

	// ApprovalTTL is how long an intent may await approval before it
	// expires (dispatcher.Config.ApprovalTTL, OUTBOX_APPROVAL_TTL): an
	// approval asked of the host says it, and its requestState expires no
	// later. Defaults to 24 hours.
	ApprovalTTL time.Duration

	// AutoKeyWindow is the window of the automatic key: identical calls
	// without idempotency_key within this long of the first are one action.
	// Defaults to keyguard.WindowDefault.
	AutoKeyWindow time.Duration

	// Logger receives the server's diagnostics. Arguments and keys are never
	// logged. Defaults to a logger that discards.
	Logger *slog.Logger

	// ModelKeyGuard is what a mutating tool does with a model's fresh key
	// for an action recorded within AutoKeyWindow under another key
	// (package keyguard). Defaults to keyguard.ModeDefault.
	ModelKeyGuard keyguard.Mode

	// Namespace is the namespace every call reads and writes. Defaults to
	// outbox.NamespaceDefault.
	Namespace string

	// Passthrough are MCP upstream tools forwarded live (read-only ones),
	// listed in the namespaces they name. Defaults to none.
	Passthrough []PassthroughTool

	// PossibleDuplicateFunc, when set, is called with the tool and the
	// outcome (refused, replayed, confirmed) of each possible duplicate the
	// guard met, for outbox_possible_duplicates_total. Defaults to nil.
	PossibleDuplicateFunc func(tool, outcome string)

	// PublicURL is the URL operators reach this server's console at
	// (OUTBOX_PUBLIC_URL). When set, a call whose intent awaits an
	// operator's approval, from a client that declares URL-mode
	// elicitation, is answered with one opening the console's page of the
	// intent; a task's status message names the page. Defaults to none.
	PublicURL string

	// RateLimitFunc, when set, is asked before each mutating call with the
	// caller's token name (its TokenInfo's UserID; empty over stdio); when it
	// refuses, the call is a rate_limited tool error saying how long to
	// wait. Defaults to no limit.
	RateLimitFunc func(name string) (wait time.Duration, ok bool)

	// Retention is how long ended intents are kept (OUTBOX_RETENTION): a
	// task's ttlMs counts down from it once its intent ends. Defaults to
	// 168 hours.
	Retention time.Duration

	// StateKey is the key that derives task ids and seals requestState
	// (OUTBOX_STATE_KEY), StateKeySize bytes; every replica must have the
	// same. Defaults to the key migrate generated in the schema, read on
	// first use (only outbox's owner role can read it).
	StateKey []byte

	// TaskFunc, when set, is called with the outcome (TaskCreated,
	// TaskJoined, TaskPolledToEnd) of each task answer, for
	// outbox_mcp_tasks_total. Defaults to nil.
	TaskFunc func(outcome string)

	// TracerProvider makes the span of each tool call, "execute_tool
	// {tool}" (OpenTelemetry's GenAI conventions), under the trace context
	// the host sent in the call's params._meta, or the context's span. The
	// call's enqueue runs inside that span, so the intent records it as its
	// origin. Spans carry the tool's name and ids, never the arguments, the
	// idempotency key or a token. Defaults to otel.GetTracerProvider(), a
	// no-op unless the process configured traces.
	TracerProvider trace.TracerProvider

	// Tools are the mutating tools; those whose effect the client's registry
	// does not enable are not listed. Defaults to ToolsFor(the client's
	// effects): the built-ins' tools and the declared effects'.
	Tools []*EffectTool

	// Version is the server's version in MCP's initialize answer. Defaults
	// to VersionDefault.
	Version string

	// WaitFunc waits until the intent (namespace, key) is terminal or ctx
	// ends, and returns the intent last read, as outbox.Client.Wait does,
	// which it defaults to. The HTTP API sets it to bound how many waits hold
	// a database connection at once.
	WaitFunc func(ctx context.Context, namespace, key string) (*outbox.Intent, error)
}

// withDefaults returns a copy of c with every zero setting at its default.
func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	if out.Actor == "" {
		out.Actor = access.CLIActor()
	}
	if out.ApprovalTTL == 0 {
		out.ApprovalTTL = ApprovalTTLDefault
	}
	if out.AutoKeyWindow == 0 {
		out.AutoKeyWindow = keyguard.WindowDefault
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.ModelKeyGuard == "" {
		out.ModelKeyGuard = keyguard.ModeDefault
	}
	if out.Namespace == "" {
		out.Namespace = outbox.NamespaceDefault
	}
	if out.Retention == 0 {
		out.Retention = RetentionDefault
	}
	if out.Version == "" {
		out.Version = VersionDefault
	}
	return &out
}

// validate checks a config with its defaults.
func (c *Config) validate() error {
	if c.AutoKeyWindow < 0 {
		return fmt.Errorf("mcpserver: AutoKeyWindow must be positive, not %s", c.AutoKeyWindow)
	}
	if err := outbox.ValidateNamespace(c.Namespace); err != nil {
		return fmt.Errorf("mcpserver: %w", err)
	}
	if c.StateKey != nil && len(c.StateKey) != StateKeySize {
		return fmt.Errorf("mcpserver: StateKey must be %d bytes, not %d", StateKeySize, len(c.StateKey))
	}
	return nil
}

// server holds what the tool handlers share.
type server struct {
	actorDefault  string
	autoKeyWindow time.Duration
	client        *outbox.Client
	logger        *slog.Logger
	namespace     string
	pool          *pgxpool.Pool
	rateLimitFunc func(name string) (time.Duration, bool)
	waitFunc      func(ctx context.Context, namespace, key string) (*outbox.Intent, error)

	// Tasks and approvals in the host.
	approvalFunc  func(via, decision string)
	approvalTTL   time.Duration
	publicURL     string
	ids           *TaskIDs
	queries       *intentdb.Queries
	retention     time.Duration
	taskFunc      func(outcome string)
	toolsByEffect map[string]*EffectTool

	// guard records the tools' calls: automatic keys, and the guard on
	// the model's keys.
	guard *keyguard.Guard
}

// New returns an MCP server whose tools act in config.Namespace: the
// mutating tools of config.Tools, get_intent and list_intents. client carries
// out the operations; pool runs the enqueues' transactions. Serve it with
// Run over stdio, or over HTTP with mcp.NewStreamableHTTPHandler.
func New(pool *pgxpool.Pool, client *outbox.Client, config *Config) (*mcp.Server, error) {
	if pool == nil || client == nil {
		return nil, errors.New("mcpserver: pool and client must not be nil")
	}
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	s := &server{
		actorDefault:  config.Actor,
		autoKeyWindow: config.AutoKeyWindow,
		client:        client,
		logger:        config.Logger,
		namespace:     config.Namespace,
		pool:          pool,
		rateLimitFunc: config.RateLimitFunc,
		waitFunc:      config.WaitFunc,

		approvalFunc:  config.ApprovalFunc,
		approvalTTL:   config.ApprovalTTL,
		publicURL:     strings.TrimRight(config.PublicURL, "/"),
		ids:           NewTaskIDs(pool, client.Schema(), config.StateKey),
		queries:       intentdb.New(client.Schema()),
		retention:     config.Retention,
		taskFunc:      config.TaskFunc,
		toolsByEffect: map[string]*EffectTool{},
	}
	if s.waitFunc == nil {
		s.waitFunc = client.Wait
	}
	guard, err := keyguard.New(pool, client, &keyguard.Config{
		Mode:         config.ModelKeyGuard,
		ObserverFunc: config.PossibleDuplicateFunc,
		Window:       s.autoKeyWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	s.guard = guard
	tools := config.Tools
	if tools == nil {
		if tools, err = ToolsFor(client.Effects()); err != nil {
			return nil, err
		}
	}
	// The tasks extension is declared to every client; only a request
	// that declares it too is ever answered with a task.
	caps := &mcp.ServerCapabilities{}
	caps.AddExtension(TasksExtension, nil)
	srv := mcp.NewServer(&mcp.Implementation{Name: NameDefault, Title: "outbox", Version: config.Version}, &mcp.ServerOptions{
		Capabilities: caps,
		Instructions: instructions,
		Logger:       SDKLogger(s.logger),
	})
	names := map[string]bool{}
	enabled := client.Effects()
	for _, t := range tools {
		if t == nil || t.Name == "" || t.Effect == "" || t.Description == "" {
			return nil, errors.New("mcpserver: every tool needs a Name, an Effect and a Description")
		}
		// Only the tools of effects this server runs are listed: a model
		// shown a tool that can only answer unknown_effect wastes its
		// calls, and its context.
		if _, ok := enabled.Get(t.Effect); enabled != nil && !ok {
			continue
		}
		if names[t.Name] || t.Name == toolGetIntent || t.Name == toolListIntents {
			return nil, fmt.Errorf("mcpserver: tool %q defined twice", t.Name)
		}
		if !visibleIn(t.Namespaces, s.namespace) {
			continue
		}
		names[t.Name] = true
		s.toolsByEffect[t.Effect] = t
		var inputSchema any
		var resolved *jsonschema.Resolved
		outputSchema := enqueueOutputSchema()
		if t.RawInputSchema != nil {
			// A mirrored upstream schema: the effect validates it, by its
			// own $schema, when the call is enqueued.
			inputSchema = t.RawInputSchema
		} else {
			schema, err := t.inputSchema()
			if err != nil {
				return nil, err
			}
			if resolved, err = schema.Resolve(nil); err != nil {
				return nil, fmt.Errorf("mcpserver: tool %q: invalid input schema: %w", t.Name, err)
			}
			inputSchema = schema
		}
		if t.Upstream != "" {
			outputSchema = upstreamOutputSchema()
		}
		annotations := t.Annotations
		if annotations == nil {
			annotations = &mcp.ToolAnnotations{
				// A mutating tool acts on the world, and repeating a call with
				// the same key has no further effect: the answer is the
				// first call's intent.
				DestructiveHint: ptr(true),
				IdempotentHint:  true,
				OpenWorldHint:   ptr(true),
				Title:           t.Title,
			}
		}
		srv.AddTool(&mcp.Tool{
			Name:         t.Name,
			Title:        t.Title,
			Description:  t.Description,
			InputSchema:  inputSchema,
			OutputSchema: outputSchema,
			Annotations:  annotations,
		}, s.effectToolHandler(t, resolved))
	}
	if err := s.addReadTools(srv); err != nil {
		return nil, err
	}
	if err := s.addPassthroughTools(srv, config.Passthrough, names); err != nil {
		return nil, err
	}
	if err := s.addTaskMethods(srv); err != nil {
		return nil, err
	}
	listed := ReadToolNames()
	for name := range names {
		listed = append(listed, name)
	}
	tracerProvider := config.TracerProvider
	if tracerProvider == nil {
		// The global provider delegates to the one serve installs, even
		// when it is installed after New.
		tracerProvider = otel.GetTracerProvider()
	}
	srv.AddReceivingMiddleware(traceToolCalls(tracerProvider.Tracer(tracerName), listed))
	srv.AddReceivingMiddleware(hideWithdrawn(withdrawnFuncs(tools, config.Passthrough, client)))
	// Outermost: a call answered with a task replaces the tool result
	// after every other middleware has seen the call.
	srv.AddReceivingMiddleware(answerTasks())
	// Task status notifications are answered ahead of the SDK
	// (ListenHandler, ListenTransport), which find s from srv.
	register(srv, s)
	return srv, nil
}

// instructions are the server's instructions to the model.
const instructions = `outbox records side effects (charges, emails, tickets, webhook calls) as intents in a database and carries out each one once, however often it is requested.

Give every mutating call an idempotency_key naming the logical action, and reuse that key, unchanged, on every retry of the action: after a timeout, an error, or when unsure whether the first call went through. Use a new key only for a new action. A repeated call answers duplicate: true with the first call's intent and does nothing more. A key reused with other arguments is refused (idempotency_key_reused).

Mutating tools return at once, usually in state "pending". To learn the outcome, call get_intent with the key and wait_seconds (up to 60). "unknown" means the provider could not confirm whether the effect happened: do not retry; an operator decides. "awaiting_approval" means a person must approve the action before it runs: do not retry it, under this key or another; tell the user, and call get_intent with wait_seconds to learn the decision. You cannot approve actions yourself.

Reads (get_intent, list_intents) are never gated.`

// resolveSchema resolves one of the read tools' schemas, which are the
// package's own: an error is a bug.
func resolveSchema(s *jsonschema.Schema) (*jsonschema.Resolved, error) {
	r, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: invalid schema: %w", err)
	}
	return r, nil
}
