package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"

	"github.com/minikit/minikit/internal/netns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// PodIfName is the name of the pod end of the veth pair inside the pod's
// network namespace.
const PodIfName = "eth0"

// Network is the node side of pod networking: a bridge in the node's network
// namespace, with one veth port per pod.
//
// Methods are safe for concurrent use on different pods; calls for the same
// pod must be serialised by the caller (the node agent's per-pod worker).
type Network struct {
	// HostNS is the named network namespace of the node (a lab node); ""
	// means the namespace of the calling thread (the real root namespace
	// on a VM).
	HostNS string
	// Bridge is the bridge name, normally "cni0".
	Bridge string
	// PodCIDR is the node's pod subnet, e.g. 10.244.1.0/24. The bridge gets
	// its first host address (.1), which is every pod's default gateway.
	PodCIDR netip.Prefix
	// SecondaryPodCIDR is the node's IPv6 pod subnet in a dual-stack
	// cluster (zero: IPv4 only). The bridge gets its first host address
	// too, and each pod the address SecondaryPodIP maps its IPv4 one to,
	// on the same eth0, with a default route via that gateway.
	SecondaryPodCIDR netip.Prefix
	// MTU of the bridge and veths; 0 keeps the kernel default.
	MTU int
	// Log receives repairs and warnings; nil discards them.
	Log *slog.Logger
	// SysctlRecord, when set, is a file where the value each sysctl had before
	// it was first changed is kept, so that RestoreSysctls can put the
	// machine back as it was (minikit down).
	SysctlRecord string
}

// PodNet is the network identity of one pod sandbox.
type PodNet struct {
	// NetNS is the named network namespace of the pod, chosen by the
	// caller (minikit uses the prefix "mk-").
	NetNS string
	// HostVeth is the name of the node end of the veth pair (at most 15
	// bytes), e.g. "veth" + 8 hex digits of a hash of the pod name.
	HostVeth string
	// IP is the pod address; it must lie in the node's PodCIDR.
	IP netip.Addr
}

// Gateway is the bridge address and the pods' default gateway: the first
// host address of PodCIDR.
func (n *Network) Gateway() netip.Addr { return n.PodCIDR.Masked().Addr().Next() }

// SecondaryGateway is the bridge's IPv6 address, the first host address of
// SecondaryPodCIDR (invalid when the node is IPv4 only).
func (n *Network) SecondaryGateway() netip.Addr {
	if !n.SecondaryPodCIDR.IsValid() {
		return netip.Addr{}
	}
	return n.SecondaryPodCIDR.Masked().Addr().Next()
}

// SecondaryPodIP is the IPv6 address of the pod whose IPv4 address is ip:
// the same offset in secondary as ip has in primary (10.244.1.5 in
// 10.244.1.0/24 is fd00:10:244:1::5 in fd00:10:244:1::/64). The mapping
// is one to one, so the IPv4 IPAM's uniqueness, persistence and adoption
// after a restart carry over to IPv6 with no second allocator. Invalid when
// secondary is unset, not IPv6, or smaller than primary.
func SecondaryPodIP(primary, secondary netip.Prefix, ip netip.Addr) netip.Addr {
	if !secondary.IsValid() || !secondary.Addr().Is6() || !primary.Contains(ip) ||
		128-secondary.Bits() < 32-primary.Bits() {
		return netip.Addr{}
	}
	a, b := primary.Masked().Addr().As4(), ip.As4()
	off := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) -
		(uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]))
	out := secondary.Masked().Addr().As16()
	for i := 15; i >= 12; i-- {
		out[i] |= byte(off)
		off >>= 8
	}
	return netip.AddrFrom16(out)
}

// secondaryIP is p's IPv6 address, invalid on an IPv4-only node.
func (n *Network) secondaryIP(p PodNet) netip.Addr {
	return SecondaryPodIP(n.PodCIDR, n.SecondaryPodCIDR, p.IP)
}
func (n *Network) log() *slog.Logger {
	l := n.Log
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return l.With("component", "sandbox", "bridge", n.Bridge, "node_netns", n.HostNS)
}

func (n *Network) validate() error {
	if err := validLinkName(n.Bridge); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	if n.HostNS != "" {
		if err := netns.ValidName(n.HostNS); err != nil {
			return err
		}
	}
	if !validPodCIDR(n.PodCIDR) {
		return fmt.Errorf("pod CIDR %s is not an IPv4 prefix of at most /30 or an IPv6 one of at most /%d", n.PodCIDR, maxIPv6PodBits)
	}
	if p := n.SecondaryPodCIDR; p.IsValid() && (!n.PodCIDR.Addr().Is4() || !p.Addr().Is6() || 128-p.Bits() < 32-n.PodCIDR.Bits()) {
		return fmt.Errorf("secondary pod CIDR %s is not an IPv6 prefix with room for %s", p, n.PodCIDR)
	}
	return nil
}

