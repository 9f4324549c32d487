package web

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// The auth modes (docs/design.md, "The findings page").
const (
	AuthNone  = "none"
	AuthProxy = "proxy"
	AuthBasic = "basic"
)

// DefaultProxyHeader is the header a proxy names its signed-in user in.
const DefaultProxyHeader = "X-Forwarded-Email"

// Auth says who may see the pages and act on them.
type Auth struct {
	// Mode is AuthNone, AuthProxy or AuthBasic.
	Mode string
	// Header is the header the proxy sets to the signed-in user
	// (AuthProxy; default DefaultProxyHeader).
	Header string
	// TrustedProxies are the addresses or CIDRs (AuthProxy) whose requests
	// are believed; a request from anywhere else is refused.
	TrustedProxies []string
	// UsersFile is the file of users and bcrypt hashes (AuthBasic), read
	// once by New.
	UsersFile string
}

// user is who a request acts as: the proxy's user, "local" for AuthNone on
// loopback, or nobody (an empty name), who may look but not act.
type user struct {
	name string
}

// authenticator checks each request against the configured mode.
type authenticator struct {
	mode     string
	header   string
	prefixes []netip.Prefix
	basic    *basicAuth
}

func newAuthenticator(a Auth, now func() time.Time) (*authenticator, error) {
	au := &authenticator{mode: a.Mode, header: a.Header}
	switch a.Mode {
	case AuthNone:
	case AuthProxy:
		if au.header == "" {
			au.header = DefaultProxyHeader
		}
		if len(a.TrustedProxies) == 0 {
			return nil, fmt.Errorf("web: auth proxy needs at least one trusted proxy address")
		}
		for _, s := range a.TrustedProxies {
			p, err := parsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("web: trusted proxy %q: %w", s, err)
			}
			au.prefixes = append(au.prefixes, p)
		}
	case AuthBasic:
		var err error
		if au.basic, err = loadBasicAuth(a.UsersFile, now); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("web: unknown auth mode %q (none, proxy or basic)", a.Mode)
	}
	return au, nil
}

// parsePrefix reads a CIDR or a single address.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// remoteAddr is the request's peer address, invalid if unreadable.
func remoteAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// check returns the request's user, or the status and message refusing it.
// With AuthNone nobody is signed in: the user is "local" on loopback and
// empty elsewhere (which may see, but not act).
func (au *authenticator) check(r *http.Request) (user, int, string) {
	addr := remoteAddr(r)
	switch au.mode {
	case AuthBasic:
		return au.basic.check(r)
	case AuthProxy:
		trusted := false
		for _, p := range au.prefixes {
			if addr.IsValid() && p.Contains(addr) {
				trusted = true
				break
			}
		}
		if !trusted {
			return user{}, http.StatusForbidden, "requests are accepted only through the sign-on proxy"
		}
		name := strings.TrimSpace(r.Header.Get(au.header))
		if name == "" || strings.EqualFold(name, "anonymous") {
			return user{}, http.StatusUnauthorized, "not signed in"
		}
		return user{name: name}, 0, ""
	default:
		if addr.IsValid() && addr.IsLoopback() {
			return user{name: "local"}, 0, ""
		}
		return user{}, 0, ""
	}
}
