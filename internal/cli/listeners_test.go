package cli_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/testrun"
)

// With OUTBOX_ADMIN_ADDR, the public port serves only /v1/ and /mcp, and
// the admin port /healthz, /readyz, /metrics and River UI. With
// OUTBOX_TLS_CERT_FILE and OUTBOX_TLS_KEY_FILE, the public port speaks TLS
// only.
func TestServeAdminListenerAndTLS(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	certFile, keyFile, pool := selfSignedCert(t)
	const token = "listeners-token-0123456"
	srv := testrun.Serve(t, with(bundle.env,
		"OUTBOX_API_TOKENS", token+":default",
		"OUTBOX_ADMIN_ADDR", "127.0.0.1:0",
		"OUTBOX_TLS_CERT_FILE", certFile, "OUTBOX_TLS_KEY_FILE", keyFile))
	admin := srv.AdminAddr()
	require.NotEmpty(t, admin)
	require.NotEqual(t, srv.Addr, admin)

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	get := func(c *http.Client, url string, token string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		require.NoError(t, err, url)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}

	// Public, over TLS: the API only.
	require.Equal(t, http.StatusOK, get(client, "https://"+srv.Addr+"/v1/intents", token))
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/riverui/"} {
		require.Equal(t, http.StatusNotFound, get(client, "https://"+srv.Addr+path, ""), path)
	}
	// Plain HTTP on the TLS port is refused.
	resp, err := http.Get("http://" + srv.Addr + "/v1/intents") //nolint:noctx // a refusal
	if err == nil {
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.NoError(t, resp.Body.Close())
	}

	// Admin, plain: the operators' paths only.
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/riverui/"} {
		require.Equal(t, http.StatusOK, get(http.DefaultClient, "http://"+admin+path, ""), path)
	}
	require.Equal(t, http.StatusNotFound, get(http.DefaultClient, "http://"+admin+"/v1/intents", token))

	require.Equal(t, 0, srv.Stop())
	require.NotContains(t, srv.Logs(), token)
}

// A certificate that cannot be loaded, or one file without the other, stops
// serve at start, naming the variable.
func TestServeRefusesTLS(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	certFile, keyFile, _ := selfSignedCert(t)
	base := with(bundle.env, "OUTBOX_API_TOKENS", "listeners-token-0123456:default", "OUTBOX_HTTP_ADDR", "127.0.0.1:0")

	res := runEnv(t, with(base, "OUTBOX_TLS_CERT_FILE", certFile), nil, "serve")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "OUTBOX_TLS_KEY_FILE: not set")

	res = runEnv(t, with(base, "OUTBOX_TLS_CERT_FILE", filepath.Join(t.TempDir(), "missing.pem"), "OUTBOX_TLS_KEY_FILE", keyFile), nil, "serve")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "OUTBOX_TLS_CERT_FILE: expected the path of a readable PEM certificate file")

	// The key of another certificate.
	_, otherKey, _ := selfSignedCert(t)
	res = runEnv(t, with(base, "OUTBOX_TLS_CERT_FILE", certFile, "OUTBOX_TLS_KEY_FILE", otherKey), nil, "serve")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "error loading the TLS certificate and key")
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key, and returns
// their paths and a pool that trusts the certificate.
func selfSignedCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "outbox test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
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
