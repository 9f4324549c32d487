package sources

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	stripe "github.com/stripe/stripe-go/v79"

	"reconcile"
)

// The reader decodes list pages itself (stripe_page.go); what it reads
// must be what stripe-go's decoding and the converters made of the same
// page. These tests decode pages both ways and compare.

// leanEntries are entries of list pages that take encoding/json's ways
// with names and values: the cases the reader's decoder must read as
// encoding/json reads them into stripe-go's types.
var leanEntries = []struct {
	name  string
	kind  reconcile.ObjectKind
	entry string
}{
	{"plain charge", reconcile.Charge, `{"id":"ch_1","object":"charge","amount":1000,"amount_refunded":250,"captured":true,"created":1700000000,"currency":"usd","customer":"cus_1","metadata":{"obligation_id":"ob-1","idempotency_key":"k-1"},"payment_intent":"pi_1","status":"succeeded","outcome":{"type":"authorized"},"refunds":{"object":"list","data":[]}}`},
	{"uncaptured charge, no intent", reconcile.Charge, `{"id":"ch_2","amount":5,"captured":false,"created":1700000001,"currency":"EUR","customer":null,"metadata":{},"payment_intent":null,"status":"succeeded"}`},
	{"expanded references", reconcile.Charge, `{"id":"ch_3","amount":5,"created":1700000001,"currency":"usd","customer":{"id":"cus_9","object":"customer","email":"a@b.c"},"payment_intent":{"id":"pi_9","object":"payment_intent","amount":5},"status":"failed"}`},
	{"escapes, unicode and invalid UTF-8", reconcile.Charge, "{\"id\":\"ch_\\u0034\",\"amount\":7,\"created\":1,\"currency\":\"us\\u0064\",\"metadata\":{\"obligation_id\":\"ob-\\\"q\\\"\\n\",\"n\\u00e4me\":\"caf\\u00e9 \xff\xfe\"},\"payment_intent\":\"pi_\\u0041\",\"status\":\"succeeded\",\"captured\":true}"},
	{"names in other cases, escaped names", reconcile.Charge, `{"ID":"ch_5","Amount":9,"CREATED":2,"Currency":"gbp","St\u0061tus":"pending","Captured":true,"Metadata":{"a":"b"}}`},
	{"last of equal names wins", reconcile.Charge, `{"id":"ch_6","amount":1,"amount":2,"Amount":3,"created":3,"currency":"usd","status":"succeeded","captured":true,"metadata":{"k":"1","k":"2"}}`},
	{"nulls leave values unset", reconcile.Charge, `{"id":"ch_7","amount":null,"amount_refunded":null,"captured":null,"created":4,"currency":null,"metadata":null,"status":null}`},
	{"a metadata value of null", reconcile.Charge, `{"id":"ch_8","amount":1,"created":5,"currency":"usd","status":"succeeded","metadata":{"obligation_id":null}}`},
	{"negative and large amounts", reconcile.Charge, `{"id":"ch_9","amount":-9223372036854775808,"amount_refunded":9223372036854775807,"created":-1,"currency":"jpy","status":"succeeded"}`},
	{"an entry that is an id alone", reconcile.Charge, `"ch_10"`},
	{"a refund of a charge", reconcile.Refund, `{"id":"re_1","object":"refund","amount":100,"charge":"ch_1","created":1700000002,"currency":"usd","metadata":{"obligation_id":"refund:1"},"payment_intent":"pi_1","status":"pending","captured":"a charge's member a refund has not"}`},
	{"a refund of an intent alone", reconcile.Refund, `{"id":"re_2","amount":100,"charge":null,"created":1700000002,"currency":"usd","payment_intent":{"id":"pi_2"},"status":"succeeded"}`},
	{"an intent", reconcile.PaymentIntent, `{"id":"pi_1","object":"payment_intent","amount":1000,"amount_received":1000,"created":1700000000,"currency":"usd","customer":"cus_1","latest_charge":"ch_1","metadata":{"obligation_id":"ob-1"},"status":"requires_capture","client_secret":"pi_1_secret"}`},
	{"a refund with other kinds' members", reconcile.Refund, `{"id":"re_3","amount":100,"created":3,"currency":"usd","status":"succeeded","customer":5,"latest_charge":6,"amount_refunded":"7"}`},
	{"an intent with other kinds' members", reconcile.PaymentIntent, `{"id":"pi_3","amount":1,"created":1,"currency":"usd","status":"succeeded","charge":5,"payment_intent":6,"captured":"7","amount_refunded":"8"}`},
	{"a charge with other kinds' members", reconcile.Charge, `{"id":"ch_11","amount":1,"created":1,"currency":"usd","status":"succeeded","captured":true,"charge":5,"latest_charge":6}`},
	{"an intent, latest charge expanded", reconcile.PaymentIntent, `{"id":"pi_2","amount":1,"created":1,"currency":"usd","latest_charge":{"id":"ch_2","object":"charge"},"status":"canceled"}`},
}

