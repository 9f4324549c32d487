package sources

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	stripe "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/form"

	"reconcile"
)

// List pages are read lean (docs/design.md, "Reading the provider"). A
// first pass lists a million objects and as many events, and stripe-go
// read each page whole into a growing slice, had encoding/json check it,
// skip it and check it again on the way into its own types (every charge
// into a struct of some hundred fields), before the reader kept a handful
// of them: two thirds of a first pass's CPU. The reader needs of a
// charge, refund or payment intent only the members wireObject holds, and
// of an event what lightEvent holds. So a page goes through stripe-go's
// backend, as before (the same HTTP client, key, Stripe-Account header,
// and stripe-go's own reading of an error answer), but streamed: its body
// is read into a buffer the worker reuses and decoded in one pass with
// jsontext, which checks the whole of it as JSON and hands over the
// members the reader reads, skipping the rest without decoding them.
// checkPage then checks the page's shape on the same bytes, as before.
//
// What is read is read as encoding/json reads it into stripe-go's types,
// so that a page means what it meant: a member's name matches exactly, or
// unescaped and regardless of case; the last of equal names wins; null
// leaves a value unset; invalid UTF-8 becomes U+FFFD; a number must be an
// integer that fits; an expandable reference is a string (taken as it is,
// as stripe-go's ParseID takes it) or an object whose id is read. Where
// encoding/json would refuse a value the reader reads (a string amount, a
// metadata value that is not a string), the page is undecodable, a
// malformed response, retried. Unlike stripe-go, the reader does not look
// into members it does not read: a page whose unread members hold values
// stripe-go's types cannot take is read, not refused.

// listQuery is the query of one list page: the created range, the event
// types, and the list parameters (limit, cursor, Stripe-Account).
type listQuery struct {
	stripe.ListParams `form:"*"`
	Created           *stripe.RangeQueryParams `form:"created"`
	Types             []*string                `form:"types"`
	// Expand and Metadata are never set: stripe-go's CallStreaming looks
	// both up by name on every params struct it is given.
	Expand   []*string         `form:"expand"`
	Metadata map[string]string `form:"-"`
}

// pageReader reads list pages and decodes them; a worker takes one from
// pageReaders for a page and puts it back, so that a listing reuses a
// handful of buffers and decoders.
type pageReader struct {
	body  bytes.Buffer
	dec   jsontext.Decoder
	words map[string]string // status words and event types, by their JSON
	lower map[string]string // currencies, lower case, by their JSON
}

var pageReaders = sync.Pool{New: func() any { return &pageReader{words: map[string]string{}, lower: map[string]string{}} }}

// decodeOptions are encoding/json's leniencies (see above).
var decodeOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// fetch reads one page of the list at path into pr.body, and returns the
// response as stripe-go describes one it read (for checkPage and errors).
// stripe-go's backend builds the request (its URL and query, the key,
// Stripe-Version, the Stripe-Account header) and reads an error answer
// into a *stripe.Error, as its Call does; the request goes through the
// backend's own HTTP client. (Its CallStreaming would do the same, but
// dereferences a nil response when the request fails on the way: v79.12.)
func (s *Stripe) fetch(path string, q *listQuery, pr *pageReader) (*stripe.APIResponse, error) {
	b := s.backend
	var f form.Values
	form.AppendTo(&f, q)
	if !f.Empty() {
		path += "?" + f.Encode()
	}
	req, err := b.NewRequest(http.MethodGet, path, s.api.Charges.Key, "application/x-www-form-urlencoded", q.GetParams())
	if err != nil {
		return nil, err
	}
	res, err := b.HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	pr.body.Reset()
	if _, err := pr.body.ReadFrom(res.Body); err != nil {
		return nil, err
	}
	if res.StatusCode >= 400 {
		return nil, b.ResponseToError(res, bytes.Clone(pr.body.Bytes()))
	}
	return &stripe.APIResponse{Header: res.Header, RawJSON: pr.body.Bytes(), RequestID: res.Header.Get("Request-Id"),
		Status: res.Status, StatusCode: res.StatusCode}, nil
}

