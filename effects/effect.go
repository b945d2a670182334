package effects

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"time"
)

// Guarantee is what an effect's provider offers against repeated requests,
// and so what the worker may do after an attempt whose outcome was lost.
type Guarantee string

const (
	// GuaranteeDeduplicated means the provider dedupes on the provider key for
	// a window (Stripe: 24 h). A lost outcome is retried with the same key
	// while the intent is younger than the window, and ends unknown after.
	GuaranteeDeduplicated Guarantee = "deduplicated"

	// GuaranteeReconcilable means the provider can be asked, by provider key,
	// whether the effect exists. A lost outcome is looked up once its lease
	// expired: found means succeeded, not found means send again.
	GuaranteeReconcilable Guarantee = "reconcilable"

	// GuaranteeAtMostOnce means neither: a lost outcome ends unknown and is
	// never sent again without an operator.
	GuaranteeAtMostOnce Guarantee = "at_most_once"
)

// Valid reports whether g is one of the three guarantees.
func (g Guarantee) Valid() bool {
	switch g {
	case GuaranteeDeduplicated, GuaranteeReconcilable, GuaranteeAtMostOnce:
		return true
	}
	return false
}

// TimeoutDefault is an attempt's deadline for a provider call when the
// process running the effects sets none: dispatcher.Config.EffectTimeout's
// default, and the bound of a declared request's timeout.
const TimeoutDefault = 30 * time.Second

// DedupeWindowDefault is the dedupe window assumed for a deduplicated effect
// that does not implement DedupeWindower. It is Stripe's.
const DedupeWindowDefault = 24 * time.Hour

// Request is one attempt at an effect.
type Request struct {
	// Args are the intent's arguments, already validated.
	Args json.RawMessage
	// Attempt is the intent's attempt number for this execution, starting at 1.
	Attempt int
	// IntentID is the intent's id, for logs.
	IntentID int64
	// Namespace is the intent's namespace.
	Namespace string
	// ProviderKey is the stable key to send to the provider: the same for
	// every attempt of one intent, and free of the caller's key and arguments.
	ProviderKey string

	// Checkpoint is what an earlier attempt recorded through
	// CheckpointFunc, for a Checkpointer: the work to resume rather than
	// start again. Nil when none was recorded.
	Checkpoint json.RawMessage

	// CheckpointFunc, set for a Checkpointer's attempt, records checkpoint
	// durably on the intent, fenced on this attempt's claim, before it
	// returns: a later attempt, on any replica, gets it as Checkpoint. An
	// error means it was not recorded.
	CheckpointFunc func(ctx context.Context, checkpoint json.RawMessage) error

	// CancelRequestedFunc, set for a Checkpointer's attempt, reports
	// whether an operator asked to cancel the intent after its provider
	// took the work: the effect then asks the provider to stop, and
	// returns Cancelled if it did. Each call reads the database.
	CancelRequestedFunc func(ctx context.Context) (bool, error)

	// RecordSentFunc, set for a SentArgsRecorder's attempt, records args
	// (a JSON object, scrubbed of secrets) durably on the intent as what
	// this attempt sends the provider, fenced on this attempt's claim,
	// before it returns. An error means they were not recorded: the
	// effect must then not send them, and answers not_sent.
	RecordSentFunc func(ctx context.Context, args json.RawMessage) error

	// LastAttemptEnd is, for a look-up, when the attempt before ended (its
	// finish, or its lease's end when its outcome was lost): any request it
	// sent was sent by then, so a provider whose reads lag its writes is
	// read from then. Zero when unknown.
	LastAttemptEnd time.Time

	// MaybeSent is true when an earlier attempt may have reached the
	// provider: an effect that gives up on an intent for its own reasons
	// (a tool gone from an MCP upstream) must not fail such an intent, which
	// may have acted.
	MaybeSent bool
}

