package stripesim

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// apiErr is an error response in Stripe's shape.
type apiErr struct {
	status            int
	typ, code, param  string
	msg               string
	shouldRetryHeader string
}

func invalid(param, code, msg string) *apiErr {
	return &apiErr{status: http.StatusBadRequest, typ: "invalid_request_error", code: code, param: param, msg: msg}
}

// ServeHTTP answers one request of Stripe's API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := fmt.Sprintf("req_%012d", s.seq.Add(1))
	// stripe-go sends the header trimmed; "" is the platform's own data.
	acct := strings.TrimSpace(r.Header.Get("Stripe-Account"))
	s.count(acct, func(st *Stats) {
		st.Requests++
		st.Paths[r.URL.Path]++
	})
	if r.Method != http.MethodGet {
		s.count(acct, func(st *Stats) {
			st.Writes++
			if len(st.WriteRequests) < 100 {
				st.WriteRequests = append(st.WriteRequests, r.Method+" "+r.URL.Path)
			}
		})
		s.writeError(w, reqID, acct, &apiErr{status: http.StatusForbidden, typ: "invalid_request_error",
			msg: fmt.Sprintf("This key is read-only: %s %s is refused (stripesim serves reads only; the reconciler must never write to the provider).", r.Method, r.URL.Path)})
		return
	}
	states := s.currentFaults(acct)
	var latency time.Duration
	for _, st := range states {
		latency += st.f.Latency
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if e := s.authenticate(r); e != nil {
		s.writeError(w, reqID, acct, e)
		return
	}
	if !s.knownAccount(acct) {
		s.writeError(w, reqID, acct, s.accountInvalid(acct))
		return
	}
	ns := make([]uint64, len(states)) // this request's place in each state's count
	for i, st := range states {
		f := st.f
		ns[i] = st.seq.Add(1)
		if st.lim != nil && !st.lim.Allow() || f.hit(ns[i], f.RateLimitEvery, f.RateLimitP, saltRateLimit) {
			s.writeError(w, reqID, acct, &apiErr{status: http.StatusTooManyRequests, typ: "invalid_request_error", code: "rate_limit",
				msg: "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.", shouldRetryHeader: f.ShouldRetry})
			return
		}
		if f.hit(ns[i], f.ServerErrorEvery, f.ServerErrorP, saltServerError) {
			s.writeError(w, reqID, acct, serverError(f))
			return
		}
	}

	rest, _ := strings.CutPrefix(r.URL.Path, "/v1/")
	name, id, hasID := strings.Cut(rest, "/")
	if !strings.HasPrefix(r.URL.Path, "/v1/") || !s.knownList(name) || hasID && (id == "" || strings.Contains(id, "/")) {
		s.writeError(w, reqID, acct, &apiErr{status: http.StatusNotFound, typ: "invalid_request_error",
			msg: fmt.Sprintf("Unrecognized request URL (GET: %s). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.", r.URL.Path)})
		return
	}
	for _, st := range states {
		if !hasID && name == st.f.FailList && st.failSeq.Add(1) > int64(st.f.FailListAfter) {
			s.writeError(w, reqID, acct, serverError(st.f))
			return
		}
	}
	var body []byte
	var entries int
	var e *apiErr
	if hasID {
		body, e = s.retrieve(acct, name, id)
	} else {
		body, entries, e = s.list(acct, name, r.URL.Query())
	}
	if e != nil {
		s.writeError(w, reqID, acct, e)
		return
	}
	for _, st := range states {
		if bad, ok := st.malform(name, !hasID, body); ok {
			s.count(acct, func(st *Stats) { st.Malformed++ })
			writeBody(w, reqID, http.StatusOK, bad)
			return
		}
	}
	for i, st := range states {
		if st.f.hit(ns[i], st.f.DropEvery, st.f.DropP, saltDrop) && s.drop(w, reqID, acct, body) {
			return
		}
	}
	if !hasID {
		// Counted once delivered, so that a reader that re-reads a page it
		// already had shows as more entries served than it returned.
		s.count(acct, func(st *Stats) {
			st.Pages[name]++
			st.Objects[name] += entries
		})
	}
	writeBody(w, reqID, http.StatusOK, body)
}

