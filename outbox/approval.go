package outbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/internal/intentdb"
)

// ApprovalDecision is what an operator decided about an intent awaiting
// approval, or that nobody did in time.
type ApprovalDecision string

const (
	// ApprovalApproved released the intent: it is pending and runs.
	ApprovalApproved ApprovalDecision = "approved"
	// ApprovalDenied cancelled it with error approval_denied.
	ApprovalDenied ApprovalDecision = "denied"
	// ApprovalExpired cancelled it with error approval_expired, after
	// dispatcher.Config.ApprovalTTL without a decision.
	ApprovalExpired ApprovalDecision = "expired"
)

// ApprovalRequested is an intent's ApprovalRule when its caller asked for
// approval (EnqueueParams.RequireApproval) rather than a rule.
const ApprovalRequested = "requested"

// ApprovalHostSuffix ends an approval rule, as written and as recorded on
// the intents it holds, that lets the person at the MCP host decide as well
// as an operator ("charge:amount>=10000[host]"; docs/agents.md, "Tasks and
// approvals in the host"). A rule without it is decided only by operators.
const ApprovalHostSuffix = "[host]"

// ApprovalRequestedHost is an intent's ApprovalRule when its caller, an MCP
// tool call, asked for an approval that the person at the host may give.
const ApprovalRequestedHost = ApprovalRequested + ApprovalHostSuffix

// HostMayApprove reports whether the approval rule recorded on an intent
// (Intent.ApprovalRule) lets the person at the MCP host decide.
func HostMayApprove(rule string) bool { return strings.HasSuffix(rule, ApprovalHostSuffix) }

// ApprovalParams is an operator's approval or denial of an intent awaiting
// approval.
type ApprovalParams struct {
	// ArgsSHA256 is the intent's ArgsSHA256 as the operator saw it. The
	// decision is refused (ErrApprovalMismatch) when it is not the intent's,
	// so that it can only release the arguments that were shown. Required.
	ArgsSHA256 string
	// By names who decided, for the record: never a secret. Optional; at
	// most 200 characters.
	By string
	// Key is the intent's key.
	Key string
	// Namespace is the tenant. Defaults to NamespaceDefault.
	Namespace string
	// Note says why, for the record; a denial's note is also its error's
	// message. Optional; at most 1000 characters.
	Note string
}

var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Approve releases an intent awaiting approval: it becomes pending and is
// dispatched like any other. It returns ErrNotAwaitingApproval when the
// intent is in another state, ErrApprovalMismatch when params.ArgsSHA256 is
// not the intent's, and ErrNotFound when there is no such intent.
func (c *Client) Approve(ctx context.Context, params *ApprovalParams) (*Intent, error) {
	return c.decideOwnTx(ctx, params, ApprovalApproved)
}

// ApproveTx is Approve in the caller's transaction: the intent is released
// when tx commits, and still awaits approval if tx rolls back. The intent's
// row stays locked until tx ends. It does not commit tx.
func (c *Client) ApproveTx(ctx context.Context, tx Executor, params *ApprovalParams) (*Intent, error) {
	return c.decideTx(ctx, tx, params, ApprovalApproved)
}

// Deny cancels an intent awaiting approval, with error approval_denied and
// the note as its message. Its errors are Approve's.
func (c *Client) Deny(ctx context.Context, params *ApprovalParams) (*Intent, error) {
	return c.decideOwnTx(ctx, params, ApprovalDenied)
}

// DenyTx is Deny in the caller's transaction: the intent is cancelled when
// tx commits, and still awaits approval if tx rolls back. It does not
// commit tx.
func (c *Client) DenyTx(ctx context.Context, tx Executor, params *ApprovalParams) (*Intent, error) {
	return c.decideTx(ctx, tx, params, ApprovalDenied)
}

// decideOwnTx records decision in a transaction of its own, and reports it
// (ApprovalObserverFunc, the log) only once committed.
func (c *Client) decideOwnTx(ctx context.Context, params *ApprovalParams, decision ApprovalDecision) (*Intent, error) {
	if err := validateApproval(params); err != nil {
		return nil, err
	}
	// A transaction: the intent is locked while its state and arguments
	// are checked, so that they are those decided on.
	row, err := dbutil.WithTxV(ctx, c.pool, func(tx pgx.Tx) (*intentdb.Row, error) {
		return c.decide(ctx, tx, params, decision)
	})
	if err != nil {
		return nil, err
	}
	c.decided(ctx, row, decision, params.By)
	return intentFromRow(row), nil
}

// decideTx records decision in tx and reports it before tx commits, as
// EnqueueTx reports an enqueue.
func (c *Client) decideTx(ctx context.Context, tx Executor, params *ApprovalParams, decision ApprovalDecision) (*Intent, error) {
	if err := validateApproval(params); err != nil {
		return nil, err
	}
	row, err := c.decide(ctx, tx, params, decision)
	if err != nil {
		return nil, err
	}
	c.decided(ctx, row, decision, params.By)
	return intentFromRow(row), nil
}

