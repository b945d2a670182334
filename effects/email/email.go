package email

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/internal/argcheck"
)

// Name is the effect's name.
const Name = "email"

// TLSMode is how the connection to the SMTP server is secured.
type TLSMode string

const (
	// TLSStartTLS connects in the clear and requires STARTTLS.
	TLSStartTLS TLSMode = "starttls"
	// TLSImplicit connects with TLS from the start (SMTPS, usually port 465).
	TLSImplicit TLSMode = "tls"
	// TLSNone sends in the clear: for a local relay or a sandbox only.
	TLSNone TLSMode = "none"

	// TLSDefault is Config.TLS's default.
	TLSDefault = TLSStartTLS
)

// timeoutDefault bounds an attempt whose context has no deadline.
const timeoutDefault = effects.TimeoutDefault

// Limits of the arguments.
const (
	recipientsMax = 50
	subjectMax    = 998 // RFC 5322's line length
	bodyMax       = 1 << 20
)

// argsSchema is ParseArgs' rules as a JSON Schema, with its limits. That
// text or html is required is ParseArgs' alone: a schema would need an
// anyOf at its top level, which hosts such as Anthropic's API refuse (and
// then every tool of the server is lost).
var argsSchema = fmt.Sprintf(`{
	"type": "object",
	"properties": {
		"to": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1, "maxItems": %[1]d, "description": "The recipients' addresses, 1 to %[1]d."},
		"cc": {"type": "array", "items": {"type": "string", "format": "email"}, "maxItems": %[1]d, "description": "Addresses to copy, up to %[1]d."},
		"subject": {"type": "string", "minLength": 1, "maxLength": %[2]d, "description": "The subject line."},
		"text": {"type": "string", "description": "The plain text body. At least one of text and html is required."},
		"html": {"type": "string", "description": "The HTML body. At least one of text and html is required."},
		"reply_to": {"type": "string", "format": "email", "description": "The address replies go to."}
	},
	"required": ["to", "subject"],
	"additionalProperties": false
}`, recipientsMax, subjectMax)

// ArgsSchema returns the JSON Schema of an email's arguments: what
// ParseArgs checks, as far as a schema can say it.
func ArgsSchema() json.RawMessage { return json.RawMessage(argsSchema) }

// ArgsSchema implements effects.ArgsSchemaer.
func (e *Effect) ArgsSchema() json.RawMessage { return ArgsSchema() }

// Config configures the email effect.
type Config struct {
	// Addr is the SMTP server, host:port. Required.
	Addr string

	// From is the sender, an RFC 5322 address ("Shop <shop@example.com>").
	// Its domain is the Message-ID's. Required.
	From string

	// HELO is the name given in EHLO. Defaults to the machine's host name.
	HELO string

	// Password is AUTH's password, used with User. Defaults to none.
	Password string

	// TLS is how the connection is secured. Defaults to TLSDefault.
	TLS TLSMode

	// TLSConfig configures TLS (a private CA in tests). Defaults to one that
	// verifies the server's certificate for Addr's host.
	TLSConfig *tls.Config

	// User turns on SMTP AUTH: PLAIN over implicit TLS, the best mechanism
	// the server offers after STARTTLS, and only challenge-response ones
	// (CRAM-MD5, SCRAM) in the clear. Defaults to none: no AUTH.
	User string
}

// Effect is the email effect. It is safe for concurrent use.
type Effect struct {
	domain    string
	from      *mail.Address
	helo      string
	host      string
	password  string
	port      int
	tlsConfig *tls.Config
	tlsMode   TLSMode
	user      string
}

// The capabilities Effect has: the build breaks if a method drifts from
// its interface.
var (
	_ effects.Effect       = (*Effect)(nil)
	_ effects.ArgsSchemaer = (*Effect)(nil)
)

