// Package nfacct creates and reads the kernel's extended accounting objects
// (nfnetlink_acct, `nfacct add NAME`), the named packet/byte counters that
// iptables rules update with `-m nfacct --nfacct-name NAME`. kube-proxy's
// iptables mode counts two things with them, localhost NodePort packets
// (localhost_nps_accepted_pkts) and conntrack-INVALID drops
// (ct_state_invalid_dropped_pkts), and exports both as metrics; the service
// proxy does the same.
//
// Why hand-written: no maintained Go library speaks nfnetlink_acct
// (vishvananda/netlink, google/nftables and mdlayher/netlink's users cover
// links, conntrack and nftables, not accounting objects), and the protocol
// needed is two commands of one attribute each. The messages are built with
// vishvananda/netlink's nl helpers, which minikit already uses for every other
// netlink request: an nfgenmsg header (AF_UNSPEC, NFNETLINK_V0) and
// NFACCT_NAME, of type NFNL_SUBSYS_ACCT<<8 | NFNL_MSG_ACCT_{NEW,GET}.
//
// Accounting objects belong to a network namespace. Every request opens its
// socket in the calling thread's namespace: callers that serve a node
// namespace other than their own must call from a thread locked into it
// (netns.Do).
package nfacct

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// MaxNameLen is NFACCT_NAME_MAX - 1: the kernel keeps 32 bytes with the NUL.
const MaxNameLen = 31

// Message types and attributes of include/uapi/linux/netfilter/nfnetlink_acct.h.
const (
	msgNew = 0 // NFNL_MSG_ACCT_NEW
	msgGet = 1 // NFNL_MSG_ACCT_GET
	msgDel = 3 // NFNL_MSG_ACCT_DEL

	attrName    = 1 // NFACCT_NAME, NUL-terminated string
	attrPackets = 2 // NFACCT_PKTS, big-endian u64
	attrBytes   = 3 // NFACCT_BYTES, big-endian u64

	// nlaTypeMask clears NLA_F_NESTED and NLA_F_NET_BYTEORDER off an attribute type.
	nlaTypeMask = 0x3fff
)

// Counter is one accounting object.
type Counter struct {
	Name    string
	Packets uint64
	Bytes   uint64
}

// ErrNotFound is returned by Get for a name the namespace has no object of.
var ErrNotFound = errors.New("nfacct object not found")

// Interface is what the proxy needs: make sure a counter exists, read one.
type Interface interface {
	Ensure(name string) error
	Get(name string) (Counter, error)
}

// Netlink talks to the kernel of the calling thread's network namespace.
type Netlink struct{}

var _ Interface = Netlink{}

func request(cmd int, flags int, name string) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_ACCT<<8|cmd, flags)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: unix.NFNETLINK_V0})
	if name != "" {
		req.AddData(nl.NewRtAttr(attrName, nl.ZeroTerminated(name)))
	}
	return req
}

func checkName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("nfacct name %q: must be 1 to %d bytes", name, MaxNameLen)
	}
	return nil
}

// Ensure creates the counter unless it exists (an existing one keeps its
// counts: NLM_F_EXCL is not set, and the kernel answers EBUSY then).
func (Netlink) Ensure(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if _, err := (Netlink{}).Get(name); err == nil {
		return nil
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	_, err := request(msgNew, unix.NLM_F_CREATE|unix.NLM_F_ACK, name).Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil && !errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("creating nfacct object %q: %w", name, err)
	}
	return nil
}

// Get reads one counter.
func (Netlink) Get(name string) (Counter, error) {
	if err := checkName(name); err != nil {
		return Counter{}, err
	}
	msgs, err := request(msgGet, unix.NLM_F_ACK, name).Execute(unix.NETLINK_NETFILTER, 0)
	if errors.Is(err, syscall.ENOENT) {
		return Counter{}, fmt.Errorf("reading nfacct object %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Counter{}, fmt.Errorf("reading nfacct object %q: %w", name, err)
	}
	for _, m := range msgs {
		c, err := decode(m)
		if err != nil {
			return Counter{}, fmt.Errorf("reading nfacct object %q: %w", name, err)
		}
		if c.Name == name {
			return c, nil
		}
	}
	return Counter{}, fmt.Errorf("reading nfacct object %q: %w", name, ErrNotFound)
}

// Delete removes a counter; one still used by a rule cannot be removed (EBUSY).
// A missing counter is not an error.
func (Netlink) Delete(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	_, err := request(msgDel, unix.NLM_F_ACK, name).Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("deleting nfacct object %q: %w", name, err)
	}
	return nil
}

// decode reads one NFNL_MSG_ACCT_NEW answer (the netlink header already
// stripped): nfgenmsg, then attributes.
func decode(b []byte) (Counter, error) {
	if len(b) < nl.SizeofNfgenmsg {
		return Counter{}, fmt.Errorf("short nfacct message (%d bytes)", len(b))
	}
	attrs, err := nl.ParseRouteAttr(b[nl.SizeofNfgenmsg:])
	if err != nil {
		return Counter{}, fmt.Errorf("parsing nfacct attributes: %w", err)
	}
	var c Counter
	seen := 0
	for _, a := range attrs {
		switch a.Attr.Type & nlaTypeMask {
		case attrName:
			v := a.Value
			for len(v) > 0 && v[len(v)-1] == 0 {
				v = v[:len(v)-1]
			}
			c.Name = string(v)
			seen++
		case attrPackets, attrBytes:
			if len(a.Value) != 8 {
				return Counter{}, fmt.Errorf("nfacct counter attribute of %d bytes", len(a.Value))
			}
			v := uint64(0)
			for _, x := range a.Value {
				v = v<<8 | uint64(x)
			}
			if a.Attr.Type&nlaTypeMask == attrPackets {
				c.Packets = v
			} else {
				c.Bytes = v
			}
			seen++
		}
	}
	if seen != 3 {
		return Counter{}, errors.New("nfacct message without name, packets and bytes")
	}
	return c, nil
}

// Fake is an in-memory Interface for tests: counters created by Ensure,
// counts set by the test. Unavailable makes every call fail, as on a kernel
// without nfnetlink_acct.
type Fake struct {
	Counters    map[string]*Counter
	Unavailable bool
}

// NewFake returns an empty, available Fake.
func NewFake() *Fake { return &Fake{Counters: map[string]*Counter{}} }

// Ensure creates the counter unless it exists, as Netlink.Ensure does, and
// fails like it for invalid names or when Unavailable.
func (f *Fake) Ensure(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if f.Unavailable {
		return fmt.Errorf("creating nfacct object %q: %w", name, syscall.EPROTONOSUPPORT)
	}
	if f.Counters[name] == nil {
		f.Counters[name] = &Counter{Name: name}
	}
	return nil
}

// Get returns a copy of the counter, or ErrNotFound, as Netlink.Get does.
func (f *Fake) Get(name string) (Counter, error) {
	if f.Unavailable {
		return Counter{}, fmt.Errorf("reading nfacct object %q: %w", name, syscall.EPROTONOSUPPORT)
	}
	c := f.Counters[name]
	if c == nil {
		return Counter{}, fmt.Errorf("reading nfacct object %q: %w", name, ErrNotFound)
	}
	return *c, nil
}
