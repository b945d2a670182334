// Package email is the effect that sends an email over SMTP, composed and
// sent with github.com/wneessen/go-mail. The message's Message-ID is derived
// from the intent's provider key, so every attempt of one intent sends the
// same Message-ID, and a recipient's mail system can spot a copy.
//
// Its guarantee is at_most_once: plain SMTP can neither dedupe on a key nor
// be asked whether a message was taken, so an attempt whose outcome was lost
// ends unknown and is never sent again without an operator.
//
// # Errors
//
//   - Not sent: the connection was refused or failed, or anything went wrong
//     before the message data was sent in full (greeting, STARTTLS, AUTH,
//     MAIL FROM, RCPT TO, DATA, or the data itself: a server takes a message
//     only once it has its final "."), and any 4xx reply, which says
//     "not taken, try later".
//   - Permanent: a 5xx reply to MAIL FROM, RCPT TO, DATA or to the data: the
//     server refused this message (an unknown mailbox, a rejected sender).
//   - Ambiguous: a failure after the data was sent and before the final
//     reply was read (a timeout, a reset): the server may have taken it.
//
// Greeting, STARTTLS and AUTH failures are not sent whatever their code:
// they are about the connection or the configuration, not this message, and
// an operator who fixes them should see the intent go through.
//
// Messages never quote an address: the server's replies are stored with
// addresses redacted.
package email