// New returns the email effect.
func New(config *Config) (*Effect, error) {
	if config == nil {
		return nil, errors.New("email: Addr and From must be set")
	}
	host, portStr, err := net.SplitHostPort(config.Addr)
	if err != nil || host == "" {
		return nil, errors.New("email: Addr must be host:port")
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return nil, errors.New("email: Addr must have a port from 1 to 65535")
	}
	from, err := mail.ParseAddress(config.From)
	if err != nil {
		return nil, errors.New("email: From must be an email address")
	}
	_, domain, _ := strings.Cut(from.Address, "@")
	e := &Effect{
		domain:   domain,
		from:     from,
		helo:     config.HELO,
		host:     host,
		password: config.Password,
		port:     port,
		tlsMode:  config.TLS,
		user:     config.User,
	}
	if e.tlsMode == "" {
		e.tlsMode = TLSDefault
	}
	switch e.tlsMode {
	case TLSStartTLS, TLSImplicit, TLSNone:
	default:
		return nil, fmt.Errorf("email: TLS must be starttls, tls or none, not %q", e.tlsMode)
	}
	if config.TLSConfig != nil {
		e.tlsConfig = config.TLSConfig.Clone()
	} else {
		e.tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if e.tlsConfig.ServerName == "" {
		e.tlsConfig.ServerName = host
	}
	if e.helo == "" {
		if e.helo, err = os.Hostname(); err != nil || e.helo == "" {
			e.helo = "localhost"
		}
	}
	return e, nil
}

// Name implements effects.Effect.
func (e *Effect) Name() string { return Name }

// Guarantee implements effects.Effect.
func (e *Effect) Guarantee() effects.Guarantee { return effects.GuaranteeAtMostOnce }

// Args are the email's arguments.
type Args struct {
	To      []*mail.Address
	Cc      []*mail.Address
	ReplyTo *mail.Address
	Subject string
	Text    string
	HTML    string
}

type rawArgs struct {
	Cc      []string `json:"cc"`
	HTML    *string  `json:"html"`
	ReplyTo *string  `json:"reply_to"`
	Subject *string  `json:"subject"`
	Text    *string  `json:"text"`
	To      []string `json:"to"`
}

// ParseArgs validates an email's arguments: to (1 to 50 addresses,
// required), cc (up to 50), subject (required), text and/or html (one
// required), reply_to (one address).
func ParseArgs(args json.RawMessage) (*Args, error) {
	var raw rawArgs
	if err := argcheck.Object(args, &raw); err != nil {
		return nil, err
	}
	if raw.To == nil {
		return nil, &effects.ArgError{Field: "to", Message: "is required: an array of 1 to 50 addresses"}
	}
	to, err := argcheck.Addresses("to", raw.To, 1, recipientsMax)
	if err != nil {
		return nil, err
	}
	cc, err := argcheck.Addresses("cc", raw.Cc, 0, recipientsMax)
	if err != nil {
		return nil, err
	}
	a := &Args{To: to, Cc: cc}
	if raw.ReplyTo != nil {
		if a.ReplyTo, err = argcheck.Address("reply_to", *raw.ReplyTo); err != nil {
			return nil, err
		}
	}
	if err := argcheck.Text("subject", raw.Subject, true, subjectMax, true); err != nil {
		return nil, err
	}
	a.Subject = *raw.Subject
	if raw.Text == nil && raw.HTML == nil {
		return nil, &effects.ArgError{Field: "text", Message: "text or html is required"}
	}
	if err := argcheck.Text("text", raw.Text, false, bodyMax, false); err != nil {
		return nil, err
	}
	if err := argcheck.Text("html", raw.HTML, false, bodyMax, false); err != nil {
		return nil, err
	}
	if raw.Text != nil {
		a.Text = *raw.Text
	}
	if raw.HTML != nil {
		a.HTML = *raw.HTML
	}
	return a, nil
}

// ValidateArgs implements effects.Effect.
func (e *Effect) ValidateArgs(args json.RawMessage) error {
	_, err := ParseArgs(args)
	return err
}

// MessageID returns the Message-ID (without angle brackets) that the effect
// sends for a provider key, from the sender's domain.
func (e *Effect) MessageID(providerKey string) string {
	return providerKey + "@" + e.domain
}

// Result is the email's result, stored in the intent.
type Result struct {
	// MessageID is the Message-ID sent, without angle brackets.
	MessageID string `json:"message_id"`
	// Recipients is how many recipients the server took.
	Recipients int `json:"recipients"`
	// Response is the server's final reply (often with its queue id), with
	// addresses redacted.
	Response string `json:"response,omitempty"`
}

// Execute implements effects.Effect: one message, over one connection.
func (e *Effect) Execute(ctx context.Context, req *effects.Request) (json.RawMessage, error) {
	args, err := ParseArgs(req.Args)
	if err != nil {
		return nil, effects.Permanent(effects.CodeInvalidArgs, err)
	}
	msg := e.compose(args, req.ProviderKey)

	timeout := timeoutDefault
	if deadline, ok := ctx.Deadline(); ok {
		timeout = time.Until(deadline)
	}
	if timeout <= 0 {
		return nil, effects.NotSent("timeout", errors.New("smtp: no time left for the attempt"))
	}
	client, err := e.client(ctx, timeout)
	if err != nil {
		return nil, effects.Permanent("invalid_config", fmt.Errorf("smtp: %w", err))
	}
	smtpClient, err := client.DialToSMTPClientWithContext(ctx)
	if err != nil {
		// Nothing of this message was sent: connecting, the greeting,
		// STARTTLS or AUTH failed.
		code := "connection_failed"
		if ctx.Err() != nil {
			code = "timeout"
		}
		return nil, effects.NotSent(code, fmt.Errorf("smtp: connecting to the server: %s", redact(err.Error())))
	}
	sendErr := client.SendWithSMTPClient(smtpClient, msg)
	_ = client.CloseWithSMTPClient(smtpClient) // QUIT; the message's fate is decided by now

	if msg.IsDelivered() {
		// The server gave its final 2xx reply; a failure after it (RSET,
		// QUIT) changes nothing.
		return json.Marshal(Result{
			MessageID:  e.MessageID(req.ProviderKey),
			Recipients: len(args.To) + len(args.Cc),
			Response:   redact(msg.ServerResponse()),
		})
	}
	if sendErr == nil {
		return nil, effects.Ambiguous("smtp_unconfirmed", errors.New("smtp: the send ended without the server's final reply"))
	}
	return nil, classify(ctx, sendErr)
}

// client returns a go-mail client for one attempt. Its connection is closed
// when ctx ends, so that no SMTP exchange outlives the attempt's deadline
// (go-mail's own timeout is per command).
func (e *Effect) client(ctx context.Context, timeout time.Duration) (*gomail.Client, error) {
	opts := []gomail.Option{
		gomail.WithPort(e.port),
		gomail.WithHELO(e.helo),
		// Past the attempt's deadline, so that the deadline (which closes the
		// connection, below) is what ends a slow exchange, and the error can
		// be told apart as a timeout by ctx.Err.
		gomail.WithTimeout(timeout + time.Second),
		gomail.WithTLSConfig(e.tlsConfig),
		gomail.WithoutNoop(),
		gomail.WithoutRset(),
		gomail.WithDialContextFunc(func(dialCtx context.Context, network, addr string) (net.Conn, error) {
			var (
				conn net.Conn
				err  error
			)
			dialer := &net.Dialer{}
			if e.tlsMode == TLSImplicit {
				conn, err = (&tls.Dialer{NetDialer: dialer, Config: e.tlsConfig}).DialContext(dialCtx, network, addr)
			} else {
				conn, err = dialer.DialContext(dialCtx, network, addr)
			}
			if err != nil {
				return nil, err
			}
			context.AfterFunc(ctx, func() { _ = conn.Close() })
			return conn, nil
		}),
	}
	switch e.tlsMode {
	case TLSStartTLS:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	default:
		// Implicit TLS is set up by the dialer above; none has none.
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	}
	if e.user != "" {
		auth := gomail.SMTPAuthAutoDiscover
		if e.tlsMode == TLSImplicit {
			// go-mail does not know that our dialer's connection is
			// encrypted, so it would discover only challenge-response
			// mechanisms; PLAIN over TLS is what every server takes.
			auth = gomail.SMTPAuthPlain
		}
		opts = append(opts, gomail.WithSMTPAuth(auth), gomail.WithUsername(e.user), gomail.WithPassword(e.password))
	}
	return gomail.NewClient(e.host, opts...)
}

// compose builds the message of checked arguments.
func (e *Effect) compose(args *Args, providerKey string) *gomail.Msg {
	msg := gomail.NewMsg()
	msg.FromMailAddress(e.from)
	msg.ToMailAddress(args.To...)
	if len(args.Cc) > 0 {
		msg.CcMailAddress(args.Cc...)
	}
	if args.ReplyTo != nil {
		msg.ReplyToMailAddress(args.ReplyTo)
	}
	msg.Subject(args.Subject)
	msg.SetMessageIDWithValue(e.MessageID(providerKey))
	msg.SetDate()
	switch {
	case args.Text != "" && args.HTML != "":
		msg.SetBodyString(gomail.TypeTextPlain, args.Text)
		msg.AddAlternativeString(gomail.TypeTextHTML, args.HTML)
	case args.HTML != "":
		msg.SetBodyString(gomail.TypeTextHTML, args.HTML)
	default:
		msg.SetBodyString(gomail.TypeTextPlain, args.Text)
	}
	return msg
}

// classify turns go-mail's send error into an effect error.
func classify(ctx context.Context, err error) error {
	var se *gomail.SendError
	if !errors.As(err, &se) {
		return effects.Ambiguous("smtp_error", fmt.Errorf("smtp: %s", redact(err.Error())))
	}
	code := se.ErrorCode()
	detail := fmt.Sprintf("smtp: %s", redact(se.Error()))
	switch se.Reason {
	case gomail.ErrSMTPDataClose:
		// The data went out in full; this is the reply to it.
		switch {
		case code >= 500:
			return effects.Permanent("smtp_rejected", errors.New(detail))
		case code >= 400:
			return effects.NotSent("smtp_deferred", errors.New(detail))
		case ctx.Err() != nil:
			return effects.Ambiguous("timeout", fmt.Errorf("%s (the message was sent and the reply did not come before the deadline)", detail))
		}
		return effects.Ambiguous("connection_lost", fmt.Errorf("%s (the message was sent and the connection failed before the reply)", detail))
	case gomail.ErrWriteContent:
		// The final "." was never sent: the server cannot have taken it.
		return effects.NotSent("connection_failed", errors.New(detail))
	case gomail.ErrSMTPMailFrom, gomail.ErrSMTPRcptTo, gomail.ErrSMTPData:
		if code >= 500 {
			return effects.Permanent("smtp_rejected", errors.New(detail))
		}
		return effects.NotSent(notSentCode(ctx, code), errors.New(detail))
	case gomail.ErrConnCheck, gomail.ErrGetSender, gomail.ErrGetRcpts, gomail.ErrNoUnencoded:
		return effects.NotSent(notSentCode(ctx, code), errors.New(detail))
	}
	return effects.Ambiguous("smtp_error", errors.New(detail))
}

func notSentCode(ctx context.Context, code int) string {
	switch {
	case code >= 400:
		return "smtp_deferred"
	case ctx.Err() != nil:
		return "timeout"
	}
	return "connection_failed"
}

var addressRE = regexp.MustCompile(`[^\s<>,;:"'()\[\]]+@[^\s<>,;:"'()\[\]]+`)

// redact removes email addresses from a server's reply or go-mail's message
// (which lists the affected recipients).
func redact(s string) string {
	return addressRE.ReplaceAllString(s, "[address]")
}
