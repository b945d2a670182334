package mcpserver

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outbox-dev/outbox/internal/apierror"
	"github.com/outbox-dev/outbox/internal/dbutil"
	"github.com/outbox-dev/outbox/outbox"
)

// StateKeySize is the size of the key that derives task ids and seals
// requestState (OUTBOX_STATE_KEY, or the one generated at migrate).
const StateKeySize = 32

// stateLifetimeMax bounds how long a requestState stays valid, whatever
// the approval's own expiry: a state is answered by a person in front of
// the host, in minutes.
const stateLifetimeMax = time.Hour

// stateSealedPrefix versions the sealed requestState's form.
const stateSealedPrefix = "v1."

// stateAAD is the AEAD's additional data: a sealed value of another use of
// the key never opens as a requestState.
var stateAAD = []byte("outbox mcp requestState v1")

// The answers a host can give to an approval's elicitation (MCP's
// ElicitResult actions), and the decision its form carries.
const (
	actionAccept  = "accept"
	actionDecline = "decline"
	actionCancel  = "cancel"

	decisionApprove = "approve"
	decisionDeny    = "deny"
)

// ViaHost is Config.ApprovalFunc's via for a decision given by the person
// at the MCP host (outbox_mcp_approvals_total{via}).
const ViaHost = "host"

// stateKeys are the keys derived from the state key: one for task ids'
// MACs, one for approval request ids, one that seals requestState. Each
// use has its own key, so that a value made for one is worthless for
// another.
type stateKeys struct {
	approval []byte
	seal     cipher.AEAD
	task     []byte
}

// newStateKeys derives the keys from master (HMAC-SHA256 with a label per
// use, as HKDF's expand step does for one block).
func newStateKeys(master []byte) (*stateKeys, error) {
	if len(master) != StateKeySize {
		return nil, fmt.Errorf("mcpserver: the state key must be %d bytes, not %d", StateKeySize, len(master))
	}
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, master)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	block, err := aes.NewCipher(derive("outbox requestState seal v1"))
	if err != nil {
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	return &stateKeys{approval: derive("outbox approval request id v1"), seal: aead, task: derive("outbox task id v1")}, nil
}

// stateKeys returns the server's keys (TaskIDs.keys).
func (s *server) stateKeys(ctx context.Context) (*stateKeys, error) { return s.ids.keys(ctx) }

// stateID identifies one approval request of one intent to one caller. It
// is derived, not random: every poll of a task shows the same request under
// the same key until it is answered, and the next request, after an answer
// that left the intent waiting (decline), gets another.
type stateID [16]byte

func (id stateID) hex() string { return hex.EncodeToString(id[:]) }

// approvalID returns the id of intent's current approval request to
// principal: a MAC of the intent, the principal and how many of the
// intent's requests were answered.
func (s *server) approvalID(ctx context.Context, keys *stateKeys, principal string, intentID int64) (stateID, error) {
	used, err := s.queries.StatesUsed(ctx, s.pool, intentID)
	if err != nil {
		return stateID{}, fmt.Errorf("error reading approval requests: %w", err)
	}
	m := hmac.New(sha256.New, keys.approval)
	_ = binary.Write(m, binary.BigEndian, intentID)
	_ = binary.Write(m, binary.BigEndian, used)
	m.Write([]byte(principal))
	var id stateID
	copy(id[:], m.Sum(nil))
	return id, nil
}

// requestState is what a sealed requestState binds: the approval request,
// its intent and namespace, the caller it was issued to, the arguments'
// hash, the tool and an expiry no later than the approval's.
type requestState struct {
	ArgsSHA256 string `json:"args_sha256"`
	Expires    int64  `json:"exp"`
	ID         string `json:"id"`
	Intent     int64  `json:"intent"`
	Namespace  string `json:"ns"`
	Principal  string `json:"principal"`
	Tool       string `json:"tool"`
	// Mode is the elicitation's: "url" for a page of the console, where an
	// operator decides (the answer then carries no decision); empty for
	// the host's form.
	Mode string `json:"mode,omitempty"`
}

// sealState encrypts and authenticates st (AES-256-GCM, a random nonce): a
// client can neither read nor alter it.
func (k *stateKeys) sealState(st *requestState) (string, error) {
	plain, err := json.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("error encoding requestState: %w", err)
	}
	nonce := make([]byte, k.seal.NonceSize(), k.seal.NonceSize()+len(plain)+k.seal.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("error sealing requestState: %w", err)
	}
	return stateSealedPrefix + base64.RawURLEncoding.EncodeToString(k.seal.Seal(nonce, nonce, plain, stateAAD)), nil
}

