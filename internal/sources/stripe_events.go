package sources

import (
	"encoding/json"
	"strconv"

	stripe "github.com/stripe/stripe-go/v79"

	"reconcile"
)

// Events are the longest list the reader reads (one or more per object).
// The reader needs of an event only its id, type, time, request key and
// the id, kind and creation time of its object, and the whole object only
// for a change to an object the listing does not hold. So a page of events
// is decoded into lightEvents (pageReader.event, stripe_page.go) that keep
// data.object as raw JSON and decode only its head; Change decodes the
// rest, into stripe-go's own types, when it needs it.

// lightEvent is an event as far as the reader reads it.
type lightEvent struct {
	ID      string        `json:"id"`
	Type    string        `json:"type"`
	Created int64         `json:"created"`
	Request *eventRequest `json:"request"`
	Data    *eventData    `json:"data"`
}

// eventRequest is the request an event tells of.
type eventRequest struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
}

// eventData holds an event's object.
type eventData struct {
	Object eventObject `json:"object"`
}

// eventObject is an event's data.object: its head decoded, the rest kept
// as raw JSON.
type eventObject struct {
	head objectHead
	// raw is the object's JSON inside the response body, which stripe-go
	// keeps (LastResponse.RawJSON) and never reuses: it stays valid as
	// long as the event does.
	raw []byte
}

type objectHead struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
}

// UnmarshalJSON implements json.Unmarshaler.
func (o *eventObject) UnmarshalJSON(b []byte) error {
	o.raw = b
	if len(b) > 0 && b[0] != '{' {
		return nil // null, or not an object: no head
	}
	if h, ok := scanHead(b); ok {
		o.head = h
		return nil
	}
	return json.Unmarshal(b, &o.head)
}

// scanHead reads the id, object and created members at the top level of a
// JSON object that the decoder has already validated, without decoding
// the rest (a charge's JSON is a kilobyte; its head a few dozen bytes). It
// reports false on anything it does not expect (an escape in a key or in
// the id, bytes beyond ASCII there, a key that differs from one of the
// three only in case, a created that is not an integer), and the caller
// decodes the object with encoding/json instead.
func scanHead(b []byte) (objectHead, bool) {
	var h objectHead
	var seen int
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return h, false
	}
	i++
	for {
		key, plain, start, ok := nextMember(b, i)
		if !ok {
			return h, start >= 0
		}
		if !plain {
			return h, false // encoding/json would unescape it, or match it regardless of case
		}
		i = valueEnd(b, start)
		if i < 0 {
			return h, false
		}
		v := b[start:i]
		switch string(key) {
		case "id", "object":
			if len(v) < 2 || v[0] != '"' {
				if string(v) == "null" {
					seen++
					continue
				}
				return h, false
			}
			if _, esc := stringEnd(v, 0); esc || !ascii(v) {
				return h, false // encoding/json would unescape it, or mend bad UTF-8
			}
			if key[0] == 'i' {
				h.ID = string(v[1 : len(v)-1])
			} else {
				h.Object = string(v[1 : len(v)-1])
			}
			seen++
		case "created":
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return h, false
			}
			h.Created = n
			seen++
		}
		if seen == 3 {
			return h, true
		}
	}
}

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index just past the string starting at b[i] (a quote),
// or -1; escaped says whether it holds a backslash.
func stringEnd(b []byte, i int) (end int, escaped bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return -1, escaped
}

// valueEnd is the index just past the value starting at b[i], or -1.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		end, _ := stringEnd(b, i)
		return end
	case '{', '[':
		return restEnd(b, i+1)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	return j
}

// restEnd is the index just past the object or array that b[i] is inside
// of, at its top level (just past its opening or past one of its
// values), or -1.
func restEnd(b []byte, i int) int {
	depth := 1
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			end, _ := stringEnd(b, j)
			if end < 0 {
				return -1
			}
			j = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1
			}
		}
	}
	return -1
}

