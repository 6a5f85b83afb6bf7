package netpol

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// IPSets is what the enforcer needs from the kernel's ipsets. Every method
// acts only on sets named KUBE-NP-* and KUBE-NP6-*.
type IPSets interface {
	// List returns the enforcer's sets in the kernel, of both families, with
	// their entries in Set's canonical form (unsorted).
	List() (map[string]*Set, error)
	// Create creates a set of ipset type typ and family ("" is inet, or
	// "inet6": Set.Family).
	Create(name, typ, family string) error
	Add(name, typ, entry string) error
	Del(name, typ, entry string) error
	Destroy(name string) error
}

// NetlinkSets speaks ipset over netlink with vishvananda/netlink (create,
// add, delete, destroy). Listing is done here with one dump parsed in
// place: netlink's IpsetListAll parses every attribute list on a goroutine
// of its own, seconds for the 100,000 entries of 1,000 pods and 200 policies.
type NetlinkSets struct {
	h  *netlink.Handle
	ns netns.NsHandle // where List dumps; closed: the calling thread's namespace
}

// NewNetlinkSets returns IPSets for the caller's network namespace.
func NewNetlinkSets() (*NetlinkSets, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening netlink for ipsets: %w", err)
	}
	return &NetlinkSets{h: h, ns: netns.None()}, nil
}

// NewNetlinkSetsAt returns IPSets for the network namespace ns.
func NewNetlinkSetsAt(ns netns.NsHandle) (*NetlinkSets, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening netlink for ipsets: %w", err)
	}
	return &NetlinkSets{h: h, ns: ns}, nil
}

// List dumps the KUBE-NP-* sets with their entries (IPSets.List).
func (s *NetlinkSets) List() (map[string]*Set, error) {
	var msgs [][]byte
	var err error
	// A dump can be interrupted by a concurrent change; try again.
	for range 3 {
		if msgs, err = s.dump(); err == nil || !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing ipsets: %w", err)
	}
	out := map[string]*Set{}
	for _, m := range msgs {
		if len(m) < 4 {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[4:]) // after the nfgenmsg header
		if err != nil {
			return nil, fmt.Errorf("listing ipsets: %w", err)
		}
		var name, typ string
		var fam uint8
		var adt []byte
		for _, a := range attrs {
			switch a.Attr.Type & nl.NLA_TYPE_MASK {
			case nl.IPSET_ATTR_SETNAME:
				name = nl.BytesToString(a.Value)
			case nl.IPSET_ATTR_TYPENAME:
				typ = nl.BytesToString(a.Value)
			case nl.IPSET_ATTR_FAMILY:
				if len(a.Value) > 0 {
					fam = a.Value[0]
				}
			case nl.IPSET_ATTR_ADT:
				adt = a.Value
			}
		}
		if !OwnedSet(name) {
			continue
		}
		set := out[name]
		if set == nil {
			set = &Set{Name: name}
			out[name] = set
		}
		if typ != "" {
			set.Type = typ
		}
		if fam == unix.AF_INET6 {
			set.Family = "inet6"
		}
		if adt == nil {
			continue
		}
		entries, err := nl.ParseRouteAttr(adt)
		if err != nil {
			return nil, fmt.Errorf("listing ipset %s: %w", name, err)
		}
		for _, en := range entries {
			if e, ok := parseDumpEntry(en.Value); ok {
				set.Entries = append(set.Entries, formatEntry(set.Type, e))
			}
		}
	}
	return out, nil
}

// dump runs IPSET_CMD_LIST for every set.
func (s *NetlinkSets) dump() ([][]byte, error) {
	req := nl.NewNetlinkRequest(nl.IPSET_CMD_LIST|(unix.NFNL_SUBSYS_IPSET<<8), nl.GetIpsetFlags(nl.IPSET_CMD_LIST))
	req.AddData(&nl.Nfgenmsg{NfgenFamily: uint8(unix.AF_NETLINK), Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	if s.ns.IsOpen() {
		sock, err := nl.GetNetlinkSocketAt(s.ns, netns.None(), unix.NETLINK_NETFILTER)
		if err != nil {
			return nil, err
		}
		defer sock.Close()
		req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: {Socket: sock}}
	}
	return req.Execute(unix.NETLINK_NETFILTER, 0)
}

// parseDumpEntry reads one IPSET_ATTR_DATA of a dump: address, prefix
// length, protocol and port.
func parseDumpEntry(b []byte) (netlink.IPSetEntry, bool) {
	var e netlink.IPSetEntry
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return e, false
	}
	for _, a := range attrs {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case nl.IPSET_ATTR_IP:
			if in, err := nl.ParseRouteAttr(a.Value); err == nil && len(in) > 0 {
				e.IP = net.IP(in[0].Value)
			}
		case nl.IPSET_ATTR_CIDR:
			if len(a.Value) > 0 {
				e.CIDR = a.Value[0]
			}
		case nl.IPSET_ATTR_PROTO:
			if len(a.Value) > 0 {
				p := a.Value[0]
				e.Protocol = &p
			}
		case nl.IPSET_ATTR_PORT:
			if len(a.Value) >= 2 {
				p := uint16(a.Value[0])<<8 | uint16(a.Value[1])
				e.Port = &p
			}
		}
	}
	return e, e.IP != nil
}

// Create creates the set of ipset type typ (hash:ip, hash:net, ...) and
// family ("" or "inet6") unless it exists.
func (s *NetlinkSets) Create(name, typ, family string) error {
	if !OwnedSet(name) {
		return fmt.Errorf("refusing to create ipset %q: not the enforcer's", name)
	}
	opts := netlink.IpsetCreateOptions{Family: unix.AF_INET}
	switch family {
	case "":
	case "inet6":
		opts.Family = unix.AF_INET6
	default:
		return fmt.Errorf("creating ipset %s: unknown family %q", name, family)
	}
	if err := s.h.IpsetCreate(name, typ, opts); err != nil {
		return fmt.Errorf("creating ipset %s (%s family %s): %w", name, typ, cmp.Or(family, "inet"), err)
	}
	return nil
}

// Add adds entry, in the set type's syntax, to the set.
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

// Del removes entry from the set.
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

// Destroy deletes the set.
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

// parseEntry turns a canonical entry of either family into netlink's form.
func parseEntry(typ, entry string) (*netlink.IPSetEntry, error) {
	bad := fmt.Errorf("invalid %s entry %q", typ, entry)
	switch typ {
	case setNet:
		p, err := netip.ParsePrefix(entry)
		if err != nil || p.Addr().Is4In6() || p.Bits() == 0 {
			return nil, bad
		}
		return &netlink.IPSetEntry{IP: net.IP(p.Addr().AsSlice()), CIDR: uint8(p.Bits())}, nil
	case setIPPort:
		ip, rest, ok := strings.Cut(entry, ",")
		proto, port, ok2 := strings.Cut(rest, ":")
		a, err := netip.ParseAddr(ip)
		n, err2 := strconv.ParseUint(port, 10, 16)
		pn, ok3 := protoNums[proto]
		if !ok || !ok2 || !ok3 || err != nil || err2 != nil || a.Is4In6() || a.Zone() != "" {
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
			bits = a.BitLen()
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