// errUndecodable is a body the reader cannot decode; why says where, never
// what it held.
func errUndecodable(res *stripe.APIResponse, why string) *RequestError {
	return malformed(res, undecodable+": "+why)
}

// decodeErr turns the decoder's error into a malformed response: the
// words encoding/json used for a body cut short, else only that the
// JSON is invalid and at which byte (its message may quote a name or a
// value: other people's data).
func decodeErr(res *stripe.APIResponse, d *jsontext.Decoder, err error) error {
	var re *RequestError
	var et errType
	switch {
	case errors.As(err, &re):
		return re
	case errors.As(err, &et):
		return errUndecodable(res, string(et))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errUndecodable(res, "unexpected end of JSON input")
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		return errUndecodable(res, "invalid JSON at byte "+itoa(se.ByteOffset))
	}
	return errUndecodable(res, "invalid JSON")
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			break
		}
	}
	return string(b[i:])
}

// page decodes the list page in pr.body: each entry of its data array
// through entry, which must read exactly one value, and has_more.
func (pr *pageReader) page(res *stripe.APIResponse, entry func(*pageReader) error) (hasMore bool, err error) {
	d := &pr.dec
	d.Reset(&pr.body, decodeOptions...)
	defer func() {
		if err != nil {
			err = decodeErr(res, d, err)
		}
	}()
	switch d.PeekKind() {
	case '{':
	case 'n':
		// A page of null decodes as an empty page; checkPage says so.
		if _, err := d.ReadValue(); err != nil {
			return false, err
		}
		return false, pr.end()
	case 0:
		_, err := d.ReadToken()
		return false, err
	default:
		return false, errUndecodable(res, "the page is not a JSON object")
	}
	if _, err := d.ReadToken(); err != nil {
		return false, err
	}
	for d.PeekKind() != '}' {
		name, err := pr.member(d)
		if err != nil {
			return false, err
		}
		switch name {
		case "data":
			switch d.PeekKind() {
			case '[':
				if _, err := d.ReadToken(); err != nil {
					return false, err
				}
				for d.PeekKind() != ']' {
					if err := entry(pr); err != nil {
						return false, err
					}
				}
				if _, err := d.ReadToken(); err != nil {
					return false, err
				}
				continue
			case 'n':
			default:
				return false, errUndecodable(res, "the page's data is not an array")
			}
		case "has_more":
			v, err := d.ReadValue()
			if err != nil {
				return false, err
			}
			switch v.Kind() {
			case 't', 'f':
				hasMore = v.Kind() == 't'
			case 'n':
			default:
				return false, errUndecodable(res, "the page's has_more is not a boolean")
			}
			continue
		}
		if err := d.SkipValue(); err != nil {
			return false, err
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return false, err
	}
	return hasMore, pr.end()
}

// end checks that nothing follows the page's value.
func (pr *pageReader) end() error {
	if _, err := pr.dec.ReadToken(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the page")
		}
		return err
	}
	return nil
}

// member reads an object member's name and returns the name of the
// reader's it matches as encoding/json matches a name to a field:
// exactly, or unescaped and regardless of case; "" for any other. The
// value is the decoder's next.
func (pr *pageReader) member(d *jsontext.Decoder) (string, error) {
	v, err := d.ReadValue()
	if err != nil {
		return "", err
	}
	raw := v[1 : len(v)-1]
	plain := true
	for _, c := range raw {
		if keyBytes[c] != keyPlain {
			plain = false
			break
		}
	}
	if n := knownName(raw); n != "" || plain {
		return n, nil
	}
	name := string(raw)
	if bytes.IndexByte(raw, '\\') >= 0 {
		if name, err = unquote(v); err != nil {
			return "", err
		}
	}
	for _, n := range readNames {
		if strings.EqualFold(name, n) {
			return n, nil
		}
	}
	return "", nil
}