// stripeGoObjects decodes a page of kind as the reader did before it read
// pages itself: stripe-go's types, then the converters.
func stripeGoObjects(kind reconcile.ObjectKind, page []byte) ([]reconcile.ProviderObject, error) {
	var out []reconcile.ProviderObject
	switch kind {
	case reconcile.Charge:
		var l stripe.ChargeList
		if err := json.Unmarshal(page, &l); err != nil {
			return nil, err
		}
		for _, c := range l.Data {
			if c == nil {
				c = &stripe.Charge{}
			}
			out = append(out, chargeObject(c))
		}
	case reconcile.Refund:
		var l stripe.RefundList
		if err := json.Unmarshal(page, &l); err != nil {
			return nil, err
		}
		for _, r := range l.Data {
			if r == nil {
				r = &stripe.Refund{}
			}
			out = append(out, refundObject(r))
		}
	case reconcile.PaymentIntent:
		var l stripe.PaymentIntentList
		if err := json.Unmarshal(page, &l); err != nil {
			return nil, err
		}
		for _, p := range l.Data {
			if p == nil {
				p = &stripe.PaymentIntent{}
			}
			out = append(out, paymentIntentObject(p))
		}
	}
	return out, nil
}

// leanObjects decodes a page of kind with the reader's own decoder.
func leanObjects(kind reconcile.ObjectKind, page []byte) ([]reconcile.ProviderObject, bool, error) {
	pr := pageReaders.Get().(*pageReader)
	defer pageReaders.Put(pr)
	pr.body.Reset()
	pr.body.Write(page)
	var out []reconcile.ProviderObject
	hasMore, err := pr.page(&stripe.APIResponse{RawJSON: page}, func(pr *pageReader) error {
		w, err := pr.wireObject(kind)
		if err == nil {
			out = append(out, w.object())
		}
		return err
	})
	return out, hasMore, err
}

func listPage(entries ...string) []byte {
	return []byte(`{"object":"list","data":[` + strings.Join(entries, ",") + `],"has_more":true,"url":"/v1/x"}`)
}

func TestLeanPageReadsWhatStripeGoRead(t *testing.T) {
	for _, tt := range leanEntries {
		t.Run(tt.name, func(t *testing.T) {
			page := listPage(tt.entry, tt.entry)
			want, err := stripeGoObjects(tt.kind, page)
			if err != nil {
				t.Fatalf("stripe-go: %v", err)
			}
			got, hasMore, err := leanObjects(tt.kind, page)
			if err != nil {
				t.Fatalf("lean: %v", err)
			}
			if !hasMore {
				t.Error("has_more read as false")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lean decoding differs from stripe-go's (-stripe-go +lean):\n%s", diff)
			}
		})
	}
}