func (n *Network) validatePod(p PodNet) error {
	if err := n.validate(); err != nil {
		return err
	}
	if err := netns.ValidName(p.NetNS); err != nil {
		return err
	}
	if err := validLinkName(p.HostVeth); err != nil {
		return fmt.Errorf("host veth: %w", err)
	}
	if !usableHost(n.PodCIDR, p.IP) {
		return fmt.Errorf("address %s is not a usable pod address in %s", p.IP, n.PodCIDR)
	}
	return nil
}

func validLinkName(name string) error {
	if name == "" || len(name) > 15 || strings.ContainsAny(name, "/ \t\n:") {
		return fmt.Errorf("invalid interface name %q", name)
	}
	return nil
}

// maxIPv6PodBits is the longest IPv6 pod range: IPAM hands out the first
// ipv6PoolSize addresses of an IPv6 range (a node's /64 has 2^64, more than
// a node ever runs pods), so the range must hold them.
const (
	maxIPv6PodBits = 112
	ipv6PoolSize   = 1 << (128 - maxIPv6PodBits)
)

// validPodCIDR reports whether p can be a node's pod range: IPv4 with room
// for the network, gateway, broadcast and a pod (at most /30), or IPv6 of at
// most /112 (an IPv6-only node's primary range).
func validPodCIDR(p netip.Prefix) bool {
	if !p.IsValid() {
		return false
	}
	if p.Addr().Is4() {
		return p.Bits() <= 30
	}
	return !p.Addr().Is4In6() && p.Bits() <= maxIPv6PodBits
}

// usableHost reports whether ip may be given to a pod: inside cidr and not
// the network address, the gateway (the first host) or the end of the pool
// (the broadcast address of an IPv4 range; in an IPv6 one, which has no
// broadcast, the first address past the ipv6PoolSize IPAM hands out).
func usableHost(cidr netip.Prefix, ip netip.Addr) bool {
	cidr = cidr.Masked()
	if ip.Is4() != cidr.Addr().Is4() || !cidr.Contains(ip) {
		return false
	}
	network := cidr.Addr()
	if ip == network || ip == network.Next() {
		return false
	}
	if ip.Is4() {
		return ip != lastAddr(cidr)
	}
	return ip.Less(lastAddr(cidr))
}

// lastAddr is the end of a prefix's pool: the broadcast address of an IPv4
// prefix, and the address ipv6PoolSize after an IPv6 prefix's network
// address (outside the pool).
func lastAddr(p netip.Prefix) netip.Addr {
	if p.Addr().Is6() {
		b := p.Masked().Addr().As16()
		off := uint32(ipv6PoolSize)
		for i := 15; i >= 12 && off > 0; i-- {
			v := uint32(b[i]) + off&0xff
			b[i] = byte(v)
			off = off>>8 + v>>8
		}
		return netip.AddrFrom16(b)
	}
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// host is an open node namespace with a netlink handle bound to it.
type host struct {
	ns vnetns.NsHandle
	h  *netlink.Handle
}

func (hs *host) Close() {
	hs.h.Close()
	hs.ns.Close()
}

func (n *Network) openHost() (*host, error) {
	var ns vnetns.NsHandle
	var err error
	if n.HostNS == "" {
		ns, err = vnetns.Get()
	} else {
		ns, err = vnetns.GetFromPath(netns.NetNSPath(n.HostNS))
	}
	if err != nil {
		return nil, fmt.Errorf("opening node netns %q: %w", n.HostNS, err)
	}
	h, err := handleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("opening netlink in node netns %q: %w", n.HostNS, err)
	}
	return &host{ns: ns, h: h}, nil
}

// EnsureBridge creates or repairs the bridge in the node namespace: present,
// addressed with the gateway address (PodCIDR's first host, PodCIDR's
// length; other IPv4 addresses are removed), MTU, up; and sets the node
// namespace's net.ipv4.ip_forward=1 and net.bridge.bridge-nf-call-iptables=1
// (loading br_netfilter if needed; its absence is logged, not fatal).
func (n *Network) EnsureBridge() error {
	if err := n.validate(); err != nil {
		return fmt.Errorf("ensuring bridge %q: %w", n.Bridge, err)
	}
	hs, err := n.openHost()
	if err != nil {
		return fmt.Errorf("ensuring bridge %q: %w", n.Bridge, err)
	}
	defer hs.Close()
	_, err = n.ensureBridge(hs)
	return err
}