// Effect is a named kind of side effect. Implementations must be safe for
// concurrent use.
type Effect interface {
	// Name is the effect's stable name, as callers write it in intents:
	// lowercase letters, digits and underscores.
	Name() string

	// Guarantee is the provider's guarantee against repeats.
	Guarantee() Guarantee

	// ValidateArgs checks an intent's arguments, a JSON object. It returns an
	// *ArgError naming the offending field, and must not call the provider.
	ValidateArgs(args json.RawMessage) error

	// Execute performs the effect once, passing req.ProviderKey to the
	// provider where it can dedupe on it. It returns the provider's answer
	// (stored as the intent's result) or an error classified with NotSent,
	// Permanent or Ambiguous. ctx carries the attempt's deadline.
	Execute(ctx context.Context, req *Request) (json.RawMessage, error)
}

// Checkpointer is implemented by an effect whose attempt can record where
// it got to (Request.CheckpointFunc), so that the next attempt resumes
// there (Request.Checkpoint) instead of calling the provider again: an MCP
// upstream whose call answered with a task, polled until it ends. Once a
// checkpoint is recorded, the provider received the request: the next
// attempt always resumes, whatever the guarantee, and an ambiguous outcome
// of resumed work ends the intent unknown rather than retrying it.
type Checkpointer interface {
	Checkpoints() bool
}

// SentArgsRecorder is implemented by an effect whose provider receives
// other arguments than the intent's: an MCP upstream's recorded tool,
// which applies its marker and key_arg at send time. Its attempts get
// Request.RecordSentFunc, and record what they send before they send it,
// so that an operator resolving an unknown intent (its attempt may have
// died mid-call) reads exactly what the provider received.
type SentArgsRecorder interface {
	RecordsSentArgs() bool
}

// ArgsSchemaer is implemented by an effect that describes its arguments as
// a JSON Schema (2020-12) of type object, which the MCP server lists as its
// tool's input schema and the HTTP API as its args_schema: each built-in
// effect and each declared one. The schema says what it can of
// ValidateArgs' rules, never refuses arguments ValidateArgs accepts, and
// does not replace it: ValidateArgs is the rule.
type ArgsSchemaer interface {
	ArgsSchema() json.RawMessage
}

// Reconciler is implemented by reconcilable effects: Lookup asks the provider
// whether the effect for providerKey exists, and returns its result if so.
type Reconciler interface {
	Lookup(ctx context.Context, providerKey string) (result json.RawMessage, found bool, err error)
}

// RequestReconciler is implemented by reconcilable effects whose look-up
// needs more than the provider key: the intent's arguments (a channel, a
// repository) or its creation time (to bound a listing). The worker prefers
// it to Reconciler.Lookup.
type RequestReconciler interface {
	LookupRequest(ctx context.Context, req *Request, createdAt time.Time) (result json.RawMessage, found bool, err error)
}

// Declarer is implemented by effects whose request is declared rather than
// coded (effects/declared): DeclarationSHA256 identifies the declaration in
// force. An intent that may have been sent under one declaration is never
// sent again under another (it ends unknown, declaration_changed): the same
// provider key with a different request could act twice.
type Declarer interface {
	DeclarationSHA256() string
}

// Reserver is implemented by effects whose attempt needs something taken
// before the intent is claimed: a recorded MCP upstream tool's call slot
// and session (a child started, an HTTP session opened). The worker calls
// Reserve before the claim and release once the attempt is over, and
// passes the returned context to the attempt's look-up and Execute. A
// wait or a crash while reserving then leaves nothing claimed (no intent
// running with nothing sent), and the wait eats neither the attempt's
// timeout nor an attempt. A reservation that fails is carried in the
// context: Execute answers not_sent for it.
type Reserver interface {
	Reserve(ctx context.Context) (reserved context.Context, release func())
}