func validateApproval(params *ApprovalParams) error {
	if params == nil {
		return &Error{Code: CodeInvalidArgs, Message: "params must not be nil"}
	}
	namespace := params.Namespace
	if namespace == "" {
		namespace = NamespaceDefault
	}
	if err := ValidateNamespace(namespace); err != nil {
		return err
	}
	if err := ValidateKey(params.Key); err != nil {
		return err
	}
	if !sha256HexRE.MatchString(params.ArgsSHA256) {
		return &Error{Code: CodeInvalidArgs, Field: "args_sha256", Message: "must be the intent's args_sha256: 64 lowercase hex digits"}
	}
	return validateRecord(params.By, params.Note)
}

// decide records decision on the intent params names, in tx, whose
// parameters validateApproval accepted.
func (c *Client) decide(ctx context.Context, tx Executor, params *ApprovalParams, decision ApprovalDecision) (*intentdb.Row, error) {
	namespace := params.Namespace
	if namespace == "" {
		namespace = NamespaceDefault
	}
	// Locked, so that the state and arguments checked are those decided on.
	current, err := c.queries.GetForUpdate(ctx, tx, namespace, params.Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &Error{Code: CodeNotFound, Message: "no intent with this key"}
	}
	if err != nil {
		return nil, fmt.Errorf("error reading intent: %w", err)
	}
	if current.State != string(StateAwaitingApproval) {
		return nil, &Error{Code: CodeNotAwaitingApproval, Message: "intent is " + current.State}
	}
	if ArgsSHA256(current.Args) != params.ArgsSHA256 {
		return nil, &Error{Code: CodeApprovalMismatch, Field: "args_sha256",
			Message: "is not the intent's: its arguments are not the ones reviewed; read the intent again"}
	}
	var row *intentdb.Row
	if decision == ApprovalApproved {
		row, err = c.queries.Approve(ctx, tx, current.ID, params.By, params.Note)
	} else {
		row, err = c.queries.Deny(ctx, tx, current.ID, params.By, params.Note)
	}
	if err != nil {
		return nil, fmt.Errorf("error recording %s: %w", decision, err)
	}
	return row, nil
}

// decided reports a recorded decision to ApprovalObserverFunc and the log.
func (c *Client) decided(ctx context.Context, row *intentdb.Row, decision ApprovalDecision, by string) {
	if c.approved != nil {
		c.approved(row.Effect, decision)
	}
	c.logger.InfoContext(ctx, "intent "+string(decision), "namespace", row.Namespace, "key", row.Key, "intent_id", row.ID,
		"effect", row.Effect, "by", by)
}

// ApprovalRule is one approval rule: every intent of Effect, or,
// with Arg set, those whose top-level argument Arg compares with Value by
// Op. See ParseApprovalRules.
type ApprovalRule struct {
	// Effect is the effect the rule applies to.
	Effect string
	// Arg is a top-level argument's name; empty for every intent of Effect.
	Arg string
	// Op is =, !=, >, >=, < or <=.
	Op string
	// Value is compared with the argument: as a number when it is a JSON
	// number, else as a string.
	Value string
	// Host lets the person at the MCP host decide as well as an operator
	// (written with ApprovalHostSuffix). Operators only when false.
	Host bool
}

// String returns the rule as ParseApprovalRules reads it.
func (r ApprovalRule) String() string {
	suffix := ""
	if r.Host {
		suffix = ApprovalHostSuffix
	}
	if r.Arg == "" {
		return r.Effect + suffix
	}
	return r.Effect + ":" + r.Arg + r.Op + r.Value + suffix
}

var (
	ruleArgRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	jsonNumberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)
)

// ruleOps are the comparison operators, longest first, so that ">=" is not
// read as ">" and a value starting with "=".
var ruleOps = []string{">=", "<=", "!=", "=", ">", "<"}

// ParseApprovalRules reads approval rules: rules separated by commas, each
// an effect alone ("email": every intent of it) or an effect, a colon and
// one comparison of a top-level argument with a value
// ("charge:amount>=10000", "webhook:endpoint=payouts"). The operators are
// =, !=, >, >=, < and <=; a value that is a JSON number is compared as a
// number, any other as a string, for which only = and != are allowed. A
// rule ending in ApprovalHostSuffix ("charge:amount>=10000[host]") lets the
// person at the MCP host decide as well as an operator. The value "none"
// alone means no rule. Errors name the rule.
func ParseApprovalRules(s string) ([]ApprovalRule, error) {
	if strings.TrimSpace(s) == "none" {
		return []ApprovalRule{}, nil
	}
	rules := []ApprovalRule{}
	for _, text := range strings.Split(s, ",") {
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		rule, err := parseApprovalRule(text)
		if err != nil {
			return nil, fmt.Errorf("approval rule %q: %w", text, err)
		}
		rules = append(rules, rule)
	}
	return rules, nil
}