func serverError(f Faults) *apiErr {
	return &apiErr{status: http.StatusInternalServerError, typ: "api_error",
		msg: "An unknown error occurred", shouldRetryHeader: f.ShouldRetry}
}

func (s *Server) knownList(name string) bool { return slices.Contains(listNames, name) }

// knownAccount reports whether acct is the platform ("") or a connected
// account.
func (s *Server) knownAccount(acct string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.books[acct]
	return ok
}

// authenticate accepts the key as a bearer token, as stripe-go sends it, or
// as the basic-auth user name, as curl -u sends it.
func (s *Server) authenticate(r *http.Request) *apiErr {
	auth := r.Header.Get("Authorization")
	given, bearer := strings.CutPrefix(auth, "Bearer ")
	if !bearer {
		given, _, _ = r.BasicAuth()
	}
	if given != "" && given == s.apiKey {
		return nil
	}
	e := &apiErr{status: http.StatusUnauthorized, typ: "invalid_request_error"}
	if given == "" {
		e.msg = "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/."
	} else {
		e.msg = "Invalid API Key provided: " + maskKey(given)
	}
	return e
}

// maskKey shows a key as Stripe's 401 does: its prefix and last four
// characters.
func maskKey(k string) string {
	if len(k) < 12 {
		return strings.Repeat("*", len(k))
	}
	prefix := ""
	if i := strings.LastIndexByte(k[:min(len(k)-4, 8)], '_'); i >= 0 {
		prefix = k[:i+1]
	}
	return prefix + strings.Repeat("*", len(k)-len(prefix)-4) + k[len(k)-4:]
}

func (s *Server) writeError(w http.ResponseWriter, reqID, acct string, e *apiErr) {
	s.count(acct, func(st *Stats) {
		switch {
		case e.status == http.StatusTooManyRequests:
			st.RateLimited++
		case e.status >= 500:
			st.ServerErrors++
		case e.status == http.StatusUnauthorized:
			st.Unauthorized++
		case e.status == http.StatusForbidden && e.code == "":
			// a refused write, counted as such
		default:
			st.BadRequests++
		}
	})
	if e.shouldRetryHeader != "" {
		w.Header().Set("Stripe-Should-Retry", e.shouldRetryHeader)
	}
	writeBody(w, reqID, e.status, renderError(e.typ, e.code, e.param, e.msg))
}

func writeBody(w http.ResponseWriter, reqID string, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Request-Id", reqID)
	h.Set("Stripe-Version", apiVersion)
	w.WriteHeader(status)
	_, _ = w.Write(body) // the client went away: nothing to do
}

// drop sends the status line, the headers (announcing the whole body) and
// half the body, then closes the connection, as a connection reset
// mid-response does.
func (s *Server) drop(w http.ResponseWriter, reqID, acct string, body []byte) bool {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return false
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return false
	}
	defer conn.Close()
	s.count(acct, func(st *Stats) { st.Dropped++ })
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nRequest-Id: %s\r\n\r\n", len(body), reqID)
	_, _ = buf.Write(body[:len(body)/2])
	_ = buf.Flush()
	return true
}

// rlockSorted read-locks s.mu with every list of every book sorted.
func (s *Server) rlockSorted() {
	for {
		s.mu.RLock()
		dirty := false
		for _, b := range s.books {
			for _, l := range b.lists {
				dirty = dirty || l.dirty
			}
		}
		if !dirty {
			return
		}
		s.mu.RUnlock()
		s.mu.Lock()
		for _, b := range s.books {
			for _, l := range b.lists {
				if l.dirty {
					l.sort()
				}
			}
		}
		s.mu.Unlock()
	}
}

// singular names one object of a list in Stripe's messages.
func singular(name string) string {
	switch name {
	case ListPaymentIntents:
		return "payment_intent"
	case ListEvents:
		return "event"
	case ListAccounts:
		return "account"
	}
	return strings.TrimSuffix(name, "s")
}

