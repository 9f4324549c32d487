package stripesim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Faults are the failures the server injects; the zero value injects none.
//
// Every "Every" counts the GET requests that passed authentication (and
// named an account the key reaches) since the faults were set: all of them
// for the key's faults (SetFaults), one account's for that account's
// (SetAccountFaults); so the first failure of RateLimitEvery: 3 is the
// third request. Probabilistic faults are a hash of Seed and that count,
// so a sequential reader meets the same failures on every run with a seed;
// concurrent readers meet the same number, on whichever request arrives
// at that place.
type Faults struct {
	Seed uint64

	// RateLimitEvery answers every Nth request with 429 rate_limit, as
	// Stripe's rate limiter does; RateLimitP does so with probability p.
	RateLimitEvery int
	RateLimitP     float64

	// ServerErrorEvery answers every Nth request with 500 api_error;
	// ServerErrorP does so with probability p.
	ServerErrorEvery int
	ServerErrorP     float64

	// DropEvery drops the connection of every Nth successful response
	// after its headers and half its body; DropP does so with probability p.
	DropEvery int
	DropP     float64

	// FailList names a list ("refunds", "events", …) every request to which
	// answers 500, forever, once FailListAfter requests to it succeeded
	// (so that a reader fails mid-list, holding a cursor).
	FailList      string
	FailListAfter int

	// Malformed answers 200 with a body of that Shape instead of the one
	// asked for, as a broken proxy or a faulty deploy at the provider
	// might: every MalformedEvery-th request (0 or 1: every one, a fault
	// that persists) to MalformedList ("charges", "events", …; "" for
	// every list) that the shape applies to. The count is of those
	// requests only (so that "every 2nd" is every other page of that
	// list, whatever the other lists do), from when the faults were set.
	// The page shapes (ShapeNoData, ShapeNullData, ShapeNoHasMore,
	// ShapeNotList) apply to list pages; ShapeEmpty, ShapeTruncated and
	// Without apply to list pages and to retrievals by id alike. A page
	// or an object the shape would not change (Without a member nothing
	// on it has) is served as it is and not counted as malformed.
	// SetFaults panics on a shape it does not know.
	Malformed      Shape
	MalformedList  string
	MalformedEvery int

	// Latency delays every response (errors included).
	Latency time.Duration

	// RateLimit caps the requests per second the server answers (a token
	// bucket of RateBurst tokens, default max(1, RateLimit)); the excess is
	// answered 429 rate_limit, as Stripe's limiter does. Zero: no cap.
	RateLimit float64
	RateBurst int

	// ShouldRetry is the Stripe-Should-Retry header sent with injected 429s
	// and 500s: "" sends none, "true" or "false" send that. Stripe sends
	// none with a rate-limit 429 (stripe-go obeys the header before the
	// status code and does not retry rate limits, so it cannot be "true").
	ShouldRetry string
}

// Salts keep the probabilistic faults independent of each other.
const (
	saltRateLimit uint64 = iota + 1
	saltServerError
	saltDrop
)

// hit decides whether the nth request meets a fault.
func (f Faults) hit(n uint64, every int, p float64, salt uint64) bool {
	if every > 0 && n%uint64(every) == 0 {
		return true
	}
	if p <= 0 {
		return false
	}
	// splitmix64 over (seed, salt, n): a stateless, reproducible coin.
	x := f.Seed ^ salt*0x9e3779b97f4a7c15 ^ n*0xbf58476d1ce4e5b9
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11)/float64(1<<53) < p
}

// faultState is one set of faults with its rate limiter and its counts
// since it was set.
type faultState struct {
	f            Faults
	lim          *rate.Limiter
	seq          atomic.Uint64 // authenticated GETs it applied to
	failSeq      atomic.Int64  // requests to FailList
	malformedSeq atomic.Uint64 // requests Faults.Malformed applies to
}

func newFaultState(f Faults) *faultState {
	if !f.Malformed.valid() {
		panic(fmt.Sprintf("stripesim: unknown Malformed shape %q", f.Malformed))
	}
	st := &faultState{f: f}
	if f.RateLimit > 0 {
		burst := f.RateBurst
		if burst <= 0 {
			burst = max(1, int(math.Ceil(f.RateLimit)))
		}
		st.lim = rate.NewLimiter(rate.Limit(f.RateLimit), burst)
	}
	return st
}