func parseApprovalRule(text string) (ApprovalRule, error) {
	text, host := strings.CutSuffix(text, ApprovalHostSuffix)
	effect, cond, hasCond := strings.Cut(text, ":")
	if !effects.ValidName(effect) {
		return ApprovalRule{}, errors.New("must start with an effect name (lowercase letters, digits, _)")
	}
	if !hasCond {
		return ApprovalRule{Effect: effect, Host: host}, nil
	}
	for _, op := range ruleOps {
		arg, value, ok := strings.Cut(cond, op)
		if !ok {
			continue
		}
		if !ruleArgRE.MatchString(arg) {
			return ApprovalRule{}, errors.New("must compare a top-level argument named with letters, digits and _, such as amount>=10000")
		}
		if value == "" {
			return ApprovalRule{}, errors.New("needs a value after " + op)
		}
		if strings.ContainsAny(value, "<>=!") {
			return ApprovalRule{}, errors.New("has more than one operator")
		}
		if strings.ContainsAny(value, "[]") {
			return ApprovalRule{}, errors.New("may end only in " + ApprovalHostSuffix + ", after the value")
		}
		if op != "=" && op != "!=" && !jsonNumberRE.MatchString(value) {
			return ApprovalRule{}, fmt.Errorf("compares with %s, which needs a number", op)
		}
		return ApprovalRule{Effect: effect, Arg: arg, Op: op, Value: value, Host: host}, nil
	}
	return ApprovalRule{}, errors.New("needs one of =, !=, >, >=, <, <= after the colon, such as amount>=10000")
}

// SetApprovalRules replaces the approval rules in force in the client's
// schema with rules. Every enqueue after it commits obeys them, by every
// path (this library, the SQL functions, a hand-written INSERT): they are
// compiled into an insert trigger in the same transaction, which locks the
// intent table against writes (not reads) until it commits, and waits at
// most 10 s for the transactions writing intents at that moment
// (docs/design.md, "Approval rules, in an insert trigger"). Setting the
// rules already in force changes nothing and takes no such lock, so a
// process may set its rules at every start.
func (c *Client) SetApprovalRules(ctx context.Context, rules []ApprovalRule) error {
	stored, err := storedRules(rules)
	if err != nil {
		return err
	}
	// READ COMMITTED whatever the server's default: the trigger that
	// applies the rules is built from the rules committed last.
	err = pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		return c.setRules(ctx, tx, stored)
	})
	return rulesError(err)
}

// SetApprovalRulesTx is SetApprovalRules in the caller's transaction, which
// must be READ COMMITTED (the rules are compiled from those committed
// last): the rules are in force when tx commits, and unchanged if it rolls
// back. The intent table stays locked against writes until tx ends: keep
// tx short. It does not commit tx.
func (c *Client) SetApprovalRulesTx(ctx context.Context, tx pgx.Tx, rules []ApprovalRule) error {
	stored, err := storedRules(rules)
	if err != nil {
		return err
	}
	var isolation string
	if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&isolation); err != nil {
		return fmt.Errorf("error reading the transaction's isolation: %w", err)
	}
	if isolation != "read committed" {
		return &Error{Code: CodeInvalidArgs, Field: "tx", Message: "must be a READ COMMITTED transaction, not " + isolation}
	}
	return rulesError(c.setRules(ctx, tx, stored))
}

// storedRules checks rules and returns them as stored.
func storedRules(rules []ApprovalRule) ([]intentdb.ApprovalRule, error) {
	stored := make([]intentdb.ApprovalRule, len(rules))
	for i, r := range rules {
		if r.Arg != "" || r.Op != "" || r.Value != "" || r.Host {
			// Checked as written, so that a rule built in Go obeys what
			// ParseApprovalRules enforces.
			if _, err := parseApprovalRule(r.String()); err != nil {
				return nil, &Error{Code: CodeInvalidArgs, Field: fmt.Sprintf("[%d]", i), Message: err.Error()}
			}
		} else if !effects.ValidName(r.Effect) {
			return nil, &Error{Code: CodeInvalidArgs, Field: fmt.Sprintf("[%d].effect", i), Message: "must be an effect name"}
		}
		stored[i] = intentdb.ApprovalRule{Rule: r.String(), Effect: r.Effect, Arg: r.Arg, Op: r.Op, Value: r.Value}
		if jsonNumberRE.MatchString(r.Value) {
			v := r.Value
			stored[i].Num = &v
		}
	}
	return stored, nil
}

// setRules replaces the rules in force with stored, in tx.
func (c *Client) setRules(ctx context.Context, tx pgx.Tx, stored []intentdb.ApprovalRule) error {
	// One writer at a time: replicas starting together each replace the
	// whole set, never interleave.
	if err := c.queries.LockApprovalRules(ctx, tx); err != nil {
		return fmt.Errorf("error locking approval rules: %w", err)
	}
	return c.queries.SetApprovalRules(ctx, tx, stored)
}

// rulesError says what a failed change of the rules means.
func rulesError(err error) error {
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable {
		return fmt.Errorf("error changing approval rules: the trigger applying them could not be rebuilt within 10 s (the intent table busy with writes, or another change of the rules under way); nothing changed: %w", err)
	}
	return err
}

// ApprovalRules returns the rules in force, as written, in order.
func (c *Client) ApprovalRules(ctx context.Context) ([]string, error) {
	rules, err := c.queries.ApprovalRules(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("error reading approval rules: %w", err)
	}
	return rules, nil
}