func (n *Network) ensureBridge(hs *host) (netlink.Link, error) {
	wrap := func(what string, err error) error {
		return fmt.Errorf("%s bridge %q in node netns %q: %w", what, n.Bridge, n.HostNS, err)
	}
	br, err := hs.h.LinkByName(n.Bridge)
	if isLinkNotFound(err) {
		la := netlink.NewLinkAttrs()
		la.Name = n.Bridge
		la.MTU = n.MTU
		// A fixed MAC (0a:58 + gateway IP, as OVN does) keeps the gateway's
		// MAC from following the lowest port MAC as pods come and go.
		la.HardwareAddr = podMAC(n.Gateway())
		if err := hs.h.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, wrap("creating", err)
		}
		n.log().Info("created bridge")
		br, err = hs.h.LinkByName(n.Bridge)
	}
	if err != nil {
		return nil, wrap("looking up", err)
	}
	if br.Type() != "bridge" {
		return nil, wrap("checking", fmt.Errorf("link is a %s, not a bridge", br.Type()))
	}
	if n.MTU > 0 && br.Attrs().MTU != n.MTU {
		if err := hs.h.LinkSetMTU(br, n.MTU); err != nil {
			return nil, wrap("setting MTU of", err)
		}
	}
	if err := ensureOnlyAddr(hs.h, br, netip.PrefixFrom(n.Gateway(), n.PodCIDR.Bits())); err != nil {
		return nil, wrap("addressing", err)
	}
	if gw := n.SecondaryGateway(); gw.IsValid() {
		if err := ensureOnlyAddr(hs.h, br, netip.PrefixFrom(gw, n.SecondaryPodCIDR.Bits())); err != nil {
			return nil, wrap("addressing (IPv6)", err)
		}
	}
	if br.Attrs().Flags&net.FlagUp == 0 {
		if err := hs.h.LinkSetUp(br); err != nil {
			return nil, wrap("bringing up", err)
		}
	}
	if err := n.ensureSysctls(hs.ns); err != nil {
		return nil, wrap("setting sysctls for", err)
	}
	if n.SecondaryPodCIDR.IsValid() || n.PodCIDR.Addr().Is6() {
		if err := netns.Do(hs.ns, func() error { return n.writeSysctl(sysctlIPv6Forward, "1") }); err != nil {
			return nil, wrap("setting IPv6 forwarding for", err)
		}
	}
	return br, nil
}

const (
	sysctlIPForward     = "net/ipv4/ip_forward"
	sysctlIPv6Forward   = "net/ipv6/conf/all/forwarding"
	sysctlBridgeNF      = "net/bridge/bridge-nf-call-iptables"
	sysctlRouteLocalnet = "net/ipv4/conf/all/route_localnet"
)

// sysctlRecordMu serializes writeSysctl's read-modify-write of SysctlRecord:
// the service proxy sets route_localnet while the agent sets up the bridge.
var sysctlRecordMu sync.Mutex

// EnsureRouteLocalnet sets net.ipv4.conf.all.route_localnet=1 in the node's
// namespace, recording the old value for RestoreSysctls, as kube-proxy's
// iptables mode does for NodePorts on 127.0.0.1 (its KUBE-FIREWALL chain
// then drops packets to 127.0.0.0/8 from elsewhere, CVE-2020-8558). Only
// the service proxy calls it, and only in iptables mode.
func (n *Network) EnsureRouteLocalnet() error {
	return n.EnsureSysctl(sysctlRouteLocalnet, "1")
}

// ensureSysctls writes the node namespace's sysctls. /proc/sys/net shows
// the network namespace of the thread that opens it, hence Do.
func (n *Network) ensureSysctls(ns vnetns.NsHandle) error {
	if err := netns.Do(ns, func() error { return n.writeSysctl(sysctlIPForward, "1") }); err != nil {
		return err
	}
	err := netns.Do(ns, func() error { return n.writeSysctl(sysctlBridgeNF, "1") })
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// br_netfilter is not loaded. Loading a module is global, not per netns.
	if out, mErr := exec.Command("modprobe", "br_netfilter").CombinedOutput(); mErr != nil {
		n.log().Warn("cannot load br_netfilter; bridged pod traffic bypasses iptables",
			"err", mErr, "output", strings.TrimSpace(string(out)))
		return nil
	}
	err = netns.Do(ns, func() error { return n.writeSysctl(sysctlBridgeNF, "1") })
	if errors.Is(err, fs.ErrNotExist) {
		n.log().Warn("br_netfilter loaded but " + sysctlBridgeNF + " is missing in the node netns")
		return nil
	}
	return err
}

