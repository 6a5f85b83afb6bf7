package cni

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// newTestNode creates a node netns with its bridge; all pod traffic of the
// test stays inside it and the pods' namespaces.
func newTestNode(t *testing.T, cidr string) *Network {
	t.Helper()
	n := &Network{
		HostNS:  newNamedNS(t, "node"),
		Bridge:  "cni0",
		PodCIDR: netip.MustParsePrefix(cidr),
		Log:     testutil.Logger(t),
	}
	if err := n.EnsureBridge(); err != nil {
		t.Fatalf("EnsureBridge: %v", err)
	}
	return n
}

// newTestPod sets up a pod sandbox owned by the test.
func newTestPod(t *testing.T, n *Network, ip string) PodNet {
	t.Helper()
	p := PodNet{NetNS: testName("pod"), HostVeth: testVeth(), IP: netip.MustParseAddr(ip)}
	t.Cleanup(func() {
		if err := n.TeardownPod(p.NetNS); err != nil {
			t.Errorf("TeardownPod(%q): %v", p.NetNS, err)
		}
	})
	got, err := n.SetupPod(p)
	if err != nil {
		t.Fatalf("SetupPod(%+v): %v", p, err)
	}
	if got != p.IP {
		t.Fatalf("SetupPod returned %s, want %s", got, p.IP)
	}
	requirePodOK(t, n, p)
	return p
}

func requirePodOK(t *testing.T, n *Network, p PodNet) {
	t.Helper()
	if ok, why := n.PodOK(p); !ok {
		t.Fatalf("PodOK(%s) = false, %q", p.NetNS, why)
	}
}

// inNode runs fn with a netlink handle in the test node's namespace.
func inNode(t *testing.T, n *Network, fn func(h *netlink.Handle)) {
	t.Helper()
	hs, err := n.openHost()
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	fn(hs.h)
}

// inPod runs fn with a netlink handle in the pod's namespace.
func inPod(t *testing.T, p PodNet, fn func(h *netlink.Handle)) {
	t.Helper()
	pod, err := openPod(p.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	fn(pod.h)
}

func mustLink(t *testing.T, h *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("link %q: %v", name, err)
	}
	return l
}

// ping sends ICMP (or, to an IPv6 address, ICMPv6) echo requests from
// inside the named netns to dst, as `ip netns exec FROM ping -c1 -W1 DST`
// would, and waits for the reply. The raw socket is created in the pod's
// namespace, so nothing is sent from the root namespace. (iputils ping is
// not assumed to be installed.) For ICMPv6 the kernel fills in the checksum
// and hands back the message without the IP header.
func ping(from string, dst netip.Addr) error {
	v6 := dst.Is6()
	family, proto, echo, reply := unix.AF_INET, unix.IPPROTO_ICMP, byte(8), byte(0)
	var to unix.Sockaddr = &unix.SockaddrInet6{Addr: dst.As16()}
	if v6 {
		family, proto, echo, reply = unix.AF_INET6, unix.IPPROTO_ICMPV6, 128, 129
	} else {
		to = &unix.SockaddrInet4{Addr: dst.As4()}
	}
	return netns.DoPath(netns.NetNSPath(from), func() error {
		fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		id := uint16(os.Getpid()) ^ uint16(time.Now().UnixNano())
		buf := make([]byte, 1500)
		// The first request may wait for ARP or neighbour discovery; retry a
		// few times within ~3s.
		for seq := uint16(1); seq <= 3; seq++ {
			req := []byte{echo, 0, 0, 0, 0, 0, 0, 0, 'm', 'k', 't'}
			binary.BigEndian.PutUint16(req[4:], id)
			binary.BigEndian.PutUint16(req[6:], seq)
			if !v6 {
				binary.BigEndian.PutUint16(req[2:], icmpChecksum(req))
			}
			if err := unix.Sendto(fd, req, 0, to); err != nil {
				return fmt.Errorf("sending echo request to %s: %w", dst, err)
			}
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) {
				n, src, err := unix.Recvfrom(fd, buf, 0)
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					continue
				}
				if err != nil {
					return err
				}
				var icmp []byte
				switch s := src.(type) {
				case *unix.SockaddrInet4:
					if !v6 && netip.AddrFrom4(s.Addr) == dst && n >= 20 {
						icmp = buf[int(buf[0]&0x0f)*4 : n]
					}
				case *unix.SockaddrInet6:
					if v6 && netip.AddrFrom16(s.Addr) == dst {
						icmp = buf[:n]
					}
				}
				if len(icmp) >= 8 && icmp[0] == reply &&
					binary.BigEndian.Uint16(icmp[4:]) == id && binary.BigEndian.Uint16(icmp[6:]) == seq {
					return nil
				}
			}
		}
		return fmt.Errorf("no echo reply from %s", dst)
	})
}

func icmpChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func requirePing(t *testing.T, from string, dst netip.Addr) {
	t.Helper()
	if err := ping(from, dst); err != nil {
		t.Fatalf("ping from %s to %s: %v", from, dst, err)
	}
}

func readSysctlIn(t *testing.T, netnsName, name string) string {
	t.Helper()
	var v string
	if err := netns.DoPath(netns.NetNSPath(netnsName), func() error {
		b, err := os.ReadFile("/proc/sys/" + name)
		v = strings.TrimSpace(string(b))
		return err
	}); err != nil {
		t.Fatalf("reading %s in %s: %v", name, netnsName, err)
	}
	return v
}

func TestEnsureBridge(t *testing.T) {
	requireRoot(t)
	n := newTestNode(t, "10.244.7.0/24")
	if err := n.EnsureBridge(); err != nil {
		t.Fatalf("second EnsureBridge: %v", err)
	}
	inNode(t, n, func(h *netlink.Handle) {
		br := mustLink(t, h, "cni0")
		if br.Type() != "bridge" {
			t.Errorf("cni0 is a %s", br.Type())
		}
		if br.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("cni0 is down")
		}
		if ok, err := hasAddr(h, br, netip.MustParsePrefix("10.244.7.1/24")); !ok || err != nil {
			t.Errorf("cni0 lacks 10.244.7.1/24 (%v)", err)
		}
	})
	if v := readSysctlIn(t, n.HostNS, sysctlIPForward); v != "1" {
		t.Errorf("ip_forward in node netns = %s, want 1", v)
	}
	if _, err := os.Stat("/proc/sys/" + sysctlBridgeNF); err != nil {
		t.Logf("br_netfilter not available here, not checking %s", sysctlBridgeNF)
	} else if v := readSysctlIn(t, n.HostNS, sysctlBridgeNF); v != "1" {
		t.Errorf("bridge-nf-call-iptables in node netns = %s, want 1", v)
	}
}

func TestEnsureBridgeRepairs(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, h *netlink.Handle, br netlink.Link)
	}{
		{"deleted", func(t *testing.T, h *netlink.Handle, br netlink.Link) {
			if err := h.LinkDel(br); err != nil {
				t.Fatal(err)
			}
		}},
		{"down", func(t *testing.T, h *netlink.Handle, br netlink.Link) {
			if err := h.LinkSetDown(br); err != nil {
				t.Fatal(err)
			}
		}},
		{"address removed", func(t *testing.T, h *netlink.Handle, br netlink.Link) {
			if err := h.AddrDel(br, &netlink.Addr{IPNet: ipNetOf(netip.MustParsePrefix("10.244.8.1/24"))}); err != nil {
				t.Fatal(err)
			}
		}},
		{"wrong address", func(t *testing.T, h *netlink.Handle, br netlink.Link) {
			if err := h.AddrReplace(br, &netlink.Addr{IPNet: ipNetOf(netip.MustParsePrefix("10.9.9.1/16"))}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t, "10.244.8.0/24")
			p := newTestPod(t, n, "10.244.8.2")
			inNode(t, n, func(h *netlink.Handle) { tc.breakIt(t, h, mustLink(t, h, "cni0")) })

			if err := n.EnsureBridge(); err != nil {
				t.Fatalf("EnsureBridge: %v", err)
			}
			inNode(t, n, func(h *netlink.Handle) {
				br := mustLink(t, h, "cni0")
				if br.Attrs().Flags&net.FlagUp == 0 {
					t.Errorf("cni0 still down")
				}
				addrs, _ := h.AddrList(br, netlink.FAMILY_V4)
				if len(addrs) != 1 || addrs[0].IPNet.String() != "10.244.8.1/24" {
					t.Errorf("cni0 addresses = %v, want only 10.244.8.1/24", addrs)
				}
			})
			// A recreated bridge has lost its ports; the pod's next sync
			// re-attaches it.
			if _, err := n.SetupPod(p); err != nil {
				t.Fatalf("SetupPod after repair: %v", err)
			}
			requirePodOK(t, n, p)
			requirePing(t, p.NetNS, n.Gateway())
		})
	}
}

