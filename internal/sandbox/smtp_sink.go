package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/mail"
	"net/textproto"
	"strings"
	"sync"
	"time"
)

// SMTPSinkConfig configures the SMTP sink.
type SMTPSinkConfig struct {
	// Logger receives the sink's notes. Defaults to a logger that discards.
	Logger *slog.Logger
}

// Message is one message the SMTP sink accepted.
type Message struct {
	// From and Recipients are the envelope's (MAIL FROM, RCPT TO).
	From       string
	Recipients []string
	// MessageID, Subject, To and Cc are read from the headers.
	MessageID string
	Subject   string
	To, Cc    []string
	// Data is the message as received.
	Data []byte
}

// SMTPSink is an SMTP server on a loopback port that keeps every message it
// accepts, with no TLS and no authentication (OUTBOX_SMTP_TLS=none). A
// message counts as an effect once its data was received in full, before
// the final reply: that is when a real server has taken it. Faults apply to
// message transactions. Those queued by Misbehave: 429 and 503 become 421 to
// MAIL FROM, reject a 550 to RCPT TO. Those queued by MisbehaveFor, which
// need the message's key from its Message-ID: 421 and 554 in reply to the
// data, without keeping it. The faults after performing act between the end
// of the data and the final reply.
type SMTPSink struct {
	*standIn
	listener net.Listener
	wg       sync.WaitGroup

	mu       sync.Mutex
	conns    map[net.Conn]bool
	messages []Message
}

// NewSMTPSink starts the sink on a loopback port.
func NewSMTPSink(config *SMTPSinkConfig) (*SMTPSink, error) {
	if config == nil {
		config = &SMTPSinkConfig{}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sandbox smtp: error listening: %w", err)
	}
	s := &SMTPSink{standIn: newStandIn("smtp", config.Logger), listener: l, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the sink's host:port, for OUTBOX_SMTP_ADDR.
func (s *SMTPSink) Addr() string { return s.listener.Addr().String() }

// Messages returns the messages accepted, in order.
func (s *SMTPSink) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.messages...)
}

// Close stops the sink and closes its connections.
func (s *SMTPSink) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		_ = s.listener.Close()
		s.mu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
}

func (s *SMTPSink) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.listener.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[conn] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, conn)
				s.mu.Unlock()
				_ = conn.Close()
			}()
			s.serve(conn)
		}()
	}
}

const smtpIdleTimeout = 2 * time.Minute

// serve runs one SMTP session.
func (s *SMTPSink) serve(conn net.Conn) {
	tp := textproto.NewConn(conn)
	reply := func(format string, args ...any) bool {
		return tp.PrintfLine(format, args...) == nil
	}
	if !reply("220 outbox-sandbox ESMTP sink") {
		return
	}
	var (
		from   string
		rcpts  []string
		inMail bool
		fault  Fault
		faulty bool
	)
	resetTx := func() { from, rcpts, inMail, faulty = "", nil, false, false }
	for {
		_ = conn.SetReadDeadline(time.Now().Add(smtpIdleTimeout))
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO":
			reply("250-outbox-sandbox")
			reply("250-8BITMIME")
			reply("250-ENHANCEDSTATUSCODES")
			reply("250 SIZE 10485760")
		case "HELO":
			reply("250 outbox-sandbox")
		case "NOOP":
			reply("250 2.0.0 OK")
		case "RSET":
			resetTx()
			reply("250 2.0.0 OK")
		case "QUIT":
			reply("221 2.0.0 Bye")
			return
		case "MAIL":
			addr, ok := pathArg(arg, "FROM:")
			if !ok {
				reply("501 5.5.4 Syntax: MAIL FROM:<address>")
				continue
			}
			s.countRequest("")
			resetTx()
			fault, faulty = s.nextFault("", true)
			if faulty && (fault.Kind == FaultTooManyRequests || fault.Kind == FaultUnavailable) {
				reply("421 4.3.2 Service not available, try again later")
				return
			}
			from, inMail = addr, true
			reply("250 2.1.0 OK")
		case "RCPT":
			addr, ok := pathArg(arg, "TO:")
			if !inMail || !ok {
				reply("503 5.5.1 MAIL first, then RCPT TO:<address>")
				continue
			}
			if faulty && fault.Kind == FaultReject {
				reply("550 5.1.1 Mailbox unavailable")
				continue
			}
			rcpts = append(rcpts, addr)
			reply("250 2.1.5 OK")
		case "DATA":
			if !inMail || len(rcpts) == 0 {
				reply("503 5.5.1 RCPT first")
				continue
			}
			reply("354 End data with <CR><LF>.<CR><LF>")
			data, err := tp.ReadDotBytes()
			if err != nil {
				return
			}
			if !s.finishData(conn, reply, from, rcpts, data, fault, faulty) {
				return
			}
			resetTx()
		default:
			reply("502 5.5.2 Command not recognized")
		}
	}
}

