package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"reconcile/internal/pgtest"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// into dir and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "reconcile test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return certFile, keyFile, pool
}

// basicConfig writes a users file with alice (password "s3cret") and a
// configuration for serve.auth basic with extra serve keys; it returns the
// configuration's path.
func basicConfig(t *testing.T, dir string, extra ...string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(users, []byte("basic_auth_users:\n  alice: "+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "reconcile.yaml")
	body := "serve:\n  auth: basic\n  users_file: " + users + "\n"
	for _, e := range extra {
		body += "  " + e + "\n"
	}
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// serve with a certificate speaks HTTPS only, says https:// where it
// serves, and with auth basic lets alice in, to the pages and /metrics,
// and nobody else.
func TestServeBasicOverTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	cfg := basicConfig(t, dir, "tls_cert_file: "+certFile, "tls_key_file: "+keyFile)
	addr, resp, _, stop := serving(t, func(k string) string { return e.vars[k] }, "serve", "--config", cfg)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS listener = %d, want 400", resp.StatusCode)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	get := func(user, pw string, path ...string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/"+strings.Join(path, ""), nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, pw)
		}
		r, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET https://%s/: %v", addr, err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, _ := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("GET over TLS without credentials = %d, want 401", code)
	}
	if code, _ := get("alice", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("GET over TLS with a wrong password = %d, want 401", code)
	}
	if code, body := get("alice", "s3cret"); code != http.StatusOK || !strings.Contains(body, "Signed in as alice") {
		t.Errorf("GET over TLS as alice = %d:\n%s", code, body)
	}
	if code, body := get("alice", "s3cret", "metrics"); code != http.StatusOK || !strings.Contains(body, "\nreconcile_outbox_backlog 0\n") {
		t.Errorf("GET /metrics over TLS as alice = %d:\n%s", code, body)
	}
	if code, _ := get("", "", "metrics"); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics over TLS without credentials = %d, want 401", code)
	}
	stdout, err := stop()
	if err != nil {
		t.Errorf("serve after its context ended = %v", err)
	}
	if !strings.Contains(stdout, "https://"+addr+"/ (auth basic)") {
		t.Errorf("serve printed %q, want its https:// address", stdout)
	}
}

// What serve cannot use refuses to start, as a usage error: a users file
// that is missing, a certificate without its key, one that does not load.
func TestServeStartErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	certFile, _, _ := selfSigned(t, dir)
	otherDir := t.TempDir()
	_, otherKey, _ := selfSigned(t, otherDir)
	noUsers := basicConfig(t, t.TempDir())
	if err := os.Remove(filepath.Join(filepath.Dir(noUsers), "users.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, cfg, want string
	}{
		{"missing users file", noUsers, "users.yaml"},
		{"certificate alone", basicConfig(t, t.TempDir(), "tls_cert_file: "+certFile), "give both"},
		{"key of another certificate", basicConfig(t, t.TempDir(), "tls_cert_file: "+certFile, "tls_key_file: "+otherKey), "serve.tls_cert_file"},
	} {
		err := run(t.Context(), []string{"serve", "--config", tt.cfg, "--listen", "127.0.0.1:0"}, func(k string) string { return e.vars[k] }, io.Discard, io.Discard)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: serve = %v, want a usage error saying %q", tt.name, err, tt.want)
		}
	}
}

// With auth basic serve listens on an address others reach; without TLS it
// says once that passwords would cross in clear.
func TestServeBasicNonLoopbackWarns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := basicConfig(t, t.TempDir())
	_, port, err := net.SplitHostPort(pgtest.ClosedPort(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--config", cfg, "--listen", "0.0.0.0:" + port},
			func(k string) string { return e.vars[k] }, &stdout, &stderr)
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://127.0.0.1:" + port + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET / without credentials = %d, want 401", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve on 0.0.0.0 with auth basic never answered: %v", err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after its context ended = %v", err)
	}
	if !strings.Contains(stdout.String(), "http://0.0.0.0:"+port+"/") && !strings.Contains(stdout.String(), "http://[::]:"+port+"/") {
		t.Errorf("serve printed %q, want its address on every interface", stdout.String())
	}
	if n := strings.Count(stderr.String(), "passwords cross the network in clear"); n != 1 {
		t.Errorf("serve warned %d times about clear passwords, want once:\n%s", n, stderr.String())
	}
}