// AlwaysClaimer is implemented by effects whose every attempt is claimed
// (committed running, with its lease) before the provider is called, and
// never run in a batch job, whatever the guarantee: a recorded MCP upstream
// tool, where a rescued batch could call the upstream while the first call
// still runs.
type AlwaysClaimer interface {
	AlwaysClaim() bool
}

// AlwaysClaims reports whether e's attempts are always claimed first.
func AlwaysClaims(e Effect) bool {
	c, ok := e.(AlwaysClaimer)
	return ok && c.AlwaysClaim()
}

// Queuer is implemented by effects that share a River queue with others
// instead of having one of their own, named after the effect: the recorded
// tools of one MCP upstream share `upstream_<name>`, whose workers are as
// many as the upstream takes calls at once. Such an effect's first attempts
// are never batched, since a batch job runs in its effect's own queue.
type Queuer interface {
	// Queue is the River queue of the effect's jobs.
	Queue() string
}

// QueueOf is the River queue of e's jobs: its Queue if it is a Queuer, its
// name otherwise.
func QueueOf(e Effect) string {
	if q, ok := e.(Queuer); ok {
		return q.Queue()
	}
	return e.Name()
}

// NamespaceScoper is implemented by effects that only some namespaces may
// use: the tools of an MCP upstream whose declaration names `namespaces:`.
// An effect that does not implement it may be used by every namespace.
type NamespaceScoper interface {
	// Namespaces are the namespaces that may enqueue the effect; empty
	// means all.
	Namespaces() []string
}

// AllowedIn reports whether namespace may enqueue e. The write side refuses
// an effect a namespace may not use as it refuses one not enabled, and the
// dispatcher fails such an intent written by other means (the SQL function)
// before any attempt, so that a namespace neither reaches nor learns of
// another's tools.
func AllowedIn(e Effect, namespace string) bool {
	s, ok := e.(NamespaceScoper)
	if !ok {
		return true
	}
	ns := s.Namespaces()
	return len(ns) == 0 || slices.Contains(ns, namespace)
}

// ArgsGuaranteer is implemented by effects whose guarantee depends on the
// intent's arguments: a webhook is deduplicated when its endpoint dedupes,
// and at most once otherwise. GuaranteeFor gets valid arguments; Guarantee
// then reports the weakest guarantee the effect can have. An effect that
// can answer GuaranteeReconcilable must implement Reconciler.
type ArgsGuaranteer interface {
	GuaranteeFor(args json.RawMessage) Guarantee
}

// GuaranteeOf returns e's guarantee for an intent's arguments.
func GuaranteeOf(e Effect, args json.RawMessage) Guarantee {
	if g, ok := e.(ArgsGuaranteer); ok {
		if guarantee := g.GuaranteeFor(args); guarantee.Valid() {
			return guarantee
		}
	}
	return e.Guarantee()
}

// DedupeWindower is implemented by deduplicated effects whose provider keeps
// keys for a window other than DedupeWindowDefault.
type DedupeWindower interface {
	DedupeWindow() time.Duration
}

// DedupeWindow returns e's dedupe window.
func DedupeWindow(e Effect) time.Duration {
	if w, ok := e.(DedupeWindower); ok {
		return w.DedupeWindow()
	}
	return DedupeWindowDefault
}

// Describer is implemented by effects that describe themselves in a
// sentence or two, which the HTTP API lists as the effect's description
// and the MCP server as its tool's: declared effects and MCP upstream
// tools.
type Describer interface {
	Description() string
}

// ToolNamer is implemented by effects that name their own MCP tool: a
// declared effect and an MCP upstream's recorded tool, whose files hold the
// tool's name. The MCP server lists such an effect as a tool when it also
// describes itself (Describer) and its arguments (ArgsSchemaer).
type ToolNamer interface {
	Tool() string
}

// ApprovalRuleChecker is implemented by effects whose arguments are known
// from a declaration (a declared effect's file, an MCP upstream's lock):
// CheckApprovalRule reports whether an approval rule on the argument arg
// can hold, numeric for the comparisons <, <=, > and >=, so a rule on an
// argument the effect never takes is refused at start-up instead of never
// matching. The built-in effects check their own rules.
type ApprovalRuleChecker interface {
	CheckApprovalRule(arg string, numeric bool) error
}