// retrieve answers /v1/<name>/<id> for account acct. An account is the
// platform's to retrieve, or a connected account's own; any other is
// refused as Stripe refuses it.
func (s *Server) retrieve(acct, name, id string) ([]byte, *apiErr) {
	s.rlockSorted()
	defer s.mu.RUnlock()
	missing := &apiErr{status: http.StatusNotFound, typ: "invalid_request_error", code: "resource_missing", param: "id",
		msg: fmt.Sprintf("No such %s: '%s'", singular(name), id)}
	b := s.books[acct]
	if name == ListEvents || name == ListAccounts {
		l := b.lists[name]
		if name == ListAccounts {
			l = s.books[""].lists[ListAccounts]
			if acct != "" && id != acct {
				return nil, s.accountInvalid(id)
			}
		}
		i, ok := l.index(id)
		if !ok && name == ListAccounts {
			return nil, s.accountInvalid(id)
		}
		if !ok {
			return nil, missing
		}
		return append(slices.Clip(l.entries[i].body), '\n'), nil
	}
	e, ok := b.objects[id]
	if !ok || string(e.obj.Kind) != singular(name) {
		return nil, missing
	}
	return append(slices.Clip(e.body), '\n'), nil
}

// listQuery is a parsed list request.
type listQuery struct {
	limit         int
	after, before string
	lo, hi        int64 // created bounds, inclusive
	types         []string
	glob          string // the type parameter, maybe with one '*'
	charge        string
	paymentIntent string
	customer      string
}

// listParams are the parameters each list accepts beyond the common ones;
// anything else is refused, as Stripe refuses an unknown parameter.
func listParams(name string) []string {
	switch name {
	case ListCharges:
		return []string{"customer", "payment_intent", "transfer_group"}
	case ListRefunds:
		return []string{"charge", "payment_intent"}
	case ListPaymentIntents:
		return []string{"customer"}
	case ListEvents:
		return []string{"type", "delivery_success"}
	}
	return nil
}

func parseListQuery(name string, q url.Values) (listQuery, *apiErr) {
	lq := listQuery{limit: 10, lo: minInt64, hi: maxInt64}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range q {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		v := q.Get(k)
		switch {
		case k == "limit":
			n, err := strconv.Atoi(v)
			if err != nil {
				return lq, invalid(k, "parameter_invalid_integer", fmt.Sprintf("Invalid integer: %s", v))
			}
			if n < 1 || n > 100 {
				return lq, invalid(k, "parameter_invalid_integer",
					fmt.Sprintf("Invalid limit: must be between 1 and 100 (got %d)", n))
			}
			lq.limit = n
		case k == "starting_after":
			lq.after = v
		case k == "ending_before":
			lq.before = v
		case k == "created" || strings.HasPrefix(k, "created["):
			t, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return lq, invalid(k, "parameter_invalid_integer", fmt.Sprintf("Invalid integer: %s", v))
			}
			switch k {
			case "created":
				lq.lo, lq.hi = max(lq.lo, t), min(lq.hi, t)
			case "created[gte]":
				lq.lo = max(lq.lo, t)
			case "created[gt]":
				lq.lo = max(lq.lo, t+1)
			case "created[lte]":
				lq.hi = min(lq.hi, t)
			case "created[lt]":
				lq.hi = min(lq.hi, t-1)
			default:
				return lq, invalid(k, "parameter_unknown", "Received unknown parameter: "+k)
			}
		case k == "expand[]" || strings.HasPrefix(k, "expand["):
			// Expansion is not simulated: references stay ids.
		case name == ListEvents && (k == "types[]" || strings.HasPrefix(k, "types[") && strings.HasSuffix(k, "]")):
			for _, t := range q[k] {
				if strings.Contains(t, "*") {
					return lq, invalid(k, "parameter_invalid_string", fmt.Sprintf(
						"Invalid %s: wildcards are not allowed in types; pass exact event names, or one wildcard family in type (%q)", k, t))
				}
				lq.types = append(lq.types, t)
			}
		case slices.Contains(listParams(name), k):
			switch k {
			case "type":
				if strings.Count(v, "*") > 1 {
					return lq, invalid(k, "parameter_invalid_string", fmt.Sprintf("Invalid type: at most one wildcard (%q)", v))
				}
				lq.glob = v
			case "charge":
				lq.charge = v
			case "payment_intent":
				lq.paymentIntent = v
			case "customer":
				lq.customer = v
			}
		default:
			return lq, invalid(k, "parameter_unknown", "Received unknown parameter: "+k)
		}
	}
	if lq.glob != "" && len(lq.types) > 0 {
		return lq, invalid("types", "parameter_invalid_string", "You may pass either type or types, but not both.")
	}
	if len(lq.types) > 20 {
		return lq, invalid("types", "parameter_invalid_array", fmt.Sprintf("Invalid array: types takes at most 20 event names (got %d)", len(lq.types)))
	}
	if lq.after != "" && lq.before != "" {
		return lq, invalid("ending_before", "parameter_invalid_string", "You may pass either starting_after or ending_before, but not both.")
	}
	return lq, nil
}