// readNames are the members the reader reads, of a page, an object or an
// event.
var readNames = []string{"data", "has_more", "id", "object", "amount", "currency", "status", "captured",
	"amount_refunded", "metadata", "created", "payment_intent", "customer", "charge", "latest_charge",
	"type", "request", "idempotency_key"}

// knownName is raw if it is exactly one of readNames (no allocation: the
// switch compares bytes).
func knownName(raw []byte) string {
	switch string(raw) {
	case "data":
		return "data"
	case "has_more":
		return "has_more"
	case "id":
		return "id"
	case "object":
		return "object"
	case "amount":
		return "amount"
	case "currency":
		return "currency"
	case "status":
		return "status"
	case "captured":
		return "captured"
	case "amount_refunded":
		return "amount_refunded"
	case "metadata":
		return "metadata"
	case "created":
		return "created"
	case "payment_intent":
		return "payment_intent"
	case "customer":
		return "customer"
	case "charge":
		return "charge"
	case "latest_charge":
		return "latest_charge"
	case "type":
		return "type"
	case "request":
		return "request"
	case "idempotency_key":
		return "idempotency_key"
	}
	return ""
}

// errType is a value encoding/json would not put into the field it names.
type errType string

func (e errType) Error() string { return string(e) }

// str reads a string value as encoding/json reads it into a string: null
// leaves it unset (ok false), anything but a string is refused.
func (pr *pageReader) str(field string) (s string, ok bool, err error) {
	v, err := pr.dec.ReadValue()
	if err != nil {
		return "", false, err
	}
	switch v.Kind() {
	case 'n':
		return "", false, nil
	case '"':
	default:
		return "", false, errType(field + " is not a string")
	}
	raw := v[1 : len(v)-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw), true, nil
	}
	s, err = unquote(v)
	return s, err == nil, err
}

// strInto reads a string into *dst, leaving it as it is for null.
func (pr *pageReader) strInto(dst *string, field string) error {
	s, ok, err := pr.str(field)
	if ok {
		*dst = s
	}
	return err
}

// unquote is the JSON string v (valid JSON) as encoding/json reads it:
// escapes resolved, invalid UTF-8 and lone surrogates as U+FFFD. Only a
// string holding either comes here.
func unquote(v []byte) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", errType("a string is not one")
	}
	return s, nil
}

// word reads a string a million objects repeat (a currency, lower case;
// a status word; an event type) as one string per distinct value.
func (pr *pageReader) word(field string, lower bool) (string, bool, error) {
	v, err := pr.dec.ReadValue()
	if err != nil {
		return "", false, err
	}
	switch v.Kind() {
	case 'n':
		return "", false, nil
	case '"':
	default:
		return "", false, errType(field + " is not a string")
	}
	seen := pr.words
	if lower {
		seen = pr.lower
	}
	// A lookup by a converted key copies nothing.
	if w, ok := seen[string(v)]; ok {
		return w, true, nil
	}
	w, err := unquote(v)
	if err != nil {
		return "", false, err
	}
	if lower {
		w = strings.ToLower(w)
	}
	w = word(w)
	if len(seen) < 1024 {
		seen[string(v)] = w
	}
	return w, true, nil
}

// created reads a creation time in Unix seconds, which must lie within
// the years a reconcile.Stamp holds: no Stripe object was created
// beyond them, and one said to be is a malformed response, not a time
// to wrap around.
func (pr *pageReader) created(field string) (int64, error) {
	n, err := pr.int(field)
	if err == nil && !reconcile.StampHolds(unixUTC(n)) {
		return 0, errType(field + " is beyond the years ±" + strconv.Itoa(reconcile.StampRange))
	}
	return n, err
}