// QueueSizer is implemented by effects whose River queue runs as many
// workers as the provider takes calls at once, rather than the dispatcher's
// Workers: an MCP upstream's recorded tools (processes x max_in_flight),
// since more workers would only wait for a slot and time out not_sent. A
// result of 0 or less means the dispatcher's default.
type QueueSizer interface {
	Workers() int
}

// UpstreamTooler is implemented by the recorded tools of an MCP upstream
// (effects/declared, UpstreamTool): the MCP server mirrors them and waits
// for their intents' end, and the console names the upstream and tool an
// intent called.
type UpstreamTooler interface {
	// UpstreamName is the upstream's name in the declaration file.
	UpstreamName() string
	// UpstreamTool is the tool's name on the upstream.
	UpstreamTool() string
	// Wait is how long a mirrored call waits for the intent's end before
	// answering that it is under way.
	Wait() time.Duration
	// Withdrawn is why the tool's calls wait (a withdrawal's code), or ""
	// while it is served.
	Withdrawn() string
}

// ArgError is an argument validation failure: which field, and what is wrong.
type ArgError struct {
	// Field is the JSON path of the offending field ("to[2]", "amount"), or
	// empty for the arguments as a whole.
	Field string
	// Message says what was expected.
	Message string
}

func (e *ArgError) Error() string {
	if e.Field == "" {
		return "invalid args: " + e.Message
	}
	return fmt.Sprintf("invalid args: %s: %s", e.Field, e.Message)
}

// NameRule says what ValidName accepts, for error messages.
const NameRule = "a lowercase letter, then lowercase letters and digits in runs joined by single underscores (no trailing underscore), at most 64 characters"

// nameRE is a subset of River's queue-name rule (an intent's effect is its
// River queue): River also takes a leading digit and hyphens, which outbox
// keeps out so that an effect's name is a snake_case identifier in every
// language a caller writes.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$`)

// ValidName reports whether name is a valid effect name (NameRule). The
// registry, the Go library and declared effects all check names with it,
// so that every effect they accept can be River's queue.
func ValidName(name string) bool { return len(name) <= 64 && nameRE.MatchString(name) }

// Registry is the set of enabled effects, by name. It is built once at start
// and read concurrently after.
type Registry struct {
	byName map[string]Effect
}

// NewRegistry returns a registry of effects. It refuses duplicate or invalid
// names, unknown guarantees, and reconcilable effects without a Lookup.
func NewRegistry(effects ...Effect) (*Registry, error) {
	r := &Registry{byName: make(map[string]Effect, len(effects))}
	for _, e := range effects {
		if err := r.Register(e); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds an effect. It must not be called once the registry is in use.
func (r *Registry) Register(e Effect) error {
	name := e.Name()
	if !ValidName(name) {
		return fmt.Errorf("effect name %q: must be %s", name, NameRule)
	}
	if _, ok := r.byName[name]; ok {
		return fmt.Errorf("effect %q registered twice", name)
	}
	if !e.Guarantee().Valid() {
		return fmt.Errorf("effect %q has unknown guarantee %q", name, e.Guarantee())
	}
	if e.Guarantee() == GuaranteeReconcilable {
		if _, ok := e.(Reconciler); !ok {
			return fmt.Errorf("effect %q is reconcilable but does not implement Lookup", name)
		}
	}
	r.byName[name] = e
	return nil
}

// Get returns the effect called name.
func (r *Registry) Get(name string) (Effect, bool) {
	if r == nil {
		return nil, false
	}
	e, ok := r.byName[name]
	return e, ok
}

// Names returns the registered effects' names, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	names := make([]string, 0, len(r.byName))
	for n := range r.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