// EnsureSysctl sets a sysctl (name as a /proc/sys path, "net/netfilter/...")
// in the node's namespace, recording the old value for RestoreSysctls; the
// service proxy sets its conntrack timeouts with it, as kube-proxy does.
func (n *Network) EnsureSysctl(name, value string) error {
	set := func() error { return n.writeSysctl(name, value) }
	var err error
	if n.HostNS == "" {
		err = set()
	} else {
		err = netns.DoPath(netns.NetNSPath(n.HostNS), set)
	}
	if err != nil {
		return fmt.Errorf("setting %s: %w", strings.ReplaceAll(name, "/", "."), err)
	}
	return nil
}

// ResetRouteLocalnet puts net.ipv4.conf.all.route_localnet back to the value
// SysctlRecord holds for it (what it was before EnsureRouteLocalnet) and
// forgets it; without a record it does nothing.
func (n *Network) ResetRouteLocalnet() error {
	if n.SysctlRecord == "" {
		return nil
	}
	sysctlRecordMu.Lock()
	defer sysctlRecordMu.Unlock()
	rec, err := readSysctlRecord(n.SysctlRecord)
	if err != nil {
		return err
	}
	old, ok := rec[sysctlRouteLocalnet]
	if !ok {
		return nil
	}
	set := func() error { return os.WriteFile("/proc/sys/"+sysctlRouteLocalnet, []byte(old), 0o644) }
	if n.HostNS == "" {
		err = set()
	} else {
		err = netns.DoPath(netns.NetNSPath(n.HostNS), set)
	}
	if err != nil {
		return fmt.Errorf("resetting net.ipv4.conf.all.route_localnet to %s: %w", old, err)
	}
	delete(rec, sysctlRouteLocalnet)
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return writeFileDurably(n.SysctlRecord, b)
}

// writeSysctl sets a sysctl of the calling thread's network namespace,
// recording its previous value first (SysctlRecord) when it changes it.
func (n *Network) writeSysctl(name, value string) error {
	path := "/proc/sys/" + name
	cur, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	old := strings.TrimSpace(string(cur))
	if old == value {
		return nil
	}
	if n.SysctlRecord != "" {
		sysctlRecordMu.Lock()
		defer sysctlRecordMu.Unlock()
		rec, err := readSysctlRecord(n.SysctlRecord)
		if err != nil {
			return err
		}
		if _, ok := rec[name]; !ok {
			rec[name] = old
			b, err := json.Marshal(rec)
			if err == nil {
				err = writeFileDurably(n.SysctlRecord, b)
			}
			if err != nil {
				return fmt.Errorf("recording sysctl %s: %w", name, err)
			}
		}
	}
	return os.WriteFile(path, []byte(value), 0o644)
}

// readSysctlRecord reads a SysctlRecord file; a missing one is empty.
func readSysctlRecord(path string) (map[string]string, error) {
	rec := map[string]string{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return rec, nil
}

// RestoreSysctls puts back, in the node's namespace, every sysctl value that
// SysctlRecord holds (what they were before minikit first changed them), then
// removes the record. A module minikit loaded (br_netfilter) stays loaded.
func (n *Network) RestoreSysctls() error {
	if n.SysctlRecord == "" {
		return nil
	}
	rec, err := readSysctlRecord(n.SysctlRecord)
	if err != nil || len(rec) == 0 {
		os.Remove(n.SysctlRecord)
		return err
	}
	hs, err := n.openHost()
	if err != nil {
		return err
	}
	defer hs.Close()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(rec)) {
		value := rec[name]
		if err := netns.Do(hs.ns, func() error { return os.WriteFile("/proc/sys/"+name, []byte(value), 0o644) }); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", name, value, err))
			continue
		}
		n.log().Info("restored sysctl", "name", strings.ReplaceAll(name, "/", "."), "value", value)
	}
	if len(errs) == 0 {
		os.Remove(n.SysctlRecord)
	}
	return errors.Join(errs...)
}

