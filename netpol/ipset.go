package netpol

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// IPSets is what the enforcer needs from the kernel's ipsets. Every method
// acts only on sets named KUBE-NP-*.
type IPSets interface {
	// List returns the enforcer's sets in the kernel, with their entries in
	// Set's canonical form (unsorted).
	List() (map[string]*Set, error)
	Create(name, typ string) error
	Add(name, typ, entry string) error
	Del(name, typ, entry string) error
	Destroy(name string) error
}

// NetlinkSets speaks ipset over netlink with vishvananda/netlink, in the
// network namespace the handle was opened in.
type NetlinkSets struct{ h *netlink.Handle }

// NewNetlinkSets returns IPSets for the caller's network namespace (h nil) or h's.
func NewNetlinkSets(h *netlink.Handle) (*NetlinkSets, error) {
	if h == nil {
		var err error
		if h, err = netlink.NewHandle(unix.NETLINK_NETFILTER); err != nil {
			return nil, fmt.Errorf("opening netlink for ipsets: %w", err)
		}
	}
	return &NetlinkSets{h: h}, nil
}

func (s *NetlinkSets) List() (map[string]*Set, error) {
	var all []netlink.IPSetResult
	var err error
	// A dump can be interrupted by a concurrent change; try again.
	for range 3 {
		if all, err = s.h.IpsetListAll(); err == nil || !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing ipsets: %w", err)
	}
	out := map[string]*Set{}
	for _, r := range all {
		if !OwnedSet(r.SetName) {
			continue
		}
		set := out[r.SetName]
		if set == nil {
			set = &Set{Name: r.SetName, Type: r.TypeName}
			out[r.SetName] = set
		}
		if set.Type == "" {
			set.Type = r.TypeName
		}
		for _, e := range r.Entries {
			set.Entries = append(set.Entries, formatEntry(set.Type, e))
		}
	}
	return out, nil
}

func (s *NetlinkSets) Create(name, typ string) error {
	if !OwnedSet(name) {
		return fmt.Errorf("refusing to create ipset %q: not the enforcer's", name)
	}
	if err := s.h.IpsetCreate(name, typ, netlink.IpsetCreateOptions{}); err != nil {
		return fmt.Errorf("creating ipset %s (%s): %w", name, typ, err)
	}
	return nil
}

func (s *NetlinkSets) Add(name, typ, entry string) error {
	e, err := parseEntry(typ, entry)
	if err != nil {
		return err
	}
	if err := s.h.IpsetAdd(name, e); err != nil && !errors.Is(err, nl.IPSetError(nl.IPSET_ERR_EXIST)) {
		return fmt.Errorf("adding %s to ipset %s: %w", entry, name, err)
	}
	return nil
}

func (s *NetlinkSets) Del(name, typ, entry string) error {
	e, err := parseEntry(typ, entry)
	if err != nil {
		return err
	}
	if err := s.h.IpsetDel(name, e); err != nil && !errors.Is(err, nl.IPSetError(nl.IPSET_ERR_EXIST)) {
		return fmt.Errorf("deleting %s from ipset %s: %w", entry, name, err)
	}
	return nil
}

func (s *NetlinkSets) Destroy(name string) error {
	if !OwnedSet(name) {
		return fmt.Errorf("refusing to destroy ipset %q: not the enforcer's", name)
	}
	if err := s.h.IpsetDestroy(name); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("destroying ipset %s: %w", name, err)
	}
	return nil
}

var protoNums = map[string]uint8{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

// parseEntry turns a canonical entry into netlink's form.
func parseEntry(typ, entry string) (*netlink.IPSetEntry, error) {
	bad := fmt.Errorf("invalid %s entry %q", typ, entry)
	switch typ {
	case setNet:
		p, err := netip.ParsePrefix(entry)
		if err != nil || !p.Addr().Is4() || p.Bits() == 0 {
			return nil, bad
		}
		return &netlink.IPSetEntry{IP: net.IP(p.Addr().AsSlice()), CIDR: uint8(p.Bits())}, nil
	case setIPPort:
		ip, rest, ok := strings.Cut(entry, ",")
		proto, port, ok2 := strings.Cut(rest, ":")
		a, err := netip.ParseAddr(ip)
		n, err2 := strconv.ParseUint(port, 10, 16)
		pn, ok3 := protoNums[proto]
		if !ok || !ok2 || !ok3 || err != nil || err2 != nil || !a.Is4() {
			return nil, bad
		}
		p16 := uint16(n)
		return &netlink.IPSetEntry{IP: net.IP(a.AsSlice()), Protocol: &pn, Port: &p16}, nil
	}
	return nil, fmt.Errorf("unknown ipset type %q", typ)
}

// formatEntry is parseEntry's inverse, for what the kernel lists.
func formatEntry(typ string, e netlink.IPSetEntry) string {
	a, _ := netip.AddrFromSlice(e.IP)
	a = a.Unmap()
	switch typ {
	case setNet:
		bits := int(e.CIDR)
		if bits == 0 {
			bits = 32
		}
		return netip.PrefixFrom(a, bits).String()
	case setIPPort:
		proto := "?"
		if e.Protocol != nil {
			for n, v := range protoNums {
				if v == *e.Protocol {
					proto = n
				}
			}
		}
		port := 0
		if e.Port != nil {
			port = int(*e.Port)
		}
		return a.String() + "," + proto + ":" + strconv.Itoa(port)
	}
	return a.String()
}