const (
	minInt64 = -1 << 63
	maxInt64 = 1<<63 - 1
)

func (lq listQuery) match(e *entry) bool {
	if len(lq.types) > 0 && !slices.Contains(lq.types, e.typ) {
		return false
	}
	if lq.glob != "" && !globMatch(lq.glob, e.typ) {
		return false
	}
	return (lq.charge == "" || e.charge == lq.charge) &&
		(lq.paymentIntent == "" || e.paymentIntent == lq.paymentIntent) &&
		(lq.customer == "" || e.customer == lq.customer)
}

// globMatch matches a pattern with at most one '*' standing for any run of
// characters ("charge.*", "*.succeeded").
func globMatch(pattern, s string) bool {
	prefix, suffix, wild := strings.Cut(pattern, "*")
	if !wild {
		return pattern == s
	}
	return len(s) >= len(prefix)+len(suffix) && strings.HasPrefix(s, prefix) && strings.HasSuffix(s, suffix)
}

func (s *Server) list(acct, name string, q url.Values) ([]byte, int, *apiErr) {
	lq, e := parseListQuery(name, q)
	if e != nil {
		return nil, 0, e
	}
	s.rlockSorted()
	page, more, e := s.books[acct].lists[name].page(lq, singular(name))
	var b bytes.Buffer
	if e == nil {
		size := 64
		for _, p := range page {
			size += len(p.body) + 1
		}
		b.Grow(size)
		b.WriteString(`{"object":"list","data":[`)
		for i, p := range page {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(p.body)
		}
		fmt.Fprintf(&b, `],"has_more":%t,"url":"/v1/%s"}`+"\n", more, name)
	}
	s.mu.RUnlock()
	if e != nil {
		return nil, 0, e
	}
	return b.Bytes(), len(page), nil
}

// page selects one page of l for lq, newest first, and says whether more
// entries lie beyond it in the direction of travel.
func (l *list) page(lq listQuery, what string) ([]*entry, bool, *apiErr) {
	es := l.entries
	// Entries are newest first: [i0, i1) is the created range.
	i0 := firstIndex(es, func(e *entry) bool { return e.created <= lq.hi })
	i1 := firstIndex(es, func(e *entry) bool { return e.created < lq.lo })
	var out []*entry
	if lq.before != "" {
		p, ok := l.index(lq.before)
		if !ok {
			return nil, false, invalid("ending_before", "resource_missing", fmt.Sprintf("No such %s: '%s'", what, lq.before))
		}
		for i := min(p, i1) - 1; i >= i0 && len(out) <= lq.limit; i-- {
			if lq.match(es[i]) {
				out = append(out, es[i])
			}
		}
		more := len(out) > lq.limit
		out = out[:min(len(out), lq.limit)]
		slices.Reverse(out)
		return out, more, nil
	}
	start := i0
	if lq.after != "" {
		p, ok := l.index(lq.after)
		if !ok {
			return nil, false, invalid("starting_after", "resource_missing", fmt.Sprintf("No such %s: '%s'", what, lq.after))
		}
		start = max(start, p+1)
	}
	for i := start; i < i1 && len(out) <= lq.limit; i++ {
		if lq.match(es[i]) {
			out = append(out, es[i])
		}
	}
	more := len(out) > lq.limit
	return out[:min(len(out), lq.limit)], more, nil
}

// firstIndex is the first index of the newest-first entries at which pred
// holds, pred being monotone (false then true); len(es) if none.
func firstIndex(es []*entry, pred func(*entry) bool) int {
	lo, hi := 0, len(es)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if pred(es[m]) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}
