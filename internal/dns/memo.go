package dns

import "sync"

// memoLimit bounds a memo: query names are chosen by clients, so a flood of
// random names must not grow it without end. Past the limit nothing is added
// until the next snapshot starts a fresh memo.
const memoLimit = 16384

// memo holds packed authoritative replies computed from one snapshot, keyed
// by everything in the request that the reply depends on (memoKey). It lives
// and dies with its snapshot, so it never serves anything stale.
type memo struct {
	mu sync.RWMutex
	m  map[string][]byte
}

func newMemo() *memo { return &memo{m: make(map[string][]byte)} }

func (c *memo) get(key []byte) []byte {
	c.mu.RLock()
	b := c.m[string(key)]
	c.mu.RUnlock()
	return b
}

func (c *memo) put(key string, b []byte) {
	c.mu.Lock()
	if len(c.m) < memoLimit {
		c.m[key] = b
	}
	c.mu.Unlock()
}

// memoKey appends to dst the key of a plain query: transport, the two flag
// bytes, the EDNS0 OPT fixed fields (buffer size, extended rcode, version,
// DO) and the question exactly as sent (so the query's case is part of the
// key). ok is false for anything else: compressed or malformed questions,
// more than one question, records other than one option-less OPT, trailing
// bytes. Those take the slow path, which handles every request.
func memoKey(dst, pkt []byte, tr transport) (key []byte, ok bool) {
	if len(pkt) < 17 || pkt[2]&0x80 != 0 {
		return dst, false
	}
	if pkt[4] != 0 || pkt[5] != 1 || pkt[6] != 0 || pkt[7] != 0 || pkt[8] != 0 || pkt[9] != 0 || pkt[10] != 0 || pkt[11] > 1 {
		return dst, false
	}
	p := 12
	for {
		if p >= len(pkt) {
			return dst, false
		}
		l := int(pkt[p])
		if l&0xC0 != 0 {
			return dst, false
		}
		p += 1 + l
		if l == 0 {
			break
		}
		if p-12 > 255 {
			return dst, false
		}
	}
	p += 4
	if p > len(pkt) {
		return dst, false
	}
	q := pkt[12:p]
	dst = append(dst, byte(tr), pkt[2], pkt[3])
	if pkt[11] == 1 {
		// root name, type OPT, class = UDP size, TTL = ext-rcode/version/flags, rdlen 0
		if len(pkt) != p+11 || pkt[p] != 0 || pkt[p+1] != 0 || pkt[p+2] != 41 || pkt[p+9] != 0 || pkt[p+10] != 0 {
			return dst, false
		}
		dst = append(dst, 1)
		dst = append(dst, pkt[p+3:p+9]...)
	} else {
		if len(pkt) != p {
			return dst, false
		}
		dst = append(dst, 0)
	}
	return append(dst, q...), true
}