// openState returns the state sealed in s, or an invalid_request_state
// error when it was not sealed by this key (forged, altered, truncated).
func (k *stateKeys) openState(sealed string) (*requestState, error) {
	refused := stateRefused("does not verify: it was not issued by this server, or was altered")
	body, ok := strings.CutPrefix(sealed, stateSealedPrefix)
	if !ok {
		return nil, refused
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(b) < k.seal.NonceSize()+k.seal.Overhead() {
		return nil, refused
	}
	plain, err := k.seal.Open(nil, b[:k.seal.NonceSize()], b[k.seal.NonceSize():], stateAAD)
	if err != nil {
		return nil, refused
	}
	var st requestState
	if err := json.Unmarshal(plain, &st); err != nil {
		return nil, refused
	}
	return &st, nil
}

// stateRefused is the error of a requestState refused: nothing is written.
func stateRefused(why string) error {
	return &outbox.Error{Code: apierror.CodeInvalidRequestState, Field: "requestState", Message: why}
}

// approvalRequest is an approval asked of the host: its id, and the
// elicitation that asks it.
type approvalRequest struct {
	id     stateID
	elicit *mcp.ElicitParams
}

// approvalRequest returns the elicitation asking principal to approve
// intent: a form naming the tool, the arguments and their hash, the rule
// and the expiry, with a decision (approve or deny) and a reason.
func (s *server) approvalRequest(ctx context.Context, keys *stateKeys, principal string, tool *EffectTool, intent *outbox.Intent) (*approvalRequest, error) {
	id, err := s.approvalID(ctx, keys, principal, intent.ID)
	if err != nil {
		return nil, err
	}
	name := intent.Effect
	if tool != nil {
		name = tool.Name
	}
	rule := ""
	if intent.ApprovalRule != nil {
		rule = strings.TrimSuffix(*intent.ApprovalRule, outbox.ApprovalHostSuffix)
	}
	summary := string(intent.Args)
	if len(summary) > argsSummaryMax {
		summary = strings.ToValidUTF8(summary[:argsSummaryMax], "") + "…"
	}
	message := fmt.Sprintf("Approve %s with %s?\nargs_sha256: %s\nrule: %s\nexpires: %s",
		name, summary, intent.ArgsSHA256, rule, s.approvalExpiry(intent).UTC().Format(time.RFC3339))
	return &approvalRequest{id: id, elicit: &mcp.ElicitParams{
		Mode:    "form",
		Message: message,
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"decision": map[string]any{"type": "string", "title": "Decision", "enum": []string{decisionApprove, decisionDeny}},
				"reason":   map[string]any{"type": "string", "title": "Reason", "maxLength": 1000},
			},
			"required": []string{"decision"},
		},
	}}, nil
}

// consoleRequest returns the URL-mode elicitation that opens the
// console's page of intent, where an operator approves or denies it: the
// host shows the link, and the call retried after it reads the outcome.
func (s *server) consoleRequest(ctx context.Context, keys *stateKeys, principal string, tool *EffectTool, intent *outbox.Intent) (*approvalRequest, error) {
	id, err := s.approvalID(ctx, keys, principal, intent.ID)
	if err != nil {
		return nil, err
	}
	rule := ""
	if intent.ApprovalRule != nil {
		rule = *intent.ApprovalRule
	}
	message := fmt.Sprintf("An operator must approve %s (rule %s, args_sha256 %s) before it runs; it expires %s. The page opens outbox's console, where an operator decides; call again afterwards to read the outcome.",
		tool.Name, rule, intent.ArgsSHA256, s.approvalExpiry(intent).UTC().Format(time.RFC3339))
	return &approvalRequest{id: id, elicit: &mcp.ElicitParams{
		Mode:          "url",
		Message:       message,
		URL:           s.consoleURL(intent),
		ElicitationID: id.hex(),
	}}, nil
}

// consolePrefix is where the console is mounted (console.Prefix, which
// this package cannot import: the console imports it).
const consolePrefix = "/console"

// consoleURL is the console's page of intent under the public URL.
func (s *server) consoleURL(intent *outbox.Intent) string {
	return s.publicURL + consolePrefix + "/intents/" + url.PathEscape(intent.Namespace) + "/" + url.PathEscape(intent.Key)
}

// argsSummaryMax bounds the arguments shown in an approval's message.
const argsSummaryMax = 500

// approvalExpiry is when intent's approval expires (Config.ApprovalTTL
// after its creation).
func (s *server) approvalExpiry(intent *outbox.Intent) time.Time {
	return intent.CreatedAt.Add(s.approvalTTL)
}

