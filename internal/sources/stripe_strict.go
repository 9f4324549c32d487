package sources

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	stripe "github.com/stripe/stripe-go/v79"

	"reconcile"
)

// Stripe's answers are checked before they are believed. encoding/json
// decodes a missing member as its zero value: a page answered {} decodes
// as a complete, empty page (no data, has_more false), and a charge
// without its amount as a charge of 0. A listing built on such a page
// lacks what the page did not hold, the run reports on it as if it were
// whole, and the mirror then vouches for the stretch it covered. So every
// list page and every object retrieved by id must hold what the reader
// relies on; anything else is a malformed response, retried like a 5xx
// and, if it persists, a failed list or a failed lookup.
//
// Presence cannot be read from the decoded values (ListMeta has no
// object, a missing has_more decodes as false, an amount of 0 is an
// amount), so it is read from the raw body that stripe-go keeps, after
// stripe-go decoded it (so it is valid JSON): one pass over the bytes with
// the scanner of stripe_events.go, through the page's top-level members
// and each entry's, skipping every other value without decoding it. Keys
// are matched as encoding/json matches them to fields (exactly, or
// unescaped and regardless of case), so that what the check sees is what
// the decoder read.

// member is a set of the members the checks look for.
type member uint16

const (
	mID member = 1 << iota
	mObject
	mAmount
	mCurrency
	mStatus
	mCreated
	mType
	mData
	mHasMore
)

// memberNames are the members' keys, in the order a message names them.
var memberNames = [...]struct {
	m    member
	name string
}{
	{mObject, "object"}, {mData, "data"}, {mHasMore, "has_more"},
	{mID, "id"}, {mAmount, "amount"}, {mCurrency, "currency"}, {mStatus, "status"},
	{mCreated, "created"}, {mType, "type"},
}

// shape is what one kind of object must hold.
type shape struct {
	what string // Stripe's name for the object, for messages
	need member
}

var (
	chargeShape        = shape{"charge", mID | mAmount | mCurrency | mStatus | mCreated}
	refundShape        = shape{"refund", mID | mAmount | mCurrency | mStatus | mCreated}
	paymentIntentShape = shape{"payment_intent", mID | mAmount | mCurrency | mStatus | mCreated}
	// An event's mData is data.object: an object with an id.
	eventShape = shape{"event", mID | mType | mCreated | mData}
)

// checkPage says whether a list page that stripe-go decoded holds what the
// reader relies on: object "list", a data array, a boolean has_more, and
// in data only entries of shape sh. A page that does not is a malformed
// response (retried); the error names what it lacks, never a value.
func checkPage(res *stripe.APIResponse, sh shape) error {
	if res == nil {
		return malformed(nil, "malformed list page: no response body")
	}
	b := res.RawJSON
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return malformed(res, "malformed list page: not a JSON object")
	}
	var have member
	i++
	for {
		key, plain, start, ok := nextMember(b, i)
		if !ok {
			if start < 0 {
				return malformed(res, "malformed list page: cut short")
			}
			break
		}
		m := memberOf(key, plain) & (mObject | mData | mHasMore)
		if m == mData && start < len(b) && b[start] == '[' {
			end, why := checkEntries(b, start, sh)
			if why != "" {
				return malformed(res, why)
			}
			i, have = end, have|mData
			continue
		}
		i = valueEnd(b, start)
		if i < 0 {
			return malformed(res, "malformed list page: cut short")
		}
		v := b[start:i]
		switch m {
		case mObject:
			have = set(have, mObject, isString(v, "list"), v)
		case mHasMore:
			have = set(have, mHasMore, string(v) == "true" || string(v) == "false", v)
		case mData:
			have &^= mData // null, or not an array: decoded as no data
		}
	}
	if missing := (mObject | mData | mHasMore) &^ have; missing != 0 {
		return malformed(res, "malformed list page: no "+names(missing, false))
	}
	return nil
}