// An entry of a kind the reader lists none of is read as nothing, as
// stripe-go has no type to read it into: not even a member it would read
// of a charge, which here could not be read as one.
func TestLeanPageReadsNothingOfAnUnlistedKind(t *testing.T) {
	got, _, err := leanObjects(reconcile.ObjectKind("payout"), listPage(`{"id":5,"amount":"x","status":{}}`))
	if err != nil {
		t.Fatalf("lean: %v", err)
	}
	nothing := wireObject{kind: "payout"}
	if want := []reconcile.ProviderObject{nothing.object()}; !cmp.Equal(want, got) {
		t.Errorf("read %+v, want %+v", got, want)
	}
}

// What stripe-go could not decode, the reader cannot either: the page is
// undecodable (a malformed response, retried), and the error names no
// value.
func TestLeanPageRefusesWhatStripeGoRefused(t *testing.T) {
	for _, tt := range []struct {
		name, page, want string
	}{
		{"cut short", `{"object":"list","data":[{"id":"ch_1","amount":1`, "unexpected end of JSON input"},
		{"a string amount", string(listPage(`{"id":"ch_1","amount":"1000"}`)), "amount is not a number"},
		{"a fractional amount", string(listPage(`{"id":"ch_1","amount":10.5}`)), "amount is not an integer"},
		{"an amount beyond int64", string(listPage(`{"id":"ch_1","amount":9223372036854775808}`)), "amount does not fit in 64 bits"},
		{"a metadata number", string(listPage(`{"id":"ch_1","metadata":{"secret":4242}}`)), "metadata value is not a string"},
		{"a metadata array", string(listPage(`{"id":"ch_1","metadata":["4242424242424242"]}`)), "metadata is not an object"},
		{"a reference that is a number", string(listPage(`{"id":"ch_1","payment_intent":12}`)), "payment_intent is neither an id nor an object"},
		{"data that is not an array", `{"object":"list","data":{"id":"ch_1"},"has_more":false}`, "the page's data is not an array"},
		{"trailing bytes", string(listPage(`{"id":"ch_1"}`)) + `x`, "invalid JSON at byte"},
		{"not JSON", `<html>4242424242424242</html>`, "the page is not a JSON object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := stripeGoObjects(reconcile.Charge, []byte(tt.page)); err == nil {
				t.Fatalf("stripe-go decoded %s; the case is wrong", tt.page)
			}
			_, _, err := leanObjects(reconcile.Charge, []byte(tt.page))
			var re *RequestError
			if !errors.As(err, &re) || !re.Malformed() || !strings.HasPrefix(re.Message, undecodable+": ") || !strings.Contains(re.Message, tt.want) {
				t.Fatalf("lean: %v, want a malformed response saying %q", err, tt.want)
			}
			if strings.Contains(re.Message, "4242") || strings.Contains(re.Message, "1000") {
				t.Errorf("the error quotes a value: %s", re.Message)
			}
		})
	}
}

// leanEvents decodes a page of events with the reader's decoder, each
// event with a copy of its object's JSON.
func leanEvents(page []byte) ([]lightEvent, error) {
	pr := pageReaders.Get().(*pageReader)
	defer pageReaders.Put(pr)
	pr.body.Reset()
	pr.body.Write(page)
	var out []lightEvent
	_, err := pr.page(&stripe.APIResponse{RawJSON: page}, func(pr *pageReader) error {
		var ev lightEvent
		err := pr.event(&ev)
		if ev.Data != nil {
			ev.Data.Object.raw = bytes.Clone(ev.Data.Object.raw)
		}
		out = append(out, ev)
		return err
	})
	return out, err
}