// SetupPod creates or repairs the pod's network sandbox and returns its
// address: the bridge (via EnsureBridge), the named netns, a veth pair whose
// node end is a hairpin-mode port of the bridge (its alias records the pod
// netns name so TeardownPod can find it) and whose pod end is eth0, p.IP on
// eth0 with PodCIDR's length, lo and eth0 up, and a default route via the
// gateway. Each call converges whatever is there: a veth pair whose ends no
// longer match is deleted and recreated.
func (n *Network) SetupPod(p PodNet) (netip.Addr, error) {
	if err := n.validatePod(p); err != nil {
		return netip.Addr{}, fmt.Errorf("setting up pod %q: %w", p.NetNS, err)
	}
	hs, err := n.openHost()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("setting up pod %q: %w", p.NetNS, err)
	}
	defer hs.Close()
	br, err := n.ensureBridge(hs)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("setting up pod %q: %w", p.NetNS, err)
	}

	if !netns.ExistsNamed(p.NetNS) {
		if err := netns.CreateNamed(p.NetNS); err != nil && !errors.Is(err, fs.ErrExist) {
			return netip.Addr{}, fmt.Errorf("creating netns for pod %q: %w", p.NetNS, err)
		}
		n.log().Info("created pod netns", "pod_netns", p.NetNS)
	}
	pod, err := openPod(p.NetNS)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("setting up pod %q: %w", p.NetNS, err)
	}
	defer pod.Close()

	veth, eth0, err := findPair(hs, pod, p)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("looking up veth for pod %q: %w", p.NetNS, err)
	}
	if veth == nil {
		if veth, eth0, err = n.createVeth(hs, pod, br, p); err != nil {
			return netip.Addr{}, fmt.Errorf("creating veth for pod %q: %w", p.NetNS, err)
		}
	}
	if err := n.configureHostEnd(hs, br, veth, p); err != nil {
		return netip.Addr{}, err
	}
	if err := n.configurePodEnd(pod, eth0, p); err != nil {
		return netip.Addr{}, err
	}
	return p.IP, nil
}

func openPod(name string) (*host, error) {
	ns, err := vnetns.GetFromPath(netns.NetNSPath(name))
	if err != nil {
		return nil, fmt.Errorf("opening netns: %w", err)
	}
	h, err := handleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("opening netlink in netns: %w", err)
	}
	return &host{ns: ns, h: h}, nil
}

// findPair returns the node end and pod end of p's veth pair, or two nils if
// they are missing or are not each other's peer (e.g. the pod netns was
// recreated and the old pair survived in a namespace someone still holds).
func findPair(hs, pod *host, p PodNet) (veth, eth0 netlink.Link, err error) {
	veth, err = hs.h.LinkByName(p.HostVeth)
	if isLinkNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	eth0, err = pod.h.LinkByName(PodIfName)
	if isLinkNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if !paired(hs, pod, veth, eth0) {
		return nil, nil, nil
	}
	return veth, eth0, nil
}

// paired checks that veth (node side) and eth0 (pod side) are the two ends
// of one veth pair. A veth's IFLA_LINK is its peer's ifindex in the peer's
// namespace, and IFLA_LINK_NETNSID says which namespace that is.
func paired(hs, pod *host, veth, eth0 netlink.Link) bool {
	if veth.Type() != "veth" || eth0.Type() != "veth" {
		return false
	}
	if veth.Attrs().ParentIndex != eth0.Attrs().Index || eth0.Attrs().ParentIndex != veth.Attrs().Index {
		return false
	}
	id, err := hs.h.GetNetNsIdByFd(int(pod.ns))
	if err != nil || id < 0 {
		// No nsid to compare; matching ifindexes in both directions is
		// already a strong sign.
		return true
	}
	return veth.Attrs().NetNsID == id
}

