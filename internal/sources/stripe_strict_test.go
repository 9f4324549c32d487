package sources

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	stripe "github.com/stripe/stripe-go/v79"

	"reconcile"
	"reconcile/internal/stripesim"
)

const (
	goodCharge = `{"id":"ch_1","object":"charge","amount":100,"currency":"usd","status":"succeeded","created":1700000000,"metadata":{}}`
	goodEvent  = `{"id":"evt_1","object":"event","type":"charge.succeeded","created":1700000000,"data":{"object":` + goodCharge + `}}`
)

// pageOf renders a page holding entries.
func pageOf(entries ...string) string {
	return `{"object":"list","data":[` + strings.Join(entries, ",") + `],"has_more":false,"url":"/v1/charges"}`
}

func response(body string) *stripe.APIResponse {
	return &stripe.APIResponse{RawJSON: []byte(body), StatusCode: 200, RequestID: "req_1"}
}

// checkPage takes what a page must hold, and nothing less, wherever and
// however the members are written.
func TestCheckPage(t *testing.T) {
	tests := []struct {
		name, body string
		events     bool
		want       string // in the error; "" for none
	}{
		{"a page", pageOf(goodCharge, goodCharge), false, ""},
		{"an empty page", pageOf(), false, ""},
		{"spaces, any order, decoys in nested values", ` { "has_more" : true , "url":"/v1/x", "data" : [ { "metadata" : { "amount" : 1 , "id" : "x",
			"note": "\"amount\": 5 }" } , "created" : 1 , "status" : "succeeded" , "currency" : "usd" , "id" : "ch_1" , "amount" : 0 } ] ,
			"object" : "list" } `, false, ""},
		{"escaped keys and values", `{"\u006fbject":"li\u0073t","d\u0061ta":[{"\u0069d":"ch_1","\u0061mount":5,"currency":"usd","status":"ok","created":1}],"has_\u006dore":false}`, false, ""},
		{"keys in another case, as encoding/json matches them", `{"Object":"list","DATA":[{"ID":"ch_1","Amount":5,"Currency":"usd","Status":"ok","Created":1}],"Has_More":false}`, false, ""},
		{"a key that folds beyond ASCII: the long s of ſtatus", pageOf(`{"id":"ch_1","amount":5,"currency":"usd","ſtatus":"ok","created":1}`), false, ""},
		{"a key that only looks like one", pageOf(`{"id":"ch_1","amount":5,"currency":"usd","status_":"ok","created":1}`), false, "malformed charge ch_1: no status"},
		{"a duplicate null leaves the value", pageOf(`{"id":"ch_1","amount":5,"amount":null,"currency":"usd","status":"ok","created":1}`), false, ""},
		{"an event", pageOf(goodEvent), true, ""},

		{"{}", `{}`, false, `malformed list page: no object "list", data, has_more`},
		{"null", `null`, false, "malformed list page: not a JSON object"},
		{"an array", `[]`, false, "malformed list page: not a JSON object"},
		{"data null", `{"object":"list","data":null,"has_more":false}`, false, "malformed list page: no data"},
		{"no data", `{"object":"list","has_more":false}`, false, "malformed list page: no data"},
		{"data only nested", `{"object":"list","has_more":false,"url":{"data":[]}}`, false, "malformed list page: no data"},
		{"no has_more", `{"object":"list","data":[]}`, false, "malformed list page: no has_more"},
		{"has_more null", `{"object":"list","data":[],"has_more":null}`, false, "malformed list page: no has_more"},
		{"not a list", `{"object":"search_result","data":[],"has_more":false}`, false, `malformed list page: no object "list"`},
		{"no object", `{"data":[],"has_more":false}`, false, `malformed list page: no object "list"`},
		{"no amount", pageOf(goodCharge, `{"id":"ch_2","currency":"usd","status":"ok","created":1}`), false, "malformed charge ch_2: no amount"},
		{"amount null", pageOf(`{"id":"ch_2","amount":null,"currency":"usd","status":"ok","created":1}`), false, "malformed charge ch_2: no amount"},
		{"amount only in metadata", pageOf(`{"id":"ch_2","metadata":{"amount":"5"},"currency":"usd","status":"ok","created":1}`), false, "malformed charge ch_2: no amount"},
		{"empty currency", pageOf(`{"id":"ch_2","amount":5,"currency":"","status":"ok","created":1}`), false, "malformed charge ch_2: no currency"},
		{"a duplicate empty currency wins", pageOf(`{"id":"ch_2","amount":5,"currency":"usd","currency":"","status":"ok","created":1}`), false, "malformed charge ch_2: no currency"},
		{"no status, no created", pageOf(`{"id":"ch_2","amount":5,"currency":"usd"}`), false, "malformed charge ch_2: no status, created"},
		{"no id: named by place", pageOf(goodCharge, `{"amount":5,"currency":"usd","status":"ok","created":1}`), false, "malformed charge #2 of the page: no id"},
		{"an odd id: named by place", pageOf(`{"id":"ch <b>1","currency":"usd","status":"ok","created":1}`), false, "malformed charge #1 of the page: no amount"},
		{"an entry that is not an object", pageOf(`"ch_1"`), false, "malformed charge #1 of the page: no id, amount, currency, status, created"},
		{"an event without data.object", pageOf(`{"id":"evt_1","type":"charge.succeeded","created":1,"data":{}}`), true, "malformed event evt_1: no data.object with an id"},
		{"an event whose data.object is null", pageOf(`{"id":"evt_1","type":"t","created":1,"data":{"object":null}}`), true, "malformed event evt_1: no data.object with an id"},
		{"an event whose data is null", pageOf(`{"id":"evt_1","type":"t","created":1,"data":null}`), true, "malformed event evt_1: no data.object with an id"},
		{"an event whose object has no id of its own", pageOf(`{"id":"evt_1","type":"t","created":1,"data":{"object":{"metadata":{"id":"x"}},"id":"y"}}`), true, "malformed event evt_1: no data.object with an id"},
		{"an event without a type", pageOf(`{"id":"evt_1","created":1,"data":{"object":{"id":"ch_1"}}}`), true, "malformed event evt_1: no type"},
	}
	for _, tt := range tests {
		sh := chargeShape
		if tt.events {
			sh = eventShape
		}
		err := checkPage(response(tt.body), sh)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("checkPage(%s) = %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("checkPage(%s) = %v, want %q", tt.name, err, tt.want)
		case err != nil:
			var re *RequestError
			if !errors.As(err, &re) || !re.Malformed() || !re.retry || re.Status != 200 || re.RequestID != "req_1" {
				t.Errorf("checkPage(%s) = %#v, want a malformed RequestError to retry, with the status and request id", tt.name, err)
			}
		}
	}
}

