package stripesim

import (
	"encoding/json"
	"strings"
)

// Shape is a way a 200 answer is malformed, for Faults.Malformed: each is
// a body that stripe-go decodes without complaint (but ShapeTruncated)
// into zero values where the data should be.
type Shape string

// The shapes. A list page is otherwise as it should be: the same entries,
// the same has_more, the same url.
const (
	// ShapeEmpty is the body {}: a page without object, data and
	// has_more; an object without any member.
	ShapeEmpty Shape = "empty"
	// ShapeNoData is a page without data.
	ShapeNoData Shape = "no_data"
	// ShapeNullData is a page whose data is null.
	ShapeNullData Shape = "null_data"
	// ShapeNoHasMore is a page without has_more.
	ShapeNoHasMore Shape = "no_has_more"
	// ShapeNotList is a page whose object is "search_result", not "list".
	ShapeNotList Shape = "not_list"
	// ShapeTruncated is the first half of the body, sent with a
	// Content-Length of that half: a whole HTTP response holding cut JSON.
	// (DropEvery is the other cut: the whole length announced, half sent,
	// the connection closed.)
	ShapeTruncated Shape = "truncated"
	// ShapeFarCreated is a page whose every entry, or an object by id,
	// was created in the year 316,889,355: an integer stripe-go decodes,
	// but no time the reconciler holds.
	ShapeFarCreated Shape = "far_created"
)

// farCreated is ShapeFarCreated's created, in Unix seconds.
const farCreated = "10000000000000000"

const withoutPrefix = "without:"

// Without is the shape of a page whose every entry lacks the member at
// path, or of an object by id that lacks it: a top-level member
// ("amount", "currency", "status", "created", "id"; an event's "type") or,
// dotted, one inside it ("data.object": an event without its object).
func Without(path string) Shape { return Shape(withoutPrefix + path) }

// valid reports whether sh is one of the shapes ("" is none).
func (sh Shape) valid() bool {
	switch sh {
	case "", ShapeEmpty, ShapeNoData, ShapeNullData, ShapeNoHasMore, ShapeNotList, ShapeTruncated, ShapeFarCreated:
		return true
	}
	path, ok := strings.CutPrefix(string(sh), withoutPrefix)
	return ok && path != "" && !strings.HasPrefix(path, ".") && !strings.HasSuffix(path, ".") && !strings.Contains(path, "..")
}

// forPages reports whether sh is a page shape, which a retrieval by id
// does not have.
func (sh Shape) forPages() bool {
	switch sh {
	case ShapeNoData, ShapeNullData, ShapeNoHasMore, ShapeNotList:
		return true
	}
	return false
}

// malform returns the body to serve in st's malformed shape instead of
// body (a list page when isPage, else an object by id), when this request
// to list name is one st's Malformed applies to and the shape changes it.
func (st *faultState) malform(name string, isPage bool, body []byte) ([]byte, bool) {
	f := st.f
	if f.Malformed == "" || f.MalformedList != "" && f.MalformedList != name || !isPage && f.Malformed.forPages() {
		return nil, false
	}
	if n := st.malformedSeq.Add(1); f.MalformedEvery > 1 && n%uint64(f.MalformedEvery) != 0 {
		return nil, false
	}
	switch f.Malformed {
	case ShapeEmpty:
		return []byte("{}\n"), true
	case ShapeTruncated:
		return body[:len(body)/2], true
	}
	var entry func([]byte) ([]byte, bool) // what the shape does to an object
	if path, ok := strings.CutPrefix(string(f.Malformed), withoutPrefix); ok {
		entry = func(obj []byte) ([]byte, bool) { return without(obj, path) }
	} else if f.Malformed == ShapeFarCreated {
		entry = farFrom
	}
	if entry != nil {
		if !isPage {
			return entry(body)
		}
		return editPage(body, func(p map[string]json.RawMessage) bool {
			var data []json.RawMessage
			if json.Unmarshal(p["data"], &data) != nil {
				return false
			}
			changed := false
			for i, d := range data {
				if b, ok := entry(d); ok {
					data[i], changed = b, true
				}
			}
			p["data"] = mustMarshal(data)
			return changed
		})
	}
	return editPage(body, func(p map[string]json.RawMessage) bool {
		switch f.Malformed {
		case ShapeNoData:
			delete(p, "data")
		case ShapeNullData:
			p["data"] = json.RawMessage("null")
		case ShapeNoHasMore:
			delete(p, "has_more")
		case ShapeNotList:
			p["object"] = json.RawMessage(`"search_result"`)
		}
		return true
	})
}

// editPage applies edit to a rendered page's members and renders it again
// (its keys then sorted, which a reader must take as well as any order),
// if edit changed it.
func editPage(body []byte, edit func(map[string]json.RawMessage) bool) ([]byte, bool) {
	var p map[string]json.RawMessage
	if json.Unmarshal(body, &p) != nil || !edit(p) {
		return nil, false
	}
	return append(mustMarshal(p), '\n'), true
}

// without removes the member at the dotted path from the JSON object obj,
// if it has it.
func without(obj []byte, path string) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return nil, false
	}
	name, rest, nested := strings.Cut(path, ".")
	v, ok := m[name]
	switch {
	case !ok:
		return nil, false
	case nested:
		inner, ok := without(v, rest)
		if !ok {
			return nil, false
		}
		m[name] = inner
	default:
		delete(m, name)
	}
	return mustMarshal(m), true
}

// farFrom sets the JSON object obj's created to farCreated, if it has
// one.
func farFrom(obj []byte) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil || m["created"] == nil {
		return nil, false
	}
	m["created"] = json.RawMessage(farCreated)
	return mustMarshal(m), true
}

// mustMarshal renders values decoded from JSON the server rendered, which
// cannot fail.
func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("stripesim: render a malformed body: " + err.Error())
	}
	return b
}