// checkEntries checks the entries of the data array at b[i] and returns
// the index past the array, or why it is malformed.
func checkEntries(b []byte, i int, sh shape) (end int, why string) {
	i++
	for n := 1; ; n++ {
		at, ok := nextElement(b, i)
		if !ok {
			if at < 0 {
				return -1, "malformed list page: cut short"
			}
			return at + 1, ""
		}
		end, have, id := scanEntry(b, at, sh)
		if end < 0 {
			return -1, "malformed list page: cut short"
		}
		if missing := sh.need &^ have; missing != 0 {
			return -1, "malformed " + sh.what + " " + entryName(id, n) + ": no " + names(missing, true)
		}
		i = end
	}
}

// checkObject says whether an object retrieved by id holds what the reader
// relies on (sh); id is the id asked for, which names it in the message.
func checkObject(res *stripe.APIResponse, sh shape, id string) error {
	if res == nil {
		return malformed(nil, "malformed "+sh.what+" "+id+": no response body")
	}
	i := skipSpace(res.RawJSON, 0)
	if i >= len(res.RawJSON) || res.RawJSON[i] != '{' {
		return malformed(res, "malformed "+sh.what+" "+id+": not a JSON object")
	}
	end, have, _ := scanEntry(res.RawJSON, i, sh)
	if end < 0 {
		return malformed(res, "malformed "+sh.what+" "+id+": cut short")
	}
	if missing := sh.need &^ have; missing != 0 {
		return malformed(res, "malformed "+sh.what+" "+id+": no "+names(missing, true))
	}
	return nil
}

// checkRetrieved says whether an object retrieved by id holds what the
// reader relies on (checkObject) and was created (created, as stripe-go
// decoded it) within the years a reconcile.Stamp holds, as the lean page
// reader asks of a page's: no Stripe object was created beyond them, and
// one said to be is a malformed answer, not a time to wrap around.
func checkRetrieved(res *stripe.APIResponse, sh shape, id string, created int64) error {
	if err := checkObject(res, sh, id); err != nil {
		return err
	}
	if !reconcile.StampHolds(unixUTC(created)) {
		return malformed(res, "malformed "+sh.what+" "+id+": created is beyond the years ±"+strconv.Itoa(reconcile.StampRange))
	}
	return nil
}

// scanEntry reads the members of the object at b[i] that sh needs and
// returns the index past it (-1 where b breaks off), the members it holds
// and its id (a JSON string, quotes included). A value that is not an
// object holds none.
func scanEntry(b []byte, i int, sh shape) (end int, have member, id []byte) {
	if i >= len(b) || b[i] != '{' {
		return valueEnd(b, i), 0, nil
	}
	i++
	for {
		key, plain, start, ok := nextMember(b, i)
		if !ok {
			if start < 0 {
				return -1, have, id
			}
			return start + 1, have, id
		}
		// Only an event needs mData, its data.object.
		m := memberOf(key, plain) & sh.need
		if m == mData {
			var good bool
			i, good = dataObjectHasID(b, start)
			if i < 0 {
				return -1, have, id
			}
			// Last one wins, as in the decoder; data is a pointer, which a
			// null sets to nil.
			if good {
				have |= mData
			} else {
				have &^= mData
			}
			continue
		}
		i = valueEnd(b, start)
		if i < 0 {
			return -1, have, id
		}
		if m == 0 {
			continue
		}
		v := b[start:i]
		if len(v) == 0 {
			return -1, have, id
		}
		switch m {
		case mID, mCurrency, mStatus, mType:
			have = set(have, m, len(v) > 2 && v[0] == '"', v)
			if m == mID && have&mID != 0 {
				id = v
			}
		case mAmount, mCreated:
			have = set(have, m, v[0] == '-' || v[0] >= '0' && v[0] <= '9', v)
		}
	}
}

// dataObjectHasID scans an event's data value at b[i] and returns the
// index past it and whether it holds an object member that is an object
// with a non-empty string id.
func dataObjectHasID(b []byte, i int) (end int, good bool) {
	if i >= len(b) || b[i] != '{' {
		return valueEnd(b, i), false
	}
	i++
	for {
		key, plain, start, ok := nextMember(b, i)
		if !ok {
			if start < 0 {
				return -1, false
			}
			return start + 1, good
		}
		if memberOf(key, plain) != mObject {
			if i = valueEnd(b, start); i < 0 {
				return -1, false
			}
			continue
		}
		// data.object decodes through eventObject, which a null or a
		// non-object leaves without a head: last one wins.
		if i, good = objectHasID(b, start); i < 0 {
			return -1, false
		}
	}
}

