package config

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
)

// hostnameRE is a DNS name: dot-separated labels of letters, digits and
// inner hyphens, each at most 63 characters.
var hostnameRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)

var lastLabelNumeric = regexp.MustCompile(`(^|\.)[0-9]+\.?$`)

// CheckListen refuses an address a listener could never take: not
// host:port, a port outside 0–65535 or not a number, or a host that is
// neither empty (every interface), an IP address nor a host name. Whether
// the port is free is for the listener to say.
func CheckListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not a host:port address (e.g. 127.0.0.1:9090)", addr)
	}
	p, err := strconv.ParseUint(port, 10, 64)
	if err != nil || p > 65535 {
		return fmt.Errorf("%q: port %q must be a number from 0 to 65535", addr, port)
	}
	if _, err := netip.ParseAddr(host); err == nil || host == "" {
		return nil
	}
	// A name whose last label is all digits would be an IPv4 address, and
	// is not one (256.1.1.1).
	if hostnameRE.MatchString(host) && len(host) <= 253 && !lastLabelNumeric.MatchString(host) {
		return nil
	}
	return fmt.Errorf("%q: host %q is neither an IP address nor a host name", addr, host)
}
