package matcher

import "math/bits"

// index maps distinct strings to the int32 positions of their owners. It
// is an open-addressing table of uint64 slots holding 32 bits of the
// string's hash (never zero, so a zero slot is empty) and the position;
// the strings stay where they are, and key(pos) fetches one back to
// confirm a match. Against a map[string]int32 at a million entries it
// holds no pointers (the garbage collector never scans it), takes a third
// of the memory, and most probes touch one cache line: the hash bits
// reject other strings without reading them.
//
// The hash is fixed (no random seed, as the matcher takes no randomness):
// it decides only where entries sit, never what a lookup finds.
type index struct {
	slots []uint64
	mask  uint64
}

// newIndex sizes an index for n strings at a load of at most one half,
// where linear probing stays short.
func newIndex(n int) index {
	size := 1 << max(4, bits.Len(uint(2*n)))
	return index{slots: make([]uint64, size), mask: uint64(size - 1)}
}

// hash returns s's first slot and its tag (the hash's high half, never 0).
func (x *index) hash(s string) (uint64, uint64) {
	h := hashString(s)
	return h & x.mask, h>>32 | 1
}

// add inserts s at pos, unless key already holds an equal string; it
// returns the position that holds s and whether it was added.
func (x *index) add(s string, pos int32, key func(int32) string) (int32, bool) {
	if p := x.find(s, key); p >= 0 {
		return p, false
	}
	x.addNew(s, pos)
	return pos, true
}

// addNew inserts s at pos; the caller knows that no equal string is in.
func (x *index) addNew(s string, pos int32) {
	p, tag := x.hash(s)
	for x.slots[p] != 0 {
		p = (p + 1) & x.mask
	}
	x.slots[p] = tag<<32 | uint64(uint32(pos))
}

// find returns the position of s, or -1; key(pos) fetches the string at
// pos.
func (x *index) find(s string, key func(int32) string) int32 {
	if len(x.slots) == 0 {
		return -1
	}
	p, tag := x.hash(s)
	for ; ; p = (p + 1) & x.mask {
		e := x.slots[p]
		if e == 0 {
			return -1
		}
		if e>>32 == tag && key(int32(uint32(e))) == s {
			return int32(uint32(e))
		}
	}
}

// hashString mixes s eight bytes at a time and finishes with MurmurHash3's
// 64-bit finaliser, so that both the low bits (the slot) and the high bits
// (the tag) depend on every byte.
func hashString(s string) uint64 {
	h := uint64(len(s)) * 0x9e3779b97f4a7c15
	for ; len(s) >= 8; s = s[8:] {
		v := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		h = bits.RotateLeft64(h^v*0xff51afd7ed558ccd, 31) * 0x9e3779b97f4a7c15
	}
	var v uint64
	for i := len(s) - 1; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	h ^= v * 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
