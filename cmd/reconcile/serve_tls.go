package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"reconcile/internal/config"
	"reconcile/internal/web"
)

// serveTLS is the TLS configuration of serve.tls_cert_file and
// serve.tls_key_file, nil without them (docs/design.md, "The findings
// page"). The pair is read once, at start: a missing or mismatched file
// refuses to start.
func serveTLS(s config.ServeConfig) (*tls.Config, error) {
	if s.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("serve: serve.tls_cert_file %s, serve.tls_key_file %s: %w", s.TLSCertFile, s.TLSKeyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// serveOn serves srv on ln, over TLS when srv has a TLS configuration, and
// returns the scheme the page is at alongside a function that serves.
func serveOn(srv *http.Server, ln net.Listener) (scheme string, serve func() error) {
	if srv.TLSConfig != nil {
		return "https", func() error { return srv.ServeTLS(ln, "", "") }
	}
	return "http", func() error { return srv.Serve(ln) }
}

// warnClearPasswords says, once, that passwords would cross the network in
// clear: auth basic without TLS on an address others reach. It warns
// rather than refuses, since TLS may end at a load balancer in front.
func warnClearPasswords(log *slog.Logger, s config.ServeConfig) {
	if s.Auth == web.AuthBasic && s.TLSCertFile == "" && !loopback(s.Listen) {
		log.Warn("serve.auth basic without serve.tls_cert_file on a non-loopback address: passwords cross the network in clear unless TLS ends in front of serve",
			"listen", s.Listen)
	}
}