// canElicitURL reports whether a client declared URL-mode elicitation.
func canElicitURL(caps *mcp.ClientCapabilities) bool {
	return caps != nil && caps.Elicitation != nil && caps.Elicitation.URL != nil
}

// canElicitForm reports whether a client declared form elicitation (an
// empty elicitation capability means form, per MCP).
func canElicitForm(caps *mcp.ClientCapabilities) bool {
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	return caps.Elicitation.Form != nil || caps.Elicitation.URL == nil
}

// decision is a host's answer to an approval request.
type decision struct {
	// action is the elicitation's action: accept, decline or cancel.
	action string
	// approve is the form's decision, for accept.
	approve bool
	reason  string
	// url marks the answer to a URL-mode elicitation: the host opened (or
	// refused to open) the console's page, and decided nothing.
	url bool
}

// word is the decision as outbox_mcp_approvals_total{decision} counts it.
func (d decision) word() string {
	switch {
	case d.url:
		return "url_" + d.action
	case d.action != actionAccept:
		return d.action
	case d.approve:
		return string(outbox.ApprovalApproved)
	default:
		return string(outbox.ApprovalDenied)
	}
}

// parseDecision reads an elicitation's answer to an approval request.
func parseDecision(raw json.RawMessage) (decision, error) {
	var res mcp.ElicitResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return decision{}, fmt.Errorf("the approval's answer is not an elicitation result: %w", err)
	}
	d := decision{action: res.Action}
	switch res.Action {
	case actionDecline, actionCancel:
		return d, nil
	case actionAccept:
	default:
		return decision{}, errors.New("the approval's answer must have action accept, decline or cancel")
	}
	choice, _ := res.Content["decision"].(string)
	switch choice {
	case decisionApprove:
		d.approve = true
	case decisionDeny:
	default:
		return decision{}, errors.New("the approval's answer must have decision approve or deny")
	}
	if reason, ok := res.Content["reason"].(string); ok {
		d.reason = reason
	}
	return d, nil
}

// parseURLAnswer reads an elicitation's answer to a URL-mode request:
// only its action counts.
func parseURLAnswer(raw json.RawMessage) (decision, error) {
	var res mcp.ElicitResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return decision{}, fmt.Errorf("the answer is not an elicitation result: %w", err)
	}
	switch res.Action {
	case actionAccept, actionDecline, actionCancel:
		return decision{action: res.Action, url: true}, nil
	}
	return decision{}, errors.New("the answer must have action accept, decline or cancel")
}

// applyDecision records a host's answer to the approval request st: the
// request is consumed first (a second use, on any replica, is refused),
// then the decision is recorded as any approval is, in the same
// transaction. An answer that decides nothing (decline, cancel) consumes
// the request and leaves the intent awaiting approval. It returns the
// intent as it stands after.
func (s *server) applyDecision(ctx context.Context, st *requestState, intent *outbox.Intent, d decision, client string) (*outbox.Intent, error) {
	id, err := hex.DecodeString(st.ID)
	if err != nil {
		return nil, stateRefused("does not verify")
	}
	by := fmt.Sprintf("host %s %s", client, st.Principal)
	if len(by) > 200 {
		by = strings.ToValidUTF8(by[:200], "")
	}
	note := "via host"
	if d.reason != "" {
		note = d.reason
	}
	if len(note) > 1000 {
		note = strings.ToValidUTF8(note[:1000], "")
	}
	got, err := dbutil.WithTxV(ctx, s.pool, func(tx pgx.Tx) (*outbox.Intent, error) {
		fresh, err := s.queries.UseState(ctx, tx, id, st.Intent, d.word(), time.Unix(st.Expires, 0))
		if err != nil {
			return nil, fmt.Errorf("error recording approval request: %w", err)
		}
		if !fresh {
			return nil, stateRefused("was answered already: an approval request is used once")
		}
		params := &outbox.ApprovalParams{ArgsSHA256: st.ArgsSHA256, By: by, Key: intent.Key, Namespace: st.Namespace, Note: note}
		switch {
		case d.url:
			// The host opened the console's page (or would not): an
			// operator decides there. The request is used, so that the
			// next one is another.
			return intent, nil
		case d.action != actionAccept, intent.State != outbox.StateAwaitingApproval:
			// Nothing to decide (declined, or decided meanwhile): the
			// request is used all the same, so that it cannot be replayed.
			return intent, nil
		case d.approve:
			return s.client.ApproveTx(ctx, tx, params)
		default:
			return s.client.DenyTx(ctx, tx, params)
		}
	})
	if err != nil {
		return nil, err
	}
	if d.url {
		s.logger.InfoContext(ctx, "console page of an approval answered from the host", "intent_id", intent.ID, "action", d.action, "by", by)
		return got, nil
	}
	if s.approvalFunc != nil {
		s.approvalFunc(ViaHost, d.word())
	}
	s.logger.InfoContext(ctx, "approval answered from the host", "intent_id", intent.ID, "decision", d.word(), "by", by)
	return got, nil
}