// createVeth removes any leftover ends and creates the pair with the peer
// born inside the pod netns as eth0, so there is never a second name to
// clash with in the node namespace.
func (n *Network) createVeth(hs, pod *host, br netlink.Link, p PodNet) (veth, eth0 netlink.Link, err error) {
	if old, err := hs.h.LinkByName(p.HostVeth); err == nil {
		if old.Type() != "veth" {
			return nil, nil, fmt.Errorf("link %q exists and is a %s: %w", p.HostVeth, old.Type(), unix.EEXIST)
		}
		// Deleting one end of a veth deletes the other, wherever it is.
		if err := hs.h.LinkDel(old); err != nil && !errors.Is(err, unix.ENODEV) {
			return nil, nil, fmt.Errorf("deleting stale veth %q: %w", p.HostVeth, err)
		}
		n.log().Info("deleted stale veth", "veth", p.HostVeth, "pod_netns", p.NetNS)
	} else if !isLinkNotFound(err) {
		return nil, nil, err
	}
	if old, err := pod.h.LinkByName(PodIfName); err == nil {
		if err := pod.h.LinkDel(old); err != nil && !errors.Is(err, unix.ENODEV) {
			return nil, nil, fmt.Errorf("deleting stale %s: %w", PodIfName, err)
		}
		n.log().Info("deleted stale pod interface", "pod_netns", p.NetNS)
	} else if !isLinkNotFound(err) {
		return nil, nil, err
	}

	la := netlink.NewLinkAttrs()
	la.Name = p.HostVeth
	la.MTU = n.MTU
	link := &netlink.Veth{
		LinkAttrs:     la,
		PeerName:      PodIfName,
		PeerNamespace: netlink.NsFd(int(pod.ns)),
		PeerTxQLen:    -1,
		// The pod's MAC follows from its IP (0a:58 + the address, as the CNI
		// bridge plugin and OVN do): a sandbox recreated with the same IP, or an
		// IP handed to a new pod, keeps the MAC the node's and other pods' ARP
		// caches already hold, instead of leaving them pointing at a vanished
		// interface for up to a minute.
		PeerHardwareAddr: podMAC(p.IP),
	}
	if err := hs.h.LinkAdd(link); err != nil {
		return nil, nil, err
	}
	if veth, err = hs.h.LinkByName(p.HostVeth); err != nil {
		return nil, nil, err
	}
	if eth0, err = pod.h.LinkByName(PodIfName); err != nil {
		return nil, nil, err
	}
	n.log().Info("created veth", "veth", p.HostVeth, "pod_netns", p.NetNS)
	return veth, eth0, nil
}

func (n *Network) configureHostEnd(hs *host, br, veth netlink.Link, p PodNet) error {
	wrap := func(what string, err error) error {
		return fmt.Errorf("%s veth %q for pod %q: %w", what, p.HostVeth, p.NetNS, err)
	}
	a := veth.Attrs()
	if n.MTU > 0 && a.MTU != n.MTU {
		if err := hs.h.LinkSetMTU(veth, n.MTU); err != nil {
			return wrap("setting MTU of", err)
		}
	}
	if a.MasterIndex != br.Attrs().Index {
		if err := hs.h.LinkSetMasterByIndex(veth, br.Attrs().Index); err != nil {
			return wrap(fmt.Sprintf("attaching to bridge %q", n.Bridge), err)
		}
	}
	// Hairpin lets a pod reach itself through a Service IP: the DNATed
	// packet must go back out of the port it came in on.
	pi, err := RetryDump(func() (netlink.Protinfo, error) { return hs.h.LinkGetProtinfo(veth) })
	if err != nil || !pi.Hairpin {
		if err := hs.h.LinkSetHairpin(veth, true); err != nil {
			return wrap("setting hairpin mode on", err)
		}
	}
	if a.Alias != p.NetNS {
		if err := hs.h.LinkSetAlias(veth, p.NetNS); err != nil {
			return wrap("setting alias of", err)
		}
	}
	if a.Flags&net.FlagUp == 0 {
		if err := hs.h.LinkSetUp(veth); err != nil {
			return wrap("bringing up", err)
		}
	}
	return nil
}

// podMAC is the MAC of the pod end of a veth: 0a:58 (locally administered,
// unicast) followed by the IPv4 address.
func podMAC(ip netip.Addr) net.HardwareAddr {
	if !ip.IsValid() {
		return nil
	}
	// The last four bytes: an IPv4 address whole, an IPv6 one's host part
	// within the pool.
	a := ip.As16()
	return net.HardwareAddr{0x0a, 0x58, a[12], a[13], a[14], a[15]}
}