// nextMember reads the next member of a JSON object that the decoder has
// already validated, from i (just past the object's '{' or just past a
// member's value): its key, between the quotes, and where its value
// starts. plain says that the key is lower case ASCII without an escape,
// as all of Stripe's are, so that it is the name encoding/json matches
// (see memberOf). At the object's end ok is false and at is the index of
// the closing brace, or -1 where b breaks off. The caller skips the value
// (valueEnd) or scans into it, and goes on from there.
func nextMember(b []byte, i int) (key []byte, plain bool, at int, ok bool) {
	i = skipSpace(b, i)
	if i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		if i < len(b) && b[i] == '}' {
			return nil, false, i, false
		}
		return nil, false, -1, false
	}
	// stringEnd's loop, telling plain keys on the way: this runs for
	// every key of every page.
	plain = true
	j := i + 1
scan:
	for {
		for j < len(b) && keyBytes[b[j]] == keyPlain {
			j++
		}
		if j >= len(b) {
			return nil, false, -1, false
		}
		switch keyBytes[b[j]] {
		case keyQuote:
			break scan
		case keyEscape:
			j++
		}
		plain = false
		j++
	}
	k := skipSpace(b, j+1)
	if k >= len(b) || b[k] != ':' {
		return nil, false, -1, false
	}
	return b[i+1 : j], plain, skipSpace(b, k+1), true
}

// keyBytes sorts the bytes of a key for nextMember.
var keyBytes = func() (t [256]uint8) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = keyFolds
	}
	for c := 0x80; c < len(t); c++ {
		t[c] = keyFolds
	}
	t['"'], t['\\'] = keyQuote, keyEscape
	return t
}()

const (
	keyPlain  = iota // lower case ASCII and the like
	keyQuote         // the key's end
	keyEscape        // a backslash: the next byte is escaped
	keyFolds         // a byte encoding/json may match regardless of case
)

// nextElement finds the next element of a JSON array that the decoder has
// already validated, from i (just past the array's '[' or just past an
// element): where it starts. At the array's end ok is false and at is the
// index of the closing bracket, or -1 where b breaks off.
func nextElement(b []byte, i int) (at int, ok bool) {
	i = skipSpace(b, i)
	if i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	switch {
	case i >= len(b):
		return -1, false
	case b[i] == ']':
		return i, false
	}
	return i, true
}

// lightKeyEvidence is the key evidence of a lightEvent: which idempotency
// key created which object, if the event says so.
func lightKeyEvidence(ev *lightEvent, kinds map[string]keyEvent) (reconcile.KeyEvidence, bool) {
	if ev.Request == nil || ev.Data == nil {
		return reconcile.KeyEvidence{}, false
	}
	h := ev.Data.Object.head
	return evidence(kinds, ev.ID, ev.Type, ev.Created, ev.Request.IdempotencyKey, ev.Request.ID, h.ID, h.Object)
}

// lightChange is the change a lightEvent tells: the object it is about,
// unless it was created in [from, to) (Unix seconds), where the listing
// has it as it is now.
func lightChange(ev *lightEvent, from, to int64) (change, bool) {
	if ev.Data == nil {
		return change{}, false
	}
	o := &ev.Data.Object
	if o.head.ID == "" || o.head.Created >= from && o.head.Created < to {
		return change{}, false
	}
	c := change{id: o.head.ID, Change: Change{EventID: ev.ID, EventType: ev.Type, At: unixUTC(ev.Created)}}
	var err error
	switch reconcile.ObjectKind(o.head.Object) {
	case reconcile.Charge:
		var ch stripe.Charge
		if err = json.Unmarshal(o.raw, &ch); err == nil {
			c.Object = chargeObject(&ch)
		}
	case reconcile.Refund:
		var r stripe.Refund
		if err = json.Unmarshal(o.raw, &r); err == nil {
			c.Object = refundObject(&r)
		}
	case reconcile.PaymentIntent:
		var p stripe.PaymentIntent
		if err = json.Unmarshal(o.raw, &p); err == nil {
			c.Object = paymentIntentObject(&p)
		}
	default:
		return change{}, false
	}
	// An object created beyond the years a Stamp holds is no account of
	// it: it is read again by id, which refuses it (checkRetrieved).
	c.ok = err == nil && c.Object.ID == o.head.ID && reconcile.StampHolds(unixUTC(o.head.Created))
	return c, true
}