// finishData keeps the message and gives the final reply, or misbehaves. It
// reports whether the session goes on. Faults queued for the message's key
// (MisbehaveFor) all act here, the before ones by refusing the data.
func (s *SMTPSink) finishData(conn net.Conn, reply func(string, ...any) bool, from string, rcpts []string, data []byte, fault Fault, faulty bool) bool {
	msg := Message{From: from, Recipients: rcpts, Data: data}
	if m, err := mail.ReadMessage(bytes.NewReader(data)); err == nil {
		msg.MessageID = strings.Trim(m.Header.Get("Message-Id"), "<> ")
		dec := new(mimeWordDecoder)
		msg.Subject = dec.decode(m.Header.Get("Subject"))
		msg.To = headerAddresses(m.Header, "To")
		msg.Cc = headerAddresses(m.Header, "Cc")
	}
	key, _, _ := strings.Cut(msg.MessageID, "@")
	s.countKeyedRequest(key)
	if !faulty {
		fault, faulty = s.nextFault(key, false)
		if faulty {
			switch fault.Kind {
			case FaultTooManyRequests, FaultUnavailable:
				reply("421 4.3.2 Service not available, try again later")
				return false
			case FaultReject:
				return reply("554 5.6.0 Message refused")
			}
		}
	}
	if faulty && fault.Kind == FaultHangBefore {
		gone, _ := peerGone(conn)
		s.hang(key, gone, hangMax, true)
		return false
	}
	s.mu.Lock()
	s.messages = append(s.messages, msg)
	n := len(s.messages)
	s.mu.Unlock()
	s.countEffect(key)

	if faulty {
		switch fault.Kind {
		case FaultServerError, FaultReset:
			if tcp, ok := conn.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0)
			}
			return false
		case FaultSlow:
			gone, stop := peerGone(conn)
			if s.hang(key, gone, fault.delay(), false) {
				return false
			}
			stop()
		case FaultHangAfter:
			gone, _ := peerGone(conn)
			s.hang(key, gone, hangMax, true)
			return false
		}
	}
	return reply("250 2.0.0 OK: queued as %d", n)
}

// peerGone returns a channel closed when the client closes the connection.
// It reads from the connection, so use it only while the client waits for a
// reply; stop ends the watch and leaves the connection as it was.
func peerGone(conn net.Conn) (gone <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	done := make(chan struct{})
	_ = conn.SetReadDeadline(time.Time{})
	go func() {
		defer close(done)
		var b [1]byte
		_, err := conn.Read(b[:])
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			return
		}
		close(ch)
	}()
	return ch, func() {
		_ = conn.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = conn.SetReadDeadline(time.Time{})
	}
}

// pathArg reads "FROM:<a@b> PARAMS" into "a@b".
func pathArg(arg, prefix string) (string, bool) {
	if len(arg) < len(prefix) || !strings.EqualFold(arg[:len(prefix)], prefix) {
		return "", false
	}
	rest := strings.TrimSpace(arg[len(prefix):])
	if !strings.HasPrefix(rest, "<") {
		return "", false
	}
	end := strings.IndexByte(rest, '>')
	if end < 0 {
		return "", false
	}
	return rest[1:end], true
}

func headerAddresses(h mail.Header, name string) []string {
	list, err := h.AddressList(name)
	if err != nil {
		return nil
	}
	out := make([]string, len(list))
	for i, a := range list {
		out[i] = a.Address
	}
	return out
}

// mimeWordDecoder decodes RFC 2047 encoded words in headers.
type mimeWordDecoder struct{ mime.WordDecoder }

func (d *mimeWordDecoder) decode(s string) string {
	out, err := d.DecodeHeader(s)
	if err != nil {
		return s
	}
	return out
}
