package redact

import (
	"maps"
	"slices"
)

// Metadata is provider metadata as it may be kept at rest: every key and
// value passed through String (card numbers down to their last four
// digits, e-mail addresses and secrets gone), except the values of the
// keys in exact (an empty one names none), which are kept as they are. Exact are the keys linking
// reads (an obligation id, an idempotency key): masking one of their
// values would change what it links to, and the same value is in the
// application's own table anyway (docs/design.md, "Untrusted text").
//
// A key that masks to a key already taken, or to one of exact, is left
// out, so that masking never makes a value readable under a key linking
// reads; of two keys that mask to one, the first in sorted order stays.
// m is not changed; it is returned itself when nothing needs masking, as
// almost all metadata does not.
func Metadata(m map[string]string, exact ...string) map[string]string {
	isExact := func(k string) bool { return k != "" && slices.Contains(exact, k) }
	masked := false
	for k, v := range m {
		if isExact(k) {
			continue
		}
		if String(k) != k || String(v) != v {
			masked = true
			break
		}
	}
	if !masked {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if isExact(k) {
			out[k] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if isExact(k) {
			continue
		}
		mk := String(k)
		if _, taken := out[mk]; taken || isExact(mk) {
			continue
		}
		out[mk] = String(m[k])
	}
	return out
}