func TestPodsReachEachOtherAndNode(t *testing.T) {
	requireRoot(t)
	n := newTestNode(t, "10.244.1.0/24")
	a := newTestPod(t, n, "10.244.1.2")
	b := newTestPod(t, n, "10.244.1.3")

	for _, tc := range []struct {
		from string
		to   netip.Addr
	}{
		{a.NetNS, b.IP},
		{b.NetNS, a.IP},
		{a.NetNS, n.Gateway()},
		{b.NetNS, n.Gateway()},
		{a.NetNS, a.IP},
	} {
		requirePing(t, tc.from, tc.to)
	}

	inNode(t, n, func(h *netlink.Handle) {
		br := mustLink(t, h, "cni0")
		for _, p := range []PodNet{a, b} {
			veth := mustLink(t, h, p.HostVeth)
			if veth.Attrs().MasterIndex != br.Attrs().Index {
				t.Errorf("%s not a port of cni0", p.HostVeth)
			}
			pi, err := h.LinkGetProtinfo(veth)
			if err != nil || !pi.Hairpin {
				t.Errorf("%s hairpin = %v (%v), want on", p.HostVeth, pi.Hairpin, err)
			}
			if veth.Attrs().Alias != p.NetNS {
				t.Errorf("%s alias = %q, want %q", p.HostVeth, veth.Attrs().Alias, p.NetNS)
			}
		}
	})

	// iproute2's view of the pod: eth0 with the address, default via .1.
	out, err := run("ip", "netns", "exec", a.NetNS, "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(out, "inet 10.244.1.2/24") {
		t.Errorf("pod eth0: %v\n%s", err, out)
	}
	out, err = run("ip", "netns", "exec", a.NetNS, "ip", "-4", "route", "show", "default")
	if err != nil || !strings.Contains(out, "default via 10.244.1.1 dev eth0") {
		t.Errorf("pod default route: %v\n%s", err, out)
	}

	// SetupPod on an intact pod changes nothing and still succeeds.
	if _, err := n.SetupPod(a); err != nil {
		t.Fatalf("SetupPod again: %v", err)
	}
	requirePodOK(t, n, a)
	requirePing(t, a.NetNS, b.IP)
}