func (n *Network) configurePodEnd(pod *host, eth0 netlink.Link, p PodNet) error {
	wrap := func(what string, err error) error {
		return fmt.Errorf("%s for pod %q: %w", what, p.NetNS, err)
	}
	lo, err := pod.h.LinkByName("lo")
	if err != nil {
		return wrap("looking up lo", err)
	}
	if lo.Attrs().Flags&net.FlagUp == 0 {
		if err := pod.h.LinkSetUp(lo); err != nil {
			return wrap("bringing up lo", err)
		}
	}
	if n.MTU > 0 && eth0.Attrs().MTU != n.MTU {
		if err := pod.h.LinkSetMTU(eth0, n.MTU); err != nil {
			return wrap("setting MTU of "+PodIfName, err)
		}
	}
	if err := ensureOnlyAddr(pod.h, eth0, netip.PrefixFrom(p.IP, n.PodCIDR.Bits())); err != nil {
		return wrap("setting address "+p.IP.String(), err)
	}
	if eth0.Attrs().Flags&net.FlagUp == 0 {
		if err := pod.h.LinkSetUp(eth0); err != nil {
			return wrap("bringing up "+PodIfName, err)
		}
	}
	if ip6 := n.secondaryIP(p); ip6.IsValid() {
		if err := ensureOnlyAddr(pod.h, eth0, netip.PrefixFrom(ip6, n.SecondaryPodCIDR.Bits())); err != nil {
			return wrap("setting address "+ip6.String(), err)
		}
	}
	// The gateway is only reachable once eth0 is up with its address, so
	// the route comes last.
	route := &netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: n.Gateway().AsSlice(), Dst: defaultDst(n.Gateway())}
	if err := pod.h.RouteReplace(route); err != nil {
		return wrap("setting default route via "+n.Gateway().String(), err)
	}
	if gw := n.SecondaryGateway(); gw.IsValid() {
		route := &netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw.AsSlice(), Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
		if err := pod.h.RouteReplace(route); err != nil {
			return wrap("setting IPv6 default route via "+gw.String(), err)
		}
	}
	return nil
}

// defaultDst is the default route's destination of gw's family: nil (the
// kernel's default) for IPv4, ::/0 for IPv6.
func defaultDst(gw netip.Addr) *net.IPNet {
	if gw.Is4() {
		return nil
	}
	return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
}

// PodOK reports whether p's sandbox is intact and, if not, the first thing
// found wrong: "netns missing", "veth missing", "address missing", ...
func (n *Network) PodOK(p PodNet) (bool, string) {
	if err := n.validatePod(p); err != nil {
		return false, err.Error()
	}
	if !netns.ExistsNamed(p.NetNS) {
		return false, "netns missing"
	}
	hs, err := n.openHost()
	if err != nil {
		return false, err.Error()
	}
	defer hs.Close()
	br, err := hs.h.LinkByName(n.Bridge)
	if err != nil {
		return false, "bridge missing"
	}
	veth, err := hs.h.LinkByName(p.HostVeth)
	if err != nil {
		return false, "veth missing"
	}
	pod, err := openPod(p.NetNS)
	if err != nil {
		return false, err.Error()
	}
	defer pod.Close()
	eth0, err := pod.h.LinkByName(PodIfName)
	if err != nil {
		return false, PodIfName + " missing"
	}
	if !paired(hs, pod, veth, eth0) {
		return false, "veth not paired with " + PodIfName
	}
	if veth.Attrs().MasterIndex != br.Attrs().Index {
		return false, "veth not attached to bridge"
	}
	if pi, err := RetryDump(func() (netlink.Protinfo, error) { return hs.h.LinkGetProtinfo(veth) }); err != nil || !pi.Hairpin {
		return false, "hairpin off"
	}
	if veth.Attrs().Flags&net.FlagUp == 0 {
		return false, "veth down"
	}
	if lo, err := pod.h.LinkByName("lo"); err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
		return false, "lo down"
	}
	if eth0.Attrs().Flags&net.FlagUp == 0 {
		return false, PodIfName + " down"
	}
	if n.MTU > 0 && (veth.Attrs().MTU != n.MTU || eth0.Attrs().MTU != n.MTU) {
		// The node's pod network changed (vxlan's MTU is 50 below host-gw's):
		// SetupPod sets the new one in place.
		return false, fmt.Sprintf("MTU %d, the node's pods have %d", eth0.Attrs().MTU, n.MTU)
	}
	if ok, err := hasAddr(pod.h, eth0, netip.PrefixFrom(p.IP, n.PodCIDR.Bits())); err != nil || !ok {
		return false, "address missing"
	}
	if ok, err := hasDefaultRoute(pod.h, eth0, n.Gateway()); err != nil || !ok {
		return false, "default route missing"
	}
	if ip6 := n.secondaryIP(p); ip6.IsValid() {
		if ok, err := hasAddr(pod.h, eth0, netip.PrefixFrom(ip6, n.SecondaryPodCIDR.Bits())); err != nil || !ok {
			return false, "IPv6 address missing"
		}
		if ok, err := hasDefaultRoute(pod.h, eth0, n.SecondaryGateway()); err != nil || !ok {
			return false, "IPv6 default route missing"
		}
	}
	return true, ""
}

