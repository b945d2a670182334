package email_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // the {SHA} scheme of mailpit's htpasswd file
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/email"
	"github.com/outbox-dev/outbox/internal/testtools"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// testCert writes a self-signed certificate for 127.0.0.1 and returns the
// files and a pool that trusts it.
func testCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "outbox test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// mailpit is a running mailpit server.
type mailpit struct {
	api  string
	smtp string
}

// startMailpit runs mailpit with extra flags on free loopback ports.
func startMailpit(t *testing.T, extra ...string) *mailpit {
	t.Helper()
	bin := testtools.Find(t, "mailpit", "MAILPIT_BIN")
	// A free port can be taken between the check and mailpit's listen:
	// try again with others.
	for try := 0; ; try++ {
		smtpPort, apiPort := freePort(t), freePort(t)
		args := append([]string{
			"--smtp", "127.0.0.1:" + strconv.Itoa(smtpPort),
			"--listen", "127.0.0.1:" + strconv.Itoa(apiPort),
			"--database", filepath.Join(t.TempDir(), "mailpit.db"),
			"--disable-version-check", "--quiet",
		}, extra...)
		cmd := exec.Command(bin, args...)
		out, err := os.CreateTemp(t.TempDir(), "mailpit-*.log")
		require.NoError(t, err)
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		m := &mailpit{api: fmt.Sprintf("http://127.0.0.1:%d", apiPort), smtp: fmt.Sprintf("127.0.0.1:%d", smtpPort)}
		if m.ready(exited) {
			return m
		}
		if try == 2 {
			log, _ := os.ReadFile(out.Name())
			t.Fatalf("mailpit did not start:\n%s", log)
		}
	}
}

