package loadbalancer

import (
	"fmt"
	"net/netip"
	"strings"
)

// Pool is the set of addresses the controller hands out: one or more ranges
// of IPv4 addresses, as --lb-pool gives them.
type Pool struct {
	ranges []addrRange
	text   string
}

type addrRange struct{ first, last netip.Addr }

// ParsePool parses a comma-separated list of CIDRs ("192.168.56.240/28") and
// ranges ("192.168.56.240-192.168.56.250"), the two forms MetalLB's
// IPAddressPool accepts. A CIDR of /30 or wider leaves out its network and
// broadcast addresses, which hosts on the segment would treat as special. An
// empty string is an empty pool: every LoadBalancer Service stays pending,
// with an Event saying why.
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
			if !(r.last.Less(o.first) || o.last.Less(r.first)) {
				return nil, fmt.Errorf("parsing address pool: %q overlaps %s", part, o)
			}
		}
		p.ranges = append(p.ranges, r)
		texts = append(texts, part)
	}
	p.text = strings.Join(texts, ",")
	return p, nil
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
		if !a.Is4() || !b.Is4() {
			return addrRange{}, fmt.Errorf("only IPv4 addresses are supported")
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
	if !pfx.Addr().Is4() {
		return addrRange{}, fmt.Errorf("only IPv4 addresses are supported")
	}
	pfx = pfx.Masked()
	first, last := pfx.Addr(), broadcast(pfx)
	if pfx.Bits() <= 30 {
		first, last = first.Next(), last.Prev()
	}
	return addrRange{first, last}, nil
}

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	host := 32 - p.Bits()
	for i := 3; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	return netip.AddrFrom4(b)
}

func (r addrRange) String() string {
	if r.first == r.last {
		return r.first.String()
	}
	return r.first.String() + "-" + r.last.String()
}

func (r addrRange) size() int {
	a, b := r.first.As4(), r.last.As4()
	return int(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3])) -
		int(uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3])) + 1
}

// String is the pool as it was given.
func (p *Pool) String() string { return p.text }

// Empty reports whether the pool has no address at all.
func (p *Pool) Empty() bool { return p == nil || len(p.ranges) == 0 }

// Size is the number of addresses in the pool.
func (p *Pool) Size() int {
	if p == nil {
		return 0
	}
	n := 0
	for _, r := range p.ranges {
		n += r.size()
	}
	return n
}

// Contains reports whether a is in the pool.
func (p *Pool) Contains(a netip.Addr) bool {
	if p == nil {
		return false
	}
	for _, r := range p.ranges {
		if !a.Less(r.first) && !r.last.Less(a) {
			return true
		}
	}
	return false
}

// firstFree returns the lowest address of the pool for which taken is false.
func (p *Pool) firstFree(taken func(netip.Addr) bool) (netip.Addr, bool) {
	if p == nil {
		return netip.Addr{}, false
	}
	for _, r := range p.ranges {
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