// objectHasID returns the index past the value at b[i] and whether it is
// an object whose first id member is a non-empty string. Past that id the
// rest of the object (a kilobyte of charge) is skipped without reading
// its keys: the events list is the longest, and an event's object with
// two ids is not a shape to weigh that against.
func objectHasID(b []byte, i int) (end int, good bool) {
	if i >= len(b) || b[i] != '{' {
		return valueEnd(b, i), false
	}
	i++
	for {
		key, plain, start, ok := nextMember(b, i)
		if !ok {
			if start < 0 {
				return -1, false
			}
			return start + 1, false
		}
		if i = valueEnd(b, start); i < 0 {
			return -1, false
		}
		if memberOf(key, plain) == mID {
			return restEnd(b, i), i-start > 2 && b[start] == '"'
		}
	}
}

// set records one occurrence of member m with value v: present when good,
// absent when not, unchanged by a null, as encoding/json leaves a field
// that a later duplicate sets to null.
func set(have, m member, good bool, v []byte) member {
	switch {
	case good:
		return have | m
	case string(v) == "null":
		return have
	}
	return have &^ m
}

// isString reports whether the JSON value v is the string s.
func isString(v []byte, s string) bool {
	if len(v) < 2 || v[0] != '"' {
		return false
	}
	if string(v[1:len(v)-1]) == s {
		return true
	}
	var u string
	return json.Unmarshal(v, &u) == nil && u == s
}

// memberOf is the member a key names, as encoding/json would match it to
// a field: exactly, or failing that regardless of case, after unescaping;
// 0 for any other key. A plain key (lower case ASCII, no escape) can only
// match exactly.
func memberOf(key []byte, plain bool) member {
	switch string(key) {
	case "id":
		return mID
	case "object":
		return mObject
	case "amount":
		return mAmount
	case "currency":
		return mCurrency
	case "status":
		return mStatus
	case "created":
		return mCreated
	case "type":
		return mType
	case "data":
		return mData
	case "has_more":
		return mHasMore
	}
	if plain {
		return 0
	}
	k := string(key)
	if bytes.IndexByte(key, '\\') >= 0 && json.Unmarshal([]byte(`"`+k+`"`), &k) != nil {
		return 0
	}
	for _, n := range memberNames {
		if strings.EqualFold(k, n.name) {
			return n.m
		}
	}
	return 0
}

// names lists the members of m, for a message about a page or, inEntry,
// about one of its entries or an object retrieved by id.
func names(m member, inEntry bool) string {
	var out []string
	for _, n := range memberNames {
		if m&n.m == 0 {
			continue
		}
		switch n.m {
		case mObject:
			out = append(out, `object "list"`)
		case mData:
			if inEntry {
				out = append(out, "data.object with an id")
			} else {
				out = append(out, "data")
			}
		default:
			out = append(out, n.name)
		}
	}
	return strings.Join(out, ", ")
}

// entryName names an entry of a page in a message: by its id when the id
// reads as one (ids are not customer data; anything else in the body may
// be), else by its place on the page.
func entryName(id []byte, n int) string {
	if len(id) > 2 && len(id) <= 66 {
		plain := true
		for _, c := range id[1 : len(id)-1] {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
				plain = false
				break
			}
		}
		if plain {
			return string(id[1 : len(id)-1])
		}
	}
	return "#" + strconv.Itoa(n) + " of the page"
}

// malformed is the error of a response that decoded but does not hold what
// the reader relies on: retried, as a 5xx is.
func malformed(res *stripe.APIResponse, msg string) *RequestError {
	re := &RequestError{Message: msg, retry: true, malformed: true}
	if res != nil {
		re.Status, re.RequestID = res.StatusCode, res.RequestID
	}
	return re
}