// int reads a number as encoding/json reads it into an int64: null leaves
// it unset; a fraction, an exponent, a value beyond int64 or anything but
// a number is refused.
func (pr *pageReader) int(field string) (int64, error) {
	v, err := pr.dec.ReadValue()
	if err != nil {
		return 0, err
	}
	switch v.Kind() {
	case 'n':
		return 0, nil
	case '0':
	default:
		return 0, errType(field + " is not a number")
	}
	neg := v[0] == '-'
	digits := v
	if neg {
		digits = v[1:]
	}
	var n uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, errType(field + " is not an integer")
		}
		d := uint64(c - '0')
		if n > (1<<63-d)/10 {
			return 0, errType(field + " does not fit in 64 bits")
		}
		n = n*10 + d
	}
	switch {
	case neg:
		return -int64(n), nil
	case n > 1<<63-1:
		return 0, errType(field + " does not fit in 64 bits")
	}
	return int64(n), nil
}

// bool reads a boolean as encoding/json reads it into a bool: null leaves
// it unset.
func (pr *pageReader) bool(field string) (bool, error) {
	v, err := pr.dec.ReadValue()
	if err != nil {
		return false, err
	}
	switch v.Kind() {
	case 't':
		return true, nil
	case 'f', 'n':
		return false, nil
	}
	return false, errType(field + " is not a boolean")
}

// ref reads an expandable reference as stripe-go reads one into its
// pointer: a string is the id, as it is (ParseID does not unescape it); an
// object is the expanded object, whose id is read; null is none.
func (pr *pageReader) ref(field string) (string, error) {
	d := &pr.dec
	switch d.PeekKind() {
	case '"':
		v, err := d.ReadValue()
		if err != nil {
			return "", err
		}
		return string(v[1 : len(v)-1]), nil
	case '{':
		id := ""
		err := pr.object(func(name string) error {
			if name != "id" {
				return d.SkipValue()
			}
			return pr.strInto(&id, field+".id")
		})
		return id, err
	case 'n':
		_, err := d.ReadValue()
		return "", err
	case 0:
		_, err := d.ReadValue()
		return "", err
	}
	return "", errType(field + " is neither an id nor an object")
}

// object reads a JSON object member by member: each must read its value.
func (pr *pageReader) object(each func(name string) error) error {
	d := &pr.dec
	if _, err := d.ReadToken(); err != nil {
		return err
	}
	for d.PeekKind() != '}' {
		if d.PeekKind() == 0 {
			_, err := d.ReadToken()
			return err
		}
		name, err := pr.member(d)
		if err != nil {
			return err
		}
		if err := each(name); err != nil {
			return err
		}
	}
	_, err := d.ReadToken()
	return err
}

// objectNext reports whether an object comes next, which the caller then
// reads; a null is read and is none (false); anything else is refused as
// what, as encoding/json refuses it for a pointer to a struct or a map.
func (pr *pageReader) objectNext(what string) (bool, error) {
	d := &pr.dec
	switch d.PeekKind() {
	case '{':
		return true, nil
	case 'n', 0:
		_, err := d.ReadValue()
		return false, err
	}
	return false, errType(what + " is not an object")
}

// metadata reads a metadata object as encoding/json reads it into a
// map[string]string: null is none, each value must be a string, the last
// of equal keys wins. An empty one is none, as copyMetadata has it.
func (pr *pageReader) metadata() (map[string]string, error) {
	d := &pr.dec
	if ok, err := pr.objectNext("metadata"); !ok {
		return nil, err
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, err
	}
	var m map[string]string
	for d.PeekKind() != '}' {
		if d.PeekKind() == 0 {
			_, err := d.ReadToken()
			return nil, err
		}
		k, _, err := pr.str("metadata key")
		if err != nil {
			return nil, err
		}
		v, _, err := pr.str("metadata value")
		if err != nil {
			return nil, err
		}
		if m == nil {
			m = make(map[string]string, 2)
		}
		m[k] = v
	}
	_, err := d.ReadToken()
	return m, err
}