func TestSetupPodRepairs(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, n *Network, p PodNet)
		why     string // what PodOK reports after the breakage
	}{
		{"netns deleted", func(t *testing.T, n *Network, p PodNet) {
			if err := netns.DeleteNamed(p.NetNS); err != nil {
				t.Fatal(err)
			}
		}, "netns missing"},
		{"veth deleted", func(t *testing.T, n *Network, p PodNet) {
			inNode(t, n, func(h *netlink.Handle) {
				if err := h.LinkDel(mustLink(t, h, p.HostVeth)); err != nil {
					t.Fatal(err)
				}
			})
		}, "veth missing"},
		{"veth detached", func(t *testing.T, n *Network, p PodNet) {
			inNode(t, n, func(h *netlink.Handle) {
				if err := h.LinkSetNoMaster(mustLink(t, h, p.HostVeth)); err != nil {
					t.Fatal(err)
				}
			})
		}, "veth not attached to bridge"},
		{"hairpin off", func(t *testing.T, n *Network, p PodNet) {
			inNode(t, n, func(h *netlink.Handle) {
				if err := h.LinkSetHairpin(mustLink(t, h, p.HostVeth), false); err != nil {
					t.Fatal(err)
				}
			})
		}, "hairpin off"},
		{"veth down", func(t *testing.T, n *Network, p PodNet) {
			inNode(t, n, func(h *netlink.Handle) {
				if err := h.LinkSetDown(mustLink(t, h, p.HostVeth)); err != nil {
					t.Fatal(err)
				}
			})
		}, "veth down"},
		{"eth0 deleted", func(t *testing.T, n *Network, p PodNet) {
			inPod(t, p, func(h *netlink.Handle) {
				if err := h.LinkDel(mustLink(t, h, "eth0")); err != nil {
					t.Fatal(err)
				}
			})
		}, "veth missing"}, // the pair goes as a whole
		{"eth0 down", func(t *testing.T, n *Network, p PodNet) {
			inPod(t, p, func(h *netlink.Handle) {
				if err := h.LinkSetDown(mustLink(t, h, "eth0")); err != nil {
					t.Fatal(err)
				}
			})
		}, "eth0 down"},
		{"address deleted", func(t *testing.T, n *Network, p PodNet) {
			inPod(t, p, func(h *netlink.Handle) {
				addr := &netlink.Addr{IPNet: ipNetOf(netip.PrefixFrom(p.IP, 24))}
				if err := h.AddrDel(mustLink(t, h, "eth0"), addr); err != nil {
					t.Fatal(err)
				}
			})
		}, "address missing"},
		{"default route deleted", func(t *testing.T, n *Network, p PodNet) {
			inPod(t, p, func(h *netlink.Handle) {
				r := &netlink.Route{LinkIndex: mustLink(t, h, "eth0").Attrs().Index, Gw: n.Gateway().AsSlice()}
				if err := h.RouteDel(r); err != nil {
					t.Fatal(err)
				}
			})
		}, "default route missing"},
		{"lo down", func(t *testing.T, n *Network, p PodNet) {
			inPod(t, p, func(h *netlink.Handle) {
				if err := h.LinkSetDown(mustLink(t, h, "lo")); err != nil {
					t.Fatal(err)
				}
			})
		}, "lo down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t, "10.244.2.0/24")
			p := newTestPod(t, n, "10.244.2.10")
			other := newTestPod(t, n, "10.244.2.11")

			tc.breakIt(t, n, p)
			if ok, why := n.PodOK(p); ok || why != tc.why {
				t.Errorf("PodOK after breakage = %v, %q; want false, %q", ok, why, tc.why)
			}
			if _, err := n.SetupPod(p); err != nil {
				t.Fatalf("SetupPod repair: %v", err)
			}
			requirePodOK(t, n, p)
			// The repaired pod keeps its MAC (0a:58 + its IP), so the ARP
			// entries other pods and the node hold for it stay right.
			inPod(t, p, func(h *netlink.Handle) {
				if got, want := mustLink(t, h, "eth0").Attrs().HardwareAddr.String(), podMAC(p.IP).String(); got != want {
					t.Errorf("eth0 MAC after repair = %s, want %s", got, want)
				}
			})
			requirePing(t, p.NetNS, n.Gateway())
			requirePing(t, p.NetNS, other.IP)
			requirePing(t, other.NetNS, p.IP)
		})
	}
}

// A veth pair that survived its netns (someone still held the old
// namespace) is replaced rather than trusted.
func TestSetupPodReplacesOrphanedVeth(t *testing.T) {
	requireRoot(t)
	n := newTestNode(t, "10.244.3.0/24")
	p := newTestPod(t, n, "10.244.3.5")

	old, err := openPod(p.NetNS) // keeps the old namespace alive
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := netns.DeleteNamed(p.NetNS); err != nil {
		t.Fatal(err)
	}
	inNode(t, n, func(h *netlink.Handle) { mustLink(t, h, p.HostVeth) }) // still there
	if ok, why := n.PodOK(p); ok || why != "netns missing" {
		t.Errorf("PodOK = %v, %q; want netns missing", ok, why)
	}
	if _, err := n.SetupPod(p); err != nil {
		t.Fatalf("SetupPod: %v", err)
	}
	requirePodOK(t, n, p)
	requirePing(t, p.NetNS, n.Gateway())
	if _, err := old.h.LinkByName("eth0"); err == nil {
		t.Errorf("old namespace still has eth0: the orphaned pair was not removed")
	}
}

func TestTeardownPod(t *testing.T) {
	requireRoot(t)
	n := newTestNode(t, "10.244.4.0/24")
	p := newTestPod(t, n, "10.244.4.2")

	if err := n.TeardownPod(p.NetNS); err != nil {
		t.Fatalf("TeardownPod: %v", err)
	}
	if netns.ExistsNamed(p.NetNS) {
		t.Errorf("pod netns still exists")
	}
	if _, err := os.Stat(netns.NetNSPath(p.NetNS)); err == nil {
		t.Errorf("%s still exists", netns.NetNSPath(p.NetNS))
	}
	inNode(t, n, func(h *netlink.Handle) {
		if _, err := h.LinkByName(p.HostVeth); !isLinkNotFound(err) {
			t.Errorf("host veth %s still there (%v)", p.HostVeth, err)
		}
	})
	if ok, why := n.PodOK(p); ok || why != "netns missing" {
		t.Errorf("PodOK after teardown = %v, %q", ok, why)
	}
	if err := n.TeardownPod(p.NetNS); err != nil {
		t.Errorf("second TeardownPod: %v", err)
	}
}