// checkRequestState checks, before the call is recorded, a retried call's
// requestState (an approval answered from the host, MRTR): it is refused,
// writing nothing, unless it verifies, has not expired, and was issued to
// this caller for these arguments and this tool. It returns the checked
// state and the answer, or nils when the call carries none.
func (s *server) checkRequestState(ctx context.Context, req *mcp.CallToolRequest, tool *EffectTool, call *toolCall) (*requestState, *decision, error) {
	p := req.Params
	if p.RequestState == "" && len(p.InputResponses) == 0 {
		return nil, nil, nil
	}
	keys, err := s.stateKeys(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err := keys.openState(p.RequestState)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case st.Namespace != s.namespace:
		return nil, nil, stateRefused("was issued in another namespace")
	case st.Principal != principalOf(req.Extra, s.actorDefault):
		return nil, nil, stateRefused("was issued to another caller")
	case st.Tool != tool.Name:
		return nil, nil, stateRefused("was issued for another tool")
	case st.ArgsSHA256 != outbox.ArgsSHA256(call.args):
		return nil, nil, stateRefused("was issued for other arguments: the call's arguments must be those approved")
	case time.Now().Unix() >= st.Expires:
		return nil, nil, stateRefused("has expired: call again to be asked again")
	}
	resp, ok := p.InputResponses[st.ID]
	if !ok {
		return nil, nil, stateRefused("carries no answer to its approval request")
	}
	raw, err := json.Marshal(resp)
	if err != nil {
		return nil, nil, stateRefused("carries an unreadable answer")
	}
	if st.Mode == "url" {
		d, err := parseURLAnswer(raw)
		if err != nil {
			return nil, nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "inputResponses", Message: err.Error()}
		}
		return st, &d, nil
	}
	d, err := parseDecision(raw)
	if err != nil {
		return nil, nil, &outbox.Error{Code: outbox.CodeInvalidArgs, Field: "inputResponses", Message: err.Error()}
	}
	return st, &d, nil
}

// askHost returns the input_required answer asking the person at the host
// to approve intent (an elicitation in form mode and a sealed
// requestState), or nil when the host may not decide it or the client
// cannot ask: the call is then answered with the intent as it stands.
//
// For an intent only an operator may approve, with Config.PublicURL set and
// a client that declares URL-mode elicitation, the input request is instead
// one opening the console's page of the intent.
func (s *server) askHost(ctx context.Context, req *mcp.CallToolRequest, tool *EffectTool, intent *outbox.Intent) (*mcp.CallToolResult, error) {
	if intent.State != outbox.StateAwaitingApproval || intent.ApprovalRule == nil || req.ProtocolVersion() < multiRoundTripVersion {
		return nil, nil
	}
	caps := req.ClientCapabilities()
	var mode string
	switch host := outbox.HostMayApprove(*intent.ApprovalRule); {
	case host && canElicitForm(caps):
		mode = "form"
	case !host && s.publicURL != "" && canElicitURL(caps):
		mode = "url"
	default:
		return nil, nil
	}
	keys, err := s.stateKeys(ctx)
	if err != nil {
		return nil, err
	}
	principal := principalOf(req.Extra, s.actorDefault)
	var ask *approvalRequest
	if mode == "url" {
		ask, err = s.consoleRequest(ctx, keys, principal, tool, intent)
	} else {
		ask, err = s.approvalRequest(ctx, keys, principal, tool, intent)
	}
	if err != nil {
		return nil, err
	}
	expires := s.approvalExpiry(intent)
	if limit := time.Now().Add(stateLifetimeMax); limit.Before(expires) {
		expires = limit
	}
	sealed, err := keys.sealState(&requestState{
		ArgsSHA256: intent.ArgsSHA256, Expires: expires.Unix(), ID: ask.id.hex(), Intent: intent.ID,
		Namespace: s.namespace, Principal: principal, Tool: tool.Name, Mode: strings.TrimPrefix(mode, "form"),
	})
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{ask.id.hex(): ask.elicit},
		RequestState:  sealed,
	}, nil
}

// multiRoundTripVersion is the first MCP version with multi round-trip
// requests (input_required).
const multiRoundTripVersion = "2026-07-28"
