package loadbalancer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Pool is the set of addresses the controller hands out: one or more ranges
// of IPv4 and IPv6 addresses, as --lb-pool gives them. A Service gets one
// address of each of its families (spec.ipFamilies) from the ranges of that
// family, as one MetalLB IPAddressPool serves both.
type Pool struct {
	ranges []addrRange
	text   string
}

type addrRange struct{ first, last netip.Addr }

// ParsePool parses a comma-separated list of CIDRs ("192.168.56.240/28",
// "fd00:56::240/124") and ranges ("192.168.56.240-192.168.56.250"), the two
// forms MetalLB's IPAddressPool accepts, of either family. A CIDR leaves out
// the addresses hosts on the segment treat as special: an IPv4 CIDR of /30 or
// wider its network and broadcast addresses, an IPv6 CIDR of /126 or wider
// its first, the Subnet-Router anycast address routers answer for (RFC 4291
// 2.6.1). An empty string is an empty pool: every LoadBalancer Service stays
// pending, with an Event saying why.
func ParsePool(s string) (*Pool, error) {
	p := &Pool{}
	var texts []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		r, err := parseRange(part)
		if err != nil {
			return nil, fmt.Errorf("parsing address pool entry %q: %w", part, err)
		}
		for _, o := range p.ranges {
			if r.first.BitLen() == o.first.BitLen() && !(r.last.Less(o.first) || o.last.Less(r.first)) {
				return nil, fmt.Errorf("parsing address pool: %q overlaps %s", part, o)
			}
		}
		p.ranges = append(p.ranges, r)
		texts = append(texts, part)
	}
	p.text = strings.Join(texts, ",")
	return p, nil
}

// plainAddr rejects the spellings of an address that name no single address
// of one family on the lab network: a zone, or an IPv4 address written as
// IPv6.
func plainAddr(a netip.Addr) error {
	switch {
	case a.Zone() != "":
		return fmt.Errorf("%s has a zone; a pool address belongs to no single interface", a)
	case a.Is4In6():
		return fmt.Errorf("%s is an IPv4-mapped IPv6 address: write the IPv4 address %s", a, a.Unmap())
	}
	return nil
}

func parseRange(s string) (addrRange, error) {
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		a, err := netip.ParseAddr(strings.TrimSpace(lo))
		if err != nil {
			return addrRange{}, err
		}
		b, err := netip.ParseAddr(strings.TrimSpace(hi))
		if err != nil {
			return addrRange{}, err
		}
		if err := errors.Join(plainAddr(a), plainAddr(b)); err != nil {
			return addrRange{}, err
		}
		if a.Is4() != b.Is4() {
			return addrRange{}, fmt.Errorf("range mixes IPv4 and IPv6")
		}
		if b.Less(a) {
			return addrRange{}, fmt.Errorf("range ends before it starts")
		}
		return addrRange{a, b}, nil
	}
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return addrRange{}, fmt.Errorf("want a CIDR or FIRST-LAST: %w", err)
	}
	if err := plainAddr(pfx.Addr()); err != nil {
		return addrRange{}, err
	}
	pfx = pfx.Masked()
	first, last := pfx.Addr(), lastAddr(pfx)
	switch {
	case first.Is4() && pfx.Bits() <= 30:
		first, last = first.Next(), last.Prev()
	case first.Is6() && pfx.Bits() <= 126:
		first = first.Next()
	}
	return addrRange{first, last}, nil
}

// lastAddr is the last address of p: its host bits all set.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	host := len(b)*8 - p.Bits()
	for i := len(b) - 1; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func (r addrRange) String() string {
	if r.first == r.last {
		return r.first.String()
	}
	return r.first.String() + "-" + r.last.String()
}

func (r addrRange) family() corev1.IPFamily { return familyOf(r.first) }

// size is the number of addresses in r, math.MaxInt for an IPv6 range
// larger than that (a /64 never runs out).
func (r addrRange) size() int {
	a, b := r.first.As16(), r.last.As16()
	ahi, alo := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	bhi, blo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	// last - first as 128-bit numbers: (dhi, dlo).
	dlo, borrow := bits.Sub64(blo, alo, 0)
	dhi, _ := bits.Sub64(bhi, ahi, borrow)
	if dhi != 0 || dlo >= math.MaxInt {
		return math.MaxInt
	}
	return int(dlo) + 1
}

// familyOf is a's address family as a Service names it.
func familyOf(a netip.Addr) corev1.IPFamily {
	if a.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// String is the pool as it was given.
func (p *Pool) String() string { return p.text }

// Empty reports whether the pool has no address at all.
func (p *Pool) Empty() bool { return p == nil || len(p.ranges) == 0 }

// Has reports whether the pool has addresses of family f.
func (p *Pool) Has(f corev1.IPFamily) bool {
	if p == nil {
		return false
	}
	for _, r := range p.ranges {
		if r.family() == f {
			return true
		}
	}
	return false
}

// DualStack reports whether the pool has addresses of both families.
func (p *Pool) DualStack() bool { return p.Has(corev1.IPv4Protocol) && p.Has(corev1.IPv6Protocol) }

// Size is the number of addresses in the pool, at most math.MaxInt.
func (p *Pool) Size() int { return p.size(func(addrRange) bool { return true }) }

// SizeOf is the number of addresses of family f in the pool, at most
// math.MaxInt.
func (p *Pool) SizeOf(f corev1.IPFamily) int {
	return p.size(func(r addrRange) bool { return r.family() == f })
}

func (p *Pool) size(match func(addrRange) bool) int {
	if p == nil {
		return 0
	}
	n := 0
	for _, r := range p.ranges {
		if !match(r) {
			continue
		}
		s := r.size()
		if s > math.MaxInt-n {
			return math.MaxInt
		}
		n += s
	}
	return n
}

// Contains reports whether a is in the pool.
func (p *Pool) Contains(a netip.Addr) bool {
	if p == nil || !a.IsValid() {
		return false
	}
	for _, r := range p.ranges {
		if r.first.BitLen() == a.BitLen() && !a.Less(r.first) && !r.last.Less(a) {
			return true
		}
	}
	return false
}

// firstFree returns the lowest address of family f in the pool for which
// taken is false, trying the ranges in the order they were given.
func (p *Pool) firstFree(f corev1.IPFamily, taken func(netip.Addr) bool) (netip.Addr, bool) {
	if p == nil {
		return netip.Addr{}, false
	}
	for _, r := range p.ranges {
		if r.family() != f {
			continue
		}
		for a := r.first; ; a = a.Next() {
			if !taken(a) {
				return a, true
			}
			if a == r.last {
				break
			}
		}
	}
	return netip.Addr{}, false
}