// If the pod netns is gone but a process still holds it, the node end of
// the veth survives; TeardownPod finds it by its alias.
func TestTeardownPodWithoutNetns(t *testing.T) {
	requireRoot(t)
	n := newTestNode(t, "10.244.5.0/24")
	p := newTestPod(t, n, "10.244.5.2")
	old, err := openPod(p.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := netns.DeleteNamed(p.NetNS); err != nil {
		t.Fatal(err)
	}
	if err := n.TeardownPod(p.NetNS); err != nil {
		t.Fatalf("TeardownPod: %v", err)
	}
	inNode(t, n, func(h *netlink.Handle) {
		if _, err := h.LinkByName(p.HostVeth); !isLinkNotFound(err) {
			t.Errorf("host veth %s still there (%v)", p.HostVeth, err)
		}
	})
}

func TestSetupPodErrors(t *testing.T) {
	n := &Network{HostNS: "mkt-unused", Bridge: "cni0", PodCIDR: netip.MustParsePrefix("10.244.6.0/24")}
	for _, tc := range []struct {
		p    PodNet
		want string
	}{
		{PodNet{NetNS: "mk-x", HostVeth: "veth0", IP: netip.MustParseAddr("10.244.6.1")}, `setting up pod "mk-x": address 10.244.6.1 is not a usable pod address in 10.244.6.0/24`},
		{PodNet{NetNS: "mk-x", HostVeth: "veth0", IP: netip.MustParseAddr("10.244.6.255")}, `setting up pod "mk-x": address 10.244.6.255 is not a usable pod address in 10.244.6.0/24`},
		{PodNet{NetNS: "mk-x", HostVeth: "veth0", IP: netip.MustParseAddr("10.244.7.2")}, `setting up pod "mk-x": address 10.244.7.2 is not a usable pod address in 10.244.6.0/24`},
		{PodNet{NetNS: "mk-x", HostVeth: "averyveryverylongname", IP: netip.MustParseAddr("10.244.6.2")}, `setting up pod "mk-x": host veth: invalid interface name "averyveryverylongname"`},
		{PodNet{NetNS: "../x", HostVeth: "veth0", IP: netip.MustParseAddr("10.244.6.2")}, `setting up pod "../x": invalid namespace name "../x"`},
	} {
		_, err := n.SetupPod(tc.p)
		if err == nil || err.Error() != tc.want {
			t.Errorf("SetupPod(%+v) = %v, want %q", tc.p, err, tc.want)
		}
	}
}

func run(argv ...string) (string, error) {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}

// An IPv6-only node: the bridge holds the IPv6 range's first address, pods
// an IPv6 address alone with ::/0 via it, and they reach each other and the
// node.
func TestPodsReachEachOtherIPv6Only(t *testing.T) {
	requireRoot(t)
	n := newTestNode(t, "fd00:10:244:1::/64")
	a := newTestPod(t, n, "fd00:10:244:1::2")
	b := newTestPod(t, n, "fd00:10:244:1::3")
	for _, tc := range []struct {
		from string
		to   netip.Addr
	}{{a.NetNS, b.IP}, {b.NetNS, a.IP}, {a.NetNS, n.Gateway()}} {
		requirePing(t, tc.from, tc.to)
	}
	out, err := run("ip", "netns", "exec", a.NetNS, "ip", "-o", "addr", "show", "dev", "eth0", "scope", "global")
	if err != nil || !strings.Contains(out, "inet6 fd00:10:244:1::2/64") || strings.Contains(out, "inet ") {
		t.Errorf("pod eth0: %v\n%s", err, out)
	}
	out, err = run("ip", "netns", "exec", a.NetNS, "ip", "-6", "route", "show", "default")
	if err != nil || !strings.Contains(out, "default via fd00:10:244:1::1 dev eth0") {
		t.Errorf("pod default route: %v\n%s", err, out)
	}
	requirePodOK(t, n, a)
}