func TestCheckObject(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"a charge", goodCharge, ""},
		{"{}", `{}`, "malformed charge ch_1: no id, amount, currency, status, created"},
		{"null", `null`, "malformed charge ch_1: not a JSON object"},
		{"an id string", `"ch_1"`, "malformed charge ch_1: not a JSON object"},
		{"no currency", `{"id":"ch_1","amount":5,"status":"ok","created":1,"metadata":{"currency":"usd"}}`, "malformed charge ch_1: no currency"},
		{"no id", `{"amount":5,"currency":"usd","status":"ok","created":1}`, "malformed charge ch_1: no id"},
	}
	for _, tt := range tests {
		err := checkObject(response(tt.body), chargeShape, "ch_1")
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || err.Error() != "stripe answered 200: "+tt.want+" (request req_1)") {
			t.Errorf("checkObject(%s) = %v, want %q", tt.name, err, tt.want)
		}
	}
}

// FuzzCheckObject: on any JSON object that stripe-go decodes as a charge,
// checkObject passes exactly when encoding/json finds every member the
// reader needs, non-null, and the strings non-empty.
func FuzzCheckObject(f *testing.F) {
	for _, s := range []string{goodCharge, `{"id":"ch_1"}`, `{"\u0069d":"ch_1","Amount":1,"currency":"usd","status":"s","created":1}`,
		`{"metadata":{"amount":1},"id":"","amount":null,"currency":"usd","status":"s","created":-1}`,
		`{"id":"ch_1","amount":1,"currency":"usd","status":"s","created":1,"x":[{"}":"]"}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		var ch stripe.Charge
		if json.Unmarshal(b, &ch) != nil || len(b) == 0 || b[skipSpace(b, 0)] != '{' {
			return
		}
		// Keys that encoding/json takes for one field: the last wins,
		// which pointers below would not tell.
		var keys []string
		if err := topKeys(json.NewDecoder(strings.NewReader(s)), &keys); err != nil {
			return
		}
		for i, k := range keys {
			for _, l := range keys[:i] {
				if strings.EqualFold(k, l) {
					return
				}
			}
		}
		var ref struct {
			ID, Currency, Status *string
			Amount, Created      *int64
		}
		if json.Unmarshal(b, &ref) != nil {
			return
		}
		want := ref.ID != nil && *ref.ID != "" && ref.Currency != nil && *ref.Currency != "" && ref.Status != nil &&
			*ref.Status != "" && ref.Amount != nil && ref.Created != nil
		if err := checkObject(response(s), chargeShape, "ch_x"); (err == nil) != want {
			t.Errorf("checkObject(%s) = %v; encoding/json finds every member: %t", s, err, want)
		}
	})
}

// malformedCases are the broken shapes of each list the reader must refuse,
// and what its error must say.
var malformedCases = []struct {
	shape stripesim.Shape
	list  string
	want  string
}{
	{stripesim.ShapeEmpty, ListCharges, `malformed list page: no object "list", data, has_more`},
	{stripesim.ShapeNoData, ListRefunds, "malformed list page: no data"},
	{stripesim.ShapeNullData, ListPaymentIntents, "malformed list page: no data"},
	{stripesim.ShapeNoHasMore, ListCharges, "malformed list page: no has_more"},
	{stripesim.ShapeNotList, ListEvents, `malformed list page: no object "list"`},
	{stripesim.Without("id"), ListRefunds, "malformed refund #1 of the page: no id"},
	{stripesim.Without("amount"), ListCharges, "malformed charge ch_00249: no amount"},
	{stripesim.Without("currency"), ListRefunds, ": no currency"},
	{stripesim.Without("status"), ListPaymentIntents, "malformed payment_intent pi_00248: no status"},
	{stripesim.Without("created"), ListCharges, "malformed charge ch_00249: no created"},
	{stripesim.ShapeTruncated, ListCharges, "malformed response: undecodable JSON: unexpected end of JSON input"},
	{stripesim.ShapeTruncated, ListEvents, "malformed response: undecodable JSON"},
	{stripesim.Without("data.object"), ListEvents, ": no data.object with an id"},
	{stripesim.Without("type"), ListEvents, ": no type"},
	{stripesim.Without("created"), ListEvents, ": no created"},
	{stripesim.Without("id"), ListEvents, "malformed event #1 of the page: no id"},
	{stripesim.ShapeFarCreated, ListCharges, "created is beyond the years ±290000"},
	{stripesim.ShapeFarCreated, ListEvents, "created is beyond the years ±290000"},
}

// readers are the two ways a window is read: List, and Sync as an
// incremental pass does.
var readers = []struct {
	name string
	read func(r *Stripe, t *testing.T) (*Listing, error)
}{
	{"List", func(r *Stripe, t *testing.T) (*Listing, error) { return r.List(t.Context(), window) }},
	{"Sync", func(r *Stripe, t *testing.T) (*Listing, error) {
		s, err := r.Sync(t.Context(), SyncRequest{Objects: window, Events: window})
		if s == nil {
			return nil, err
		}
		return &s.Listing, err
	}},
}

// A malformed page that persists fails the list: a *ListError naming the
// list and saying the response was malformed, after the retries, and no
// listing.
func TestListRefusesMalformedPages(t *testing.T) {
	e := newEnv(t)
	populate(t, e, 250)
	for _, tt := range malformedCases {
		for _, rd := range readers {
			t.Run(rd.name+"/"+tt.list+"/"+string(tt.shape), func(t *testing.T) {
				e.srv.SetFaults(stripesim.Faults{Malformed: tt.shape, MalformedList: tt.list})
				e.srv.ResetStats()
				r := e.reader(t, func(o *StripeOptions) { o.Concurrency, o.MaxRetries = 1, 3 })
				l, err := rd.read(r, t)
				if l != nil {
					t.Errorf("listing of %d objects beside the error, want none", len(l.Objects))
				}
				var le *ListError
				if !errors.As(err, &le) || le.List != tt.list || le.Cursor != "" {
					t.Fatalf("error = %v, want a *ListError of %s at its first page", err, tt.list)
				}
				var re *RequestError
				if !errors.As(err, &re) || !re.Malformed() || re.Attempts != 4 {
					t.Errorf("error = %#v, want a malformed response after 4 attempts", re)
				}
				if !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %q does not say %q", err, tt.want)
				}
				// Names and ids only: no value from the body (customers,
				// metadata, currencies, JSON).
				for _, leak := range []string{"cus_", "ob-", "usd", "{", `"id"`} {
					if strings.Contains(err.Error(), leak) {
						t.Errorf("error %q quotes the body (%q)", err, leak)
					}
				}
				st := e.srv.Stats()
				if st.Malformed != 4 || st.Paths["/v1/"+tt.list] != 4 {
					t.Errorf("server served %d malformed answers of %d requests to %s, want 4 of 4 (MaxRetries 3)",
						st.Malformed, st.Paths["/v1/"+tt.list], tt.list)
				}
			})
		}
	}
}

// A malformed page now and then is retried, counting as a retry, from its
// own cursor, and the listing is whole.
func TestListRetriesMalformedPages(t *testing.T) {
	e := newEnv(t)
	d := populate(t, e, 250)
	seen := map[string]bool{}
	for _, tt := range malformedCases {
		for _, rd := range readers {
			t.Run(rd.name+"/"+string(tt.shape), func(t *testing.T) {
				// Every third page of any list: with one worker, each list
				// meets it, mid-list where it has pages enough.
				e.srv.SetFaults(stripesim.Faults{Malformed: tt.shape, MalformedEvery: 3})
				e.srv.ResetStats()
				r := e.reader(t, func(o *StripeOptions) { o.Concurrency, o.MaxRetries = 1, 3 })
				l, err := rd.read(r, t)
				if err != nil {
					t.Fatal(err)
				}
				checkComplete(t, l, d)
				st := e.srv.Stats()
				if st.Malformed == 0 || l.Stats.Retries != st.Malformed {
					t.Errorf("server served %d malformed pages, the reader retried %d: want some, one retry each", st.Malformed, l.Stats.Retries)
				}
				delivered := st.Objects[ListCharges] + st.Objects[ListRefunds] + st.Objects[ListPaymentIntents] + st.Objects[ListEvents]
				if read := l.Stats.Charges + l.Stats.Refunds + l.Stats.PaymentIntents + l.Stats.Events; delivered != read {
					t.Errorf("server delivered %d entries, the listing holds %d: pages were read twice", delivered, read)
				}
				for list, n := range st.Pages {
					if n > 0 && st.Paths["/v1/"+list] > n {
						seen[list] = true // this list's pages were retried
					}
				}
			})
		}
	}
	for _, list := range []string{ListCharges, ListRefunds, ListPaymentIntents, ListEvents} {
		if !seen[list] {
			t.Errorf("no malformed page of %s was retried: the test proves nothing of it", list)
		}
	}
}

// A retrieval answered with a malformed object is a failed lookup after
// its retries, never one found with zero fields; once, it is retried and
// found.
func TestRetrieveRefusesMalformedObjects(t *testing.T) {
	e := newEnv(t)
	d := populate(t, e, 30)
	tests := []struct {
		shape  stripesim.Shape
		list   string
		id     string
		reason string
	}{
		{stripesim.ShapeEmpty, ListCharges, "ch_00001", "no id, amount, currency, status, created"},
		{stripesim.Without("id"), ListCharges, "ch_00001", "no id"},
		{stripesim.Without("amount"), ListCharges, "ch_00001", "no amount"},
		{stripesim.Without("currency"), ListRefunds, "re_00000", "no currency"},
		{stripesim.Without("status"), ListPaymentIntents, "pi_00004", "no status"},
		{stripesim.Without("created"), ListCharges, "ch_00001", "no created"},
		{stripesim.ShapeTruncated, ListRefunds, "re_00000", "malformed response: undecodable JSON"},
		{stripesim.ShapeFarCreated, ListPaymentIntents, "pi_00004", "created is beyond the years ±290000"},
	}
	r := e.reader(t, func(o *StripeOptions) { o.MaxRetries, o.Concurrency = 2, 1 })
	for _, tt := range tests {
		t.Run(tt.list+"/"+string(tt.shape), func(t *testing.T) {
			kind, _ := kindOfID(tt.id)
			e.srv.SetFaults(stripesim.Faults{Malformed: tt.shape, MalformedList: tt.list})
			e.srv.ResetStats()
			objs, lookups := r.Retrieve(t.Context(), []string{tt.id})
			l := lookups[0]
			if len(objs) != 0 || l.Result != reconcile.LookupFailed {
				t.Fatalf("retrieve = %v, %+v; want no object and a failed lookup", objs, l)
			}
			if !strings.Contains(l.Err, "malformed") || !strings.Contains(l.Err, tt.reason) || !strings.Contains(l.Err, tt.id) ||
				!strings.Contains(l.Err, "after 3 attempts") || strings.Contains(l.Err, "{") || strings.Contains(l.Err, "usd") {
				t.Errorf("lookup error %q, want the id, malformed, %q, 3 attempts, and nothing of the body", l.Err, tt.reason)
			}
			if got := e.srv.Stats().Malformed; got != 3 {
				t.Errorf("server served %d malformed answers, want 3 (MaxRetries 2)", got)
			}

			// Every other answer malformed: of two ids read one after the
			// other, the second is malformed once, retried and found.
			other := map[reconcile.ObjectKind]string{reconcile.Charge: "ch_00002", reconcile.Refund: "re_00006", reconcile.PaymentIntent: "pi_00008"}[kind]
			e.srv.SetFaults(stripesim.Faults{Malformed: tt.shape, MalformedList: tt.list, MalformedEvery: 2})
			e.srv.ResetStats()
			objs, lookups = r.Retrieve(t.Context(), []string{tt.id, other})
			for _, l := range lookups {
				if l.Result != reconcile.LookupFound {
					t.Errorf("lookup %+v, want found after a retry", l)
				}
			}
			if got := e.srv.Stats().Malformed; got != 1 || len(objs) != 2 {
				t.Fatalf("%d malformed answers, %d objects; want 1 and 2", got, len(objs))
			}
			for _, o := range objs {
				var want reconcile.ProviderObject
				for _, w := range d.byKind[o.Kind] {
					if w.ID == o.ID {
						want = w
					}
				}
				if o.Money != want.Money || o.Created != want.Created || o.Status != want.Status {
					t.Errorf("retrieved %+v, want %+v", o, want)
				}
			}
		})
	}
	t.Run("page shapes spare retrievals", func(t *testing.T) {
		e.srv.SetFaults(stripesim.Faults{Malformed: stripesim.ShapeNoHasMore})
		if _, lookups := r.Retrieve(t.Context(), []string{"ch_00001"}); lookups[0].Result != reconcile.LookupFound {
			t.Errorf("lookup %+v, want found", lookups[0])
		}
	})
}

// A malformed answer that a retry mends is still an anomaly: it is logged
// as a warning, without the body.
func TestMalformedIsLogged(t *testing.T) {
	e := newEnv(t)
	d := populate(t, e, 250)
	var logs strings.Builder
	r := e.reader(t, func(o *StripeOptions) {
		o.Concurrency = 1
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	// The charges take three pages: the second and the third arrive
	// without amounts once.
	e.srv.SetFaults(stripesim.Faults{Malformed: stripesim.Without("amount"), MalformedList: ListCharges, MalformedEvery: 2})
	l, err := r.List(t.Context(), window)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, l, d)
	out := logs.String()
	if n := strings.Count(out, "level=WARN msg=\"stripe answered a malformed response; retrying\""); n != 2 || !strings.Contains(out, "no amount") {
		t.Errorf("logs warn %d times of a malformed page, want 2 saying what it lacks:\n%s", n, out)
	}
	if strings.Contains(out, "cus_") || strings.Contains(out, "ob-") {
		t.Errorf("logs quote the body:\n%s", out)
	}
}

// BenchmarkCheckPage weighs the reader's decoding of a page (lean) and
// its checks against stripe-go's decoding of the same page (stripe-go),
// which the reader did before it decoded pages itself: full pages of
// charges and of events as the test server renders them.
//
// Run: go test -run '^$' -bench BenchmarkCheckPage ./internal/sources
func BenchmarkCheckPage(b *testing.B) {
	e := newEnv(b)
	benchData(b, e, 300)
	kinds := keyEventKinds()
	for _, c := range []struct {
		list   string
		sh     shape
		decode func([]byte) error
		entry  func(*pageReader) error
	}{
		{ListCharges, chargeShape, func(raw []byte) error { return json.Unmarshal(raw, &stripe.ChargeList{}) },
			func(pr *pageReader) error {
				w, err := pr.wireObject(reconcile.Charge)
				_ = w.object()
				return err
			}},
		{ListEvents, eventShape, func(raw []byte) error {
			var pg struct {
				stripe.ListMeta
				Data []*lightEvent `json:"data"`
			}
			return json.Unmarshal(raw, &pg)
		}, func(pr *pageReader) error {
			var ev lightEvent
			err := pr.event(&ev)
			lightKeyEvidence(&ev, kinds)
			return err
		}},
	} {
		req, err := http.NewRequestWithContext(b.Context(), http.MethodGet, e.base+"/v1/"+c.list+"?limit=100", nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		raw, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || checkPage(response(string(raw)), c.sh) != nil || bytes.Count(raw, []byte(`"object":"`+c.sh.what+`"`)) < 100 {
			b.Fatalf("%s: a full page that passes its check, got %v, %d bytes", c.list, err, len(raw))
		}
		resp := &stripe.APIResponse{RawJSON: raw}
		b.Run(c.list+"/stripe-go", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.decode(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.list+"/lean", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			pr := pageReaders.Get().(*pageReader)
			for b.Loop() {
				pr.body.Reset()
				pr.body.Write(raw)
				if _, err := pr.page(resp, c.entry); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.list+"/check", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := checkPage(resp, c.sh); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The other cut body: the whole length announced, half sent, the
// connection closed. That is a broken transfer, not a malformed answer:
// retried all the same, and if it persists the list fails, saying so.
func TestDroppedBodyIsNotMalformed(t *testing.T) {
	e := newEnv(t)
	populate(t, e, 20)
	e.srv.SetFaults(stripesim.Faults{DropEvery: 1})
	r := e.reader(t, func(o *StripeOptions) { o.Concurrency, o.MaxRetries = 1, 2 })
	_, err := r.List(t.Context(), window)
	var le *ListError
	var re *RequestError
	if !errors.As(err, &le) || !errors.As(err, &re) || re.Malformed() || re.Attempts != 3 || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("List over dropped connections = %v, want a ListError after 3 attempts, an unexpected EOF and not malformed", err)
	}
}