func (m *mailpit) ready(exited <-chan struct{}) bool {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		resp, err := http.Get(m.api + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if c, err := net.Dial("tcp", m.smtp); err == nil {
					c.Close()
					return true
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

type mailpitAddress struct {
	Address string `json:"Address"`
}

type mailpitMessage struct {
	MessageID string           `json:"MessageID"`
	Subject   string           `json:"Subject"`
	From      mailpitAddress   `json:"From"`
	To        []mailpitAddress `json:"To"`
	Cc        []mailpitAddress `json:"Cc"`
}

// messages reads what mailpit received, through its API.
func (m *mailpit) messages(t *testing.T) (int, []mailpitMessage) {
	t.Helper()
	resp, err := http.Get(m.api + "/api/v1/messages?limit=500")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list struct {
		Total    int              `json:"total"`
		Messages []mailpitMessage `json:"messages"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	return list.Total, list.Messages
}

func addresses(list []mailpitAddress) []string {
	out := []string{}
	for _, a := range list {
		out = append(out, a.Address)
	}
	return out
}

// Every email the effect sends arrives in mailpit, a real SMTP server, with
// its recipients, subject and Message-ID: in the clear, over STARTTLS with
// AUTH, and over implicit TLS with AUTH. mailpit's refusals are classified.
func TestMailpitReceivesEveryEmail(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := testCert(t)
	authFile := filepath.Join(t.TempDir(), "auth")
	sum := sha1.Sum([]byte("s3cret-pass")) //nolint:gosec // the {SHA} htpasswd scheme
	require.NoError(t, os.WriteFile(authFile, []byte("outbox:{SHA}"+base64.StdEncoding.EncodeToString(sum[:])+"\n"), 0o600))
	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	cases := []struct {
		name  string
		flags []string
		mode  email.TLSMode
		user  string
	}{
		{"None", nil, email.TLSNone, ""},
		{"StartTLSWithAuth", []string{"--smtp-tls-cert", certFile, "--smtp-tls-key", keyFile, "--smtp-require-starttls", "--smtp-auth-file", authFile}, email.TLSStartTLS, "outbox"},
		{"ImplicitTLSWithAuth", []string{"--smtp-tls-cert", certFile, "--smtp-tls-key", keyFile, "--smtp-require-tls", "--smtp-auth-file", authFile}, email.TLSImplicit, "outbox"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mp := startMailpit(t, tc.flags...)
			effect, err := email.New(&email.Config{
				Addr: mp.smtp, From: "Shop <shop@example.com>", TLS: tc.mode, TLSConfig: tlsConfig,
				User: tc.user, Password: "s3cret-pass",
			})
			require.NoError(t, err)

			sent := []struct {
				key, args, subject string
				to, cc             []string
			}{
				{"obx_mp1", `{"to": ["ann@example.com"], "subject": "Order shipped", "text": "Hello"}`, "Order shipped", []string{"ann@example.com"}, nil},
				{"obx_mp2", `{"to": ["Bob <bob@example.com>", "cat@example.org"], "cc": ["dan@example.net"], "subject": "Reçu n° 42", "text": "t", "html": "<p>h</p>", "reply_to": "help@example.com"}`, "Reçu n° 42", []string{"bob@example.com", "cat@example.org"}, []string{"dan@example.net"}},
				{"obx_mp3", `{"to": ["eve@example.com"], "subject": "HTML only", "html": "<b>hi</b>"}`, "HTML only", []string{"eve@example.com"}, nil},
			}
			for _, s := range sent {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				raw, err := effect.Execute(ctx, &effects.Request{Args: json.RawMessage(s.args), Attempt: 1, ProviderKey: s.key})
				cancel()
				require.NoError(t, err, "sending %s", s.key)
				var res email.Result
				require.NoError(t, json.Unmarshal(raw, &res))
				require.Equal(t, s.key+"@example.com", res.MessageID)
			}

			var (
				total int
				got   []mailpitMessage
			)
			require.Eventually(t, func() bool {
				total, got = mp.messages(t)
				return total >= len(sent)
			}, 10*time.Second, 50*time.Millisecond)
			require.Equal(t, len(sent), total, "mailpit's count of messages received")
			byID := map[string]mailpitMessage{}
			for _, m := range got {
				byID[m.MessageID] = m
			}
			for _, s := range sent {
				m, ok := byID[s.key+"@example.com"]
				require.True(t, ok, "Message-ID %s@example.com not in mailpit: %+v", s.key, got)
				require.Equal(t, s.subject, m.Subject)
				require.Equal(t, "shop@example.com", m.From.Address)
				require.ElementsMatch(t, s.to, addresses(m.To))
				require.ElementsMatch(t, append([]string{}, s.cc...), addresses(m.Cc))
			}
		})
	}

	t.Run("WrongPasswordIsNotSent", func(t *testing.T) {
		t.Parallel()
		mp := startMailpit(t, "--smtp-tls-cert", certFile, "--smtp-tls-key", keyFile, "--smtp-require-starttls", "--smtp-auth-file", authFile)
		effect, err := email.New(&email.Config{Addr: mp.smtp, From: "shop@example.com", TLSConfig: tlsConfig, User: "outbox", Password: "wrong-pass"})
		require.NoError(t, err)
		_, err = effect.Execute(context.Background(), &effects.Request{Args: json.RawMessage(okArgs), Attempt: 1, ProviderKey: "obx_mp4"})
		require.Error(t, err)
		class, _ := effects.Classify(err)
		require.Equal(t, effects.ClassNotSent, class, "error: %v", err)
		require.NotContains(t, err.Error(), "wrong-pass")
		total, _ := mp.messages(t)
		require.Equal(t, 0, total)
	})

	t.Run("RefusedRecipientIsPermanent", func(t *testing.T) {
		t.Parallel()
		mp := startMailpit(t, "--smtp-allowed-recipients", `@example\.com$`)
		effect, err := email.New(&email.Config{Addr: mp.smtp, From: "shop@example.com", TLS: email.TLSNone})
		require.NoError(t, err)
		_, err = effect.Execute(context.Background(), &effects.Request{
			Args: json.RawMessage(`{"to": ["someone@elsewhere.org"], "subject": "s", "text": "t"}`), Attempt: 1, ProviderKey: "obx_mp5"})
		require.Error(t, err)
		class, code := effects.Classify(err)
		require.Equal(t, effects.ClassPermanent, class, "error: %v", err)
		require.Equal(t, "smtp_rejected", code)
		require.NotContains(t, err.Error(), "someone@elsewhere.org")
		total, _ := mp.messages(t)
		require.Equal(t, 0, total)
	})
}