// TeardownPod removes the pod's sandbox: its veth pair (found by the node
// end's alias, or as eth0 in the pod netns) and its named netns. Pieces
// that are already gone are not errors.
func (n *Network) TeardownPod(name string) error {
	if err := netns.ValidName(name); err != nil {
		return fmt.Errorf("tearing down pod %q: %w", name, err)
	}
	if n.HostNS == "" || netns.ExistsNamed(n.HostNS) {
		if err := n.deleteHostVeths(name); err != nil {
			return err
		}
	}
	if netns.ExistsNamed(name) {
		pod, err := openPod(name)
		if err != nil {
			return fmt.Errorf("tearing down pod %q: %w", name, err)
		}
		eth0, err := pod.h.LinkByName(PodIfName)
		if err == nil {
			err = pod.h.LinkDel(eth0)
		}
		pod.Close()
		if err != nil && !isLinkNotFound(err) && !errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("deleting %s of pod %q: %w", PodIfName, name, err)
		}
	}
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("deleting netns of pod %q: %w", name, err)
	}
	return nil
}

func (n *Network) deleteHostVeths(name string) error {
	hs, err := n.openHost()
	if err != nil {
		return fmt.Errorf("tearing down pod %q: %w", name, err)
	}
	defer hs.Close()
	links, err := RetryDump(hs.h.LinkList)
	if err != nil {
		return fmt.Errorf("listing links to tear down pod %q: %w", name, err)
	}
	for _, l := range links {
		if l.Type() != "veth" || l.Attrs().Alias != name {
			continue
		}
		if err := hs.h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("deleting veth %q of pod %q: %w", l.Attrs().Name, name, err)
		}
	}
	return nil
}

// DeleteBridge removes the node's bridge (used by `minikit down`); a missing
// bridge is not an error.
func (n *Network) DeleteBridge() error {
	if err := validLinkName(n.Bridge); err != nil {
		return err
	}
	hs, err := n.openHost()
	if err != nil {
		return err
	}
	defer hs.Close()
	l, err := hs.h.LinkByName(n.Bridge)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finding bridge %q: %w", n.Bridge, err)
	}
	if err := hs.h.LinkDel(l); err != nil {
		return fmt.Errorf("deleting bridge %q: %w", n.Bridge, err)
	}
	return nil
}

// EnsureBridgeRouteLocalnet sets net.ipv4.conf.BRIDGE.route_localnet=1 in the
// node's namespace, which hostPorts reachable at 127.0.0.1 need (the CNI
// portmap plugin sets the same on the pods' host interface): a connection from
// 127.0.0.1 DNATed to a pod leaves through the bridge with a loopback source
// until POSTROUTING masquerades it, and its replies come back through the
// bridge to 127.0.0.1; without the setting the kernel drops both as martians.
// The setting belongs to the bridge, which minikit owns, and goes with it, so
// it is not recorded for RestoreSysctls.
func (n *Network) EnsureBridgeRouteLocalnet() error {
	if err := validLinkName(n.Bridge); err != nil {
		return err
	}
	path := "/proc/sys/net/ipv4/conf/" + n.Bridge + "/route_localnet"
	set := func() error {
		cur, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(cur)) == "1" {
			return nil
		}
		return os.WriteFile(path, []byte("1"), 0o644)
	}
	var err error
	if n.HostNS == "" {
		err = set()
	} else {
		err = netns.DoPath(netns.NetNSPath(n.HostNS), set)
	}
	if err != nil {
		return fmt.Errorf("setting route_localnet on %s: %w", n.Bridge, err)
	}
	return nil
}

// DeleteUDPConntrack deletes the node's conntrack entries of UDP flows to
// port (to dst only, when dst is valid), as the CNI portmap plugin does when
// a UDP hostPort appears or goes: a datagram sent before the mapping existed
// left an entry with no NAT, and one sent before the pod went left an entry
// to the old pod, and either would steer the client's next datagrams (same
// source port) past the current mapping until it times out.
func (n *Network) DeleteUDPConntrack(dst netip.Addr, port uint16) error {
	hs, err := n.openHost()
	if err != nil {
		return err
	}
	defer hs.Close()
	f := &netlink.ConntrackFilter{}
	if err := f.AddProtocol(unix.IPPROTO_UDP); err != nil {
		return err
	}
	if err := f.AddPort(netlink.ConntrackOrigDstPort, port); err != nil {
		return err
	}
	if dst.IsValid() {
		if err := f.AddIP(netlink.ConntrackOrigDstIP, dst.AsSlice()); err != nil {
			return err
		}
	}
	if _, err := hs.h.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
		return fmt.Errorf("deleting conntrack entries of UDP port %d: %w", port, err)
	}
	return nil
}