// wireObject reads one entry of a page of objects of kind: a string is an
// object of that id alone (stripe-go's UnmarshalJSON takes it so), null
// an object of nothing (checkPage refuses both). Of a charge, a refund or
// a payment intent it reads only the members stripe-go's type for the
// kind has, and skips the rest: a Stripe object has about forty, and one
// switch tells them apart (a map of the wanted names per kind cost a
// first pass's forty million lookups 0.44 s of CPU).
func (pr *pageReader) wireObject(kind reconcile.ObjectKind) (wireObject, error) {
	w := wireObject{kind: kind}
	d := &pr.dec
	switch d.PeekKind() {
	case '{':
	case '"':
		id, err := pr.ref("the entry")
		w.id = id
		return w, err
	case 'n':
		_, err := d.ReadValue()
		return w, err
	case 0:
		_, err := d.ReadValue()
		return w, err
	default:
		return w, errType("an entry is not an object")
	}
	charge, refund, intent := kind == reconcile.Charge, kind == reconcile.Refund, kind == reconcile.PaymentIntent
	if !charge && !refund && !intent {
		// No kind the reader lists: nothing of it is read.
		return w, d.SkipValue()
	}
	err := pr.object(func(name string) error {
		var err error
		switch {
		case name == "id":
			w.id, _, err = pr.str(name)
		case name == "amount":
			w.amount, err = pr.int(name)
		case name == "currency":
			w.currency, _, err = pr.word(name, true)
		case name == "status":
			w.status, _, err = pr.word(name, false)
		case name == "metadata":
			w.metadata, err = pr.metadata()
		case name == "created":
			w.created, err = pr.created(name)
		case name == "captured" && charge:
			w.captured, err = pr.bool(name)
		case name == "amount_refunded" && charge:
			w.amountRefunded, err = pr.int(name)
		case name == "payment_intent" && (charge || refund):
			w.paymentIntent, err = pr.ref(name)
		case name == "customer" && (charge || intent):
			w.customer, err = pr.ref(name)
		case name == "charge" && refund:
			w.charge, err = pr.ref(name)
		case name == "latest_charge" && intent:
			w.latestCharge, err = pr.ref(name)
		default:
			err = d.SkipValue()
		}
		return err
	})
	return w, err
}

// event reads one entry of a page of events into ev (see lightEvent), with
// its data.object's JSON in ev.Data.Object.raw, valid only until the
// reader's next read.
func (pr *pageReader) event(ev *lightEvent) error {
	d := &pr.dec
	*ev = lightEvent{}
	if ok, err := pr.objectNext("an event"); !ok {
		return err
	}
	return pr.object(func(name string) error {
		var err error
		switch name {
		case "id":
			ev.ID, _, err = pr.str(name)
		case "type":
			ev.Type, _, err = pr.word(name, false)
		case "created":
			ev.Created, err = pr.created(name)
		case "request":
			err = pr.request(ev)
		case "data":
			err = pr.eventData(ev)
		default:
			err = d.SkipValue()
		}
		return err
	})
}

// request reads an event's request: null is none.
func (pr *pageReader) request(ev *lightEvent) error {
	d := &pr.dec
	if ok, err := pr.objectNext("an event's request"); !ok {
		ev.Request = nil
		return err
	}
	if ev.Request == nil {
		ev.Request = &eventRequest{}
	}
	return pr.object(func(name string) error {
		var err error
		switch name {
		case "id":
			err = pr.strInto(&ev.Request.ID, "request.id")
		case "idempotency_key":
			err = pr.strInto(&ev.Request.IdempotencyKey, "request.idempotency_key")
		default:
			err = d.SkipValue()
		}
		return err
	})
}

// eventData reads an event's data: null is none; its object is kept as
// raw JSON with its head read (eventObject).
func (pr *pageReader) eventData(ev *lightEvent) error {
	d := &pr.dec
	if ok, err := pr.objectNext("an event's data"); !ok {
		ev.Data = nil
		return err
	}
	if ev.Data == nil {
		ev.Data = &eventData{}
	}
	return pr.object(func(name string) error {
		if name != "object" {
			return d.SkipValue()
		}
		v, err := d.ReadValue()
		if err != nil {
			return err
		}
		return ev.Data.Object.UnmarshalJSON(v)
	})
}
