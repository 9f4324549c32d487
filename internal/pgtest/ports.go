package pgtest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// ClosedPort returns an address on loopback that nothing listens on (one
// just closed), for a command under test to listen on, or for a client
// to find nothing at. Its port lies below the kernel's ephemeral range
// (32768 and up on Linux), from which every listener on port 0 of the
// parallel tests takes its own: a port taken there and closed was seen
// handed at once to another test's fake Slack, which then answered a
// command's GET / with invalid_auth.
func ClosedPort(tb testing.TB) string {
	tb.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
		if err != nil {
			continue // taken: another
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	tb.Fatal("pgtest: no free port on loopback between 20000 and 32000 in 100 tries")
	return ""
}