// SetFaults replaces the faults injected into every request, whatever
// account it names, and restarts their request count and rate limiter:
// these are the key's, and Stripe's limits are per key, so a RateLimit here
// is one budget that all accounts share.
func (s *Server) SetFaults(f Faults) {
	st := newFaultState(f)
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.keyFaults = st
}

// SetAccountFaults replaces the faults injected into the requests for one
// account ("" the platform's own, else the Stripe-Account a request names),
// with counts and a rate limiter of their own, so that one account can
// rate-limit, fail or answer malformed pages while the others answer. A
// request meets the key's faults (SetFaults) first, then its account's;
// latencies add up. The zero Faults removes the account's faults.
func (s *Server) SetAccountFaults(account string, f Faults) {
	st := newFaultState(f)
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if f == (Faults{}) {
		delete(s.acctFaults, account)
		return
	}
	s.acctFaults[account] = st
}

// currentFaults are the fault states a request for account meets, the
// key's first.
func (s *Server) currentFaults(account string) []*faultState {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if st, ok := s.acctFaults[account]; ok {
		return []*faultState{s.keyFaults, st}
	}
	return []*faultState{s.keyFaults}
}

// Stats counts what the server was asked and what it answered.
type Stats struct {
	Requests int            // every request
	Paths    map[string]int // requests per URL path
	Pages    map[string]int // list pages delivered (200, not dropped) per list name
	Objects  map[string]int // list entries delivered per list name

	RateLimited  int // 429s served, injected or from RateLimit
	ServerErrors int // 500s served, injected or from FailList
	Dropped      int // connections dropped mid-response
	Malformed    int // 200s served in a malformed shape (Faults.Malformed)
	Unauthorized int // 401s
	BadRequests  int // other 4xx: bad parameters, unknown ids and paths

	// Writes counts refused non-GET requests; WriteRequests names the
	// first hundred ("POST /v1/refunds").
	Writes        int
	WriteRequests []string

	// Accounts holds the same counters per account ("" the platform's own)
	// for the requests that named the platform or a connected account;
	// the counters above are the totals. Their own Accounts is nil.
	Accounts map[string]Stats
}

// Reads counts what the server was asked to hand out: list entries
// delivered (objects and events) and requests for one object by id
// (/v1/charges/ch_…).
func (st Stats) Reads() int {
	n := 0
	for _, v := range st.Objects {
		n += v
	}
	for path, v := range st.Paths {
		if strings.Count(path, "/") == 3 {
			n += v
		}
	}
	return n
}

func newStats() Stats {
	st := newAccountStats()
	st.Accounts = map[string]Stats{}
	return st
}

func newAccountStats() Stats {
	return Stats{Paths: map[string]int{}, Pages: map[string]int{}, Objects: map[string]int{}}
}

func (st Stats) clone() Stats {
	st.Paths, st.Pages, st.Objects = maps.Clone(st.Paths), maps.Clone(st.Pages), maps.Clone(st.Objects)
	st.WriteRequests = slices.Clone(st.WriteRequests)
	if st.Accounts != nil {
		accts := make(map[string]Stats, len(st.Accounts))
		for id, a := range st.Accounts {
			accts[id] = a.clone()
		}
		st.Accounts = accts
	}
	return st
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return s.stats.clone()
}

// ResetStats zeroes the counters.
func (s *Server) ResetStats() {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	s.stats = newStats()
}

// count counts into the totals and, when account is the platform ("") or
// a connected account, into that account's counters.
func (s *Server) count(account string, f func(*Stats)) {
	known := s.knownAccount(account)
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	f(&s.stats)
	if known {
		st, ok := s.stats.Accounts[account]
		if !ok {
			st = newAccountStats()
		}
		f(&st)
		s.stats.Accounts[account] = st
	}
}

// TB is the part of testing.TB that AssertNoWrites needs; declared here so
// that this package does not import "testing".
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// AssertNoWrites fails tb if any write (any non-GET request) reached the
// server: the reconciler must never write to the provider.
func (s *Server) AssertNoWrites(tb TB) {
	tb.Helper()
	if st := s.Stats(); st.Writes != 0 {
		tb.Errorf("stripesim: %d write request(s) reached the provider, want none: %v", st.Writes, st.WriteRequests)
	}
}