func TestLeanEventsReadWhatEncodingJSONRead(t *testing.T) {
	events := []string{
		`{"id":"evt_1","object":"event","type":"charge.succeeded","created":1700000000,"request":{"id":"req_1","idempotency_key":"k-1"},"data":{"object":{"id":"ch_1","object":"charge","created":1699999999,"amount":5},"previous_attributes":{"x":1}}}`,
		`{"id":"evt_2","type":"refund.created","created":1,"request":null,"data":{"object":{"object":"refund","created":2,"id":"re_\u0031"}}}`,
		`{"ID":"evt_3","Type":"payment_intent.created","Created":3,"Request":{"Id":"req_3","Idempotency_Key":"k\n3"},"Data":{"Object":{"ID":"pi_3","Object":"payment_intent","Created":"not a number"}}}`,
		`{"id":"evt_4","type":"charge.failed","created":4,"request":{"id":null,"idempotency_key":null},"data":{"object":null}}`,
		`{"id":"evt_5","type":"charge.pending","created":5,"data":null,"request":{"id":"req_5"},"request":{"idempotency_key":"k-5"}}`,
	}
	for i, e := range events {
		page := listPage(e)
		var std struct {
			Data []*lightEvent `json:"data"`
		}
		stdErr := json.Unmarshal(page, &std)
		got, err := leanEvents(page)
		if (stdErr == nil) != (err == nil) {
			t.Errorf("event %d: encoding/json %v, lean %v", i, stdErr, err)
			continue
		}
		if stdErr != nil {
			continue
		}
		want := *std.Data[0]
		if diff := cmp.Diff(want, got[0], cmp.AllowUnexported(eventObject{}, objectHead{})); diff != "" {
			t.Errorf("event %d (-encoding/json +lean):\n%s", i, diff)
		}
	}
}

// FuzzLeanPage holds the reader's decoder to stripe-go's on any page: a
// page stripe-go decodes, the reader decodes to the same objects; a page
// the reader refuses, stripe-go refused too. (The reader may read a page
// stripe-go refused for a member the reader does not read.)
func FuzzLeanPage(f *testing.F) {
	for _, tt := range leanEntries {
		f.Add(uint8(0), listPage(tt.entry))
	}
	f.Add(uint8(1), listPage(leanEntries[len(leanEntries)-1].entry))
	f.Add(uint8(2), listPage(leanEntries[len(leanEntries)-3].entry))
	f.Fuzz(func(t *testing.T, k uint8, page []byte) {
		kind := []reconcile.ObjectKind{reconcile.Charge, reconcile.PaymentIntent, reconcile.Refund}[int(k)%3]
		want, stdErr := stripeGoObjects(kind, page)
		got, _, err := leanObjects(kind, page)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || !re.Malformed() {
				t.Fatalf("lean: %v, want a malformed response", err)
			}
			if stdErr == nil {
				t.Fatalf("lean refused a page stripe-go decoded: %v", err)
			}
			return
		}
		if stdErr != nil {
			return
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("lean decoding differs from stripe-go's (-stripe-go +lean):\n%s", diff)
		}
	})
}

// A creation time beyond the years a reconcile.Stamp holds makes a page
// malformed, an object's or an event's, rather than a time wrapped
// around; the error names the member, not the value.
func TestLeanPageRefusesCreatedBeyondStamps(t *testing.T) {
	const far = `99999999999999999`
	malformed := func(what string, err error) {
		t.Helper()
		var re *RequestError
		if !errors.As(err, &re) || !re.Malformed() || !strings.Contains(re.Message, "created is beyond the years ±290000") {
			t.Fatalf("%s: %v, want a malformed response saying created is beyond the years a Stamp holds", what, err)
		}
		if strings.Contains(re.Message, far) {
			t.Errorf("%s: the error quotes the value: %s", what, re.Message)
		}
	}
	_, _, err := leanObjects(reconcile.Charge, listPage(`{"id":"ch_1","created":`+far+`}`))
	malformed("an object", err)
	_, err = leanEvents(listPage(`{"id":"evt_1","type":"charge.succeeded","created":-` + far + `}`))
	malformed("an event", err)
	if objs, _, err := leanObjects(reconcile.Charge, listPage(`{"id":"ch_1","created":1764547200}`)); err != nil || len(objs) != 1 ||
		!objs[0].Created.Time().Equal(time.Unix(1764547200, 0)) {
		t.Errorf("a time of this century: %+v, %v", objs, err)
	}
}
