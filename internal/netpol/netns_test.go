package netpol

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/netns"

	vnetns "github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
)

// lab is a throwaway node namespace with a bridge and two pod namespaces,
// a (10.250.0.2, fd00:250::2) and b (10.250.0.3, fd00:250::3), with no route
// anywhere else.
type lab struct {
	node, a, b vnetns.NsHandle
	nodeName   string
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newLab(t testing.TB) *lab {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	l := &lab{nodeName: "mkt-np-" + id + "-node"}
	names := map[string]*vnetns.NsHandle{l.nodeName: &l.node, "mkt-np-" + id + "-a": &l.a, "mkt-np-" + id + "-b": &l.b}
	for name, h := range names {
		run(t, "ip", "netns", "add", name)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
		var err error
		if *h, err = vnetns.GetFromName(name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
	}
	node := l.nodeName
	inNode := []string{"ip", "netns", "exec", node}
	run(t, append(inNode, "ip", "link", "add", "br0", "type", "bridge")...)
	// No duplicate address detection on br0: the node's link-local address
	// would be tentative for a second, holding its first neighbour
	// solicitations (and the packets waiting on them) that long.
	run(t, append(inNode, "sysctl", "-qw", "net.ipv6.conf.br0.accept_dad=0")...)
	run(t, append(inNode, "ip", "addr", "add", "10.250.0.1/24", "dev", "br0")...)
	run(t, append(inNode, "ip", "link", "set", "br0", "up")...)
	run(t, append(inNode, "ip", "addr", "add", "fd00:250::1/64", "dev", "br0", "nodad")...)
	run(t, append(inNode, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")...)
	run(t, append(inNode, "sysctl", "-qw", "net.bridge.bridge-nf-call-ip6tables=1")...)
	run(t, append(inNode, "sysctl", "-qw", "net.ipv4.ip_forward=1")...)
	run(t, append(inNode, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")...)
	for i, p := range []string{"a", "b"} {
		podNS := "mkt-np-" + id + "-" + p
		host := "vnp" + id + p
		run(t, append(inNode, "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", podNS)...)
		run(t, append(inNode, "ip", "link", "set", host, "master", "br0", "up")...)
		run(t, "ip", "netns", "exec", podNS, "ip", "addr", "add", fmt.Sprintf("10.250.0.%d/24", i+2), "dev", "eth0")
		run(t, "ip", "netns", "exec", podNS, "ip", "link", "set", "eth0", "up")
		run(t, "ip", "netns", "exec", podNS, "ip", "link", "set", "lo", "up")
		run(t, "ip", "netns", "exec", podNS, "ip", "route", "add", "default", "via", "10.250.0.1")
		run(t, "ip", "netns", "exec", podNS, "ip", "addr", "add", fmt.Sprintf("fd00:250::%d/64", i+2), "dev", "eth0", "nodad")
		run(t, "ip", "netns", "exec", podNS, "ip", "-6", "route", "add", "default", "via", "fd00:250::1")
	}
	// A Service: 10.250.9.9:80 DNATed to b:8080, as the proxy would.
	run(t, append(inNode, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", "10.250.9.9/32", "-p", "tcp", "--dport", "80",
		"-j", "DNAT", "--to-destination", "10.250.0.3:8080")...)
	// And its IPv6 ClusterIP, [fd00:250:9::9]:80.
	run(t, append(inNode, "ip6tables", "-t", "nat", "-A", "PREROUTING", "-d", "fd00:250:9::9/128", "-p", "tcp", "--dport", "80",
		"-j", "DNAT", "--to-destination", "[fd00:250::3]:8080")...)
	return l
}

// enforcer returns an enforcer acting in the lab's node namespace: Sync and
// Check must run inside netns.Do(l.node, ...).
func (l *lab) enforcer(t testing.TB, w *world, log *slog.Logger) (*Enforcer, iptables.Interface, IPSets) {
	var ipt iptables.Interface
	var sets IPSets
	err := netns.Do(l.node, func() error {
		var err error
		if ipt, err = iptables.New(); err != nil {
			return err
		}
		sets, err = NewNetlinkSetsAt(l.node)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{NodeName: "n1", Logger: log}, ipt, sets, w.listers()), ipt, sets
}

// listen serves TCP and UDP echo on port in ns until the test ends.
func listen(t testing.TB, ns vnetns.NsHandle, port int) {
	var ln net.Listener
	var pc net.PacketConn
	err := netns.Do(ns, func() error {
		var err error
		if ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port)); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 64)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], addr)
		}
	}()
}

// connect reports whether a TCP connection from ns to addr is answered
// (true) or refused by a reset (false). A REJECT answers at once; a timeout
// means a lost packet and fails the test.
func connect(t testing.TB, ns vnetns.NsHandle, addr string) bool {
	t.Helper()
	var ok bool
	err := netns.Do(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 2)
		_, err = c.Read(b)
		ok = err == nil && string(b) == "ok"
		return err
	})
	if err != nil {
		t.Fatalf("connecting to %s: %v", addr, err)
	}
	return ok
}

// udpAnswered reports whether a UDP datagram from ns to addr is echoed
// (true) or answered with port unreachable (false).
func udpAnswered(t *testing.T, ns vnetns.NsHandle, addr string) bool {
	t.Helper()
	var ok bool
	err := netns.Do(ns, func() error {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("hi")); err != nil {
			return err
		}
		b := make([]byte, 8)
		_, err = c.Read(b)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		ok = err == nil
		return err
	})
	if err != nil {
		t.Fatalf("udp to %s: %v", addr, err)
	}
	return ok
}

func inNode(t testing.TB, l *lab, f func() error) {
	t.Helper()
	if err := netns.Do(l.node, f); err != nil {
		t.Fatal(err)
	}
}

// TestEnforcerPackets loads the enforcer's rules into a throwaway node
// namespace and proves allow and deny with real packets between two pods on
// a bridge, then drift repair, restart convergence and cleanup.
func TestEnforcerPackets(t *testing.T) {
	l := newLab(t)
	listen(t, l.b, 8080)
	listen(t, l.b, 9090)
	listen(t, l.a, 8080)
	w := &world{
		nss: []*corev1.Namespace{ns("default")},
		pods: []*corev1.Pod{
			pod("default", "a", "n1", "10.250.0.2", []string{"app", "a"}, cport("http", 8080, corev1.ProtocolTCP)),
			pod("default", "b", "n1", "10.250.0.3", []string{"app", "b"}, cport("http", 8080, corev1.ProtocolTCP), cport("dns", 9090, corev1.ProtocolUDP)),
		},
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e, ipt, sets := l.enforcer(t, w, log)
	e.SetInitialized()
	sync := func() { inNode(t, l, e.Sync) }

	type probe struct {
		from vnetns.NsHandle
		addr string
		udp  bool
		want bool
	}
	a, b := l.a, l.b
	cases := []struct {
		name   string
		pols   []any
		probes []probe
	}{
		{"no policy", nil, []probe{{a, "10.250.0.3:8080", false, true}, {b, "10.250.0.2:8080", false, true}}},
		{"default deny ingress on b", []any{policy("default", "deny", sel("app", "b"), tIn)},
			[]probe{{a, "10.250.0.3:8080", false, false}, {a, "10.250.0.3:9090", true, false}, {b, "10.250.0.2:8080", false, true},
				{a, "10.250.9.9:80", false, false}}}, // refused after DNAT too, not timed out
		{"allow a to b's named port", []any{policy("default", "deny", sel("app", "b"), tIn),
			ingress(policy("default", "web", sel("app", "b")), []networkingPeer{podPeer(sel("app", "a"), nil)}, named("http", corev1.ProtocolTCP))},
			[]probe{{a, "10.250.0.3:8080", false, true}, {a, "10.250.0.3:9090", false, false}, {a, "10.250.9.9:80", false, true}}},
		{"udp by number", []any{ingress(policy("default", "dns", sel("app", "b")), nil, udp(9090))},
			[]probe{{a, "10.250.0.3:9090", true, true}, {a, "10.250.0.3:8080", false, false}}},
		{"ipBlock except", []any{ingress(policy("default", "blk", sel("app", "b")), []networkingPeer{blockPeer("10.250.0.0/24", "10.250.0.2/32")})},
			[]probe{{a, "10.250.0.3:8080", false, false}}},
		{"port range", []any{ingress(policy("default", "rng", sel("app", "b")), nil, portRange(9000, 9100))},
			[]probe{{a, "10.250.0.3:9090", false, true}, {a, "10.250.0.3:8080", false, false}}},
		{"egress deny on a", []any{egress(policy("default", "out", sel("app", "a"), tOut), []networkingPeer{blockPeer("192.0.2.0/24")})},
			[]probe{{a, "10.250.0.3:8080", false, false}, {b, "10.250.0.2:8080", false, true}}},
		{"egress named port to b", []any{egress(policy("default", "out", sel("app", "a"), tOut), []networkingPeer{podPeer(sel("app", "b"), nil)}, named("http", corev1.ProtocolTCP))},
			[]probe{{a, "10.250.0.3:8080", false, true}, {a, "10.250.0.3:9090", false, false}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.setPolicies(policies(tc.pols)...)
			sync()
			// The kernel's sets read back hold what was computed.
			want := Compute(Input{NodeName: "n1", Policies: w.pols, Pods: w.pods, Namespaces: w.nss})
			inNode(t, l, func() error {
				have, err := sets.List()
				if err != nil {
					return err
				}
				for _, s := range want.Sets {
					got := have[s.Name]
					if got == nil || got.Type != s.Type || strings.Join(sorted(got.Entries), " ") != strings.Join(s.Entries, " ") {
						return fmt.Errorf("set %s in the kernel = %+v, want %+v", s.Name, got, s)
					}
				}
				if len(have) != len(want.Sets) {
					return fmt.Errorf("%d sets in the kernel, want %d", len(have), len(want.Sets))
				}
				return nil
			})
			for _, p := range tc.probes {
				var got bool
				if p.udp {
					got = udpAnswered(t, p.from, p.addr)
				} else {
					got = connect(t, p.from, p.addr)
				}
				if got != p.want {
					var save []byte
					inNode(t, l, func() (err error) { save, err = ipt.Save("filter"); return })
					t.Errorf("to %s (udp %v): allowed = %v, want %v\n%s", p.addr, p.udp, got, p.want, save)
				}
			}
		})
	}

	// Idempotent: another sync leaves the same rules and one FORWARD jump.
	var before, after []byte
	inNode(t, l, func() (err error) { before, err = ipt.Save("filter"); return })
	sync()
	inNode(t, l, func() (err error) { after, err = ipt.Save("filter"); return })
	if k := parseFilter(after); k.jumps != 1 || k.jumpAt != 0 {
		t.Errorf("FORWARD jump: %d copies, first at %d", k.jumps, k.jumpAt)
	}
	if string(stripCounters(before)) != string(stripCounters(after)) {
		t.Errorf("second sync changed the rules:\n%s\n---\n%s", before, after)
	}

	// Drift: a chain flushed by hand comes back, with a WARN.
	run(t, "ip", "netns", "exec", l.nodeName, "iptables", "-F", ChainHook)
	inNode(t, l, func() error {
		if e.Check() {
			return errors.New("Check missed a flushed hook chain")
		}
		return e.Sync()
	})
	if !strings.Contains(logs.String(), "level=WARN msg=\""+DriftMessage) {
		t.Errorf("no WARN drift message in logs:\n%s", logs.String())
	}
	inNode(t, l, func() error {
		if !e.Check() {
			return errors.New("kernel not repaired after one sync")
		}
		return nil
	})
	if connect(t, a, "10.250.0.3:9090") {
		t.Errorf("after repair: a reaches b:9090, want rejected")
	}

	// A restarted enforcer (kill -9 leaves the rules) converges to the same rules.
	e2, _, _ := l.enforcer(t, w, log)
	e2.SetInitialized()
	inNode(t, l, e2.Sync)
	var restarted []byte
	inNode(t, l, func() (err error) { restarted, err = ipt.Save("filter"); return })
	if string(stripCounters(restarted)) != string(stripCounters(after)) {
		t.Errorf("restart changed the rules:\n%s\n---\n%s", after, restarted)
	}

	// Cleanup removes everything and is idempotent.
	for range 2 {
		inNode(t, l, func() error { return Cleanup(ipt, sets) })
	}
	var clean []byte
	inNode(t, l, func() (err error) { clean, err = ipt.Save("filter"); return })
	if strings.Contains(string(clean), "KUBE-") {
		t.Errorf("Cleanup left rules:\n%s", clean)
	}
	inNode(t, l, func() error {
		have, err := sets.List()
		if len(have) != 0 {
			return fmt.Errorf("Cleanup left ipsets %v", have)
		}
		return err
	})
}

func stripCounters(save []byte) []byte {
	var out []string
	for _, l := range strings.Split(string(save), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, ":") {
			if i := strings.LastIndex(l, " ["); i > 0 {
				l = l[:i]
			}
		}
		out = append(out, l)
	}
	return []byte(strings.Join(out, "\n"))
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// enforcer6 returns the IPv6 enforcer of the lab's node: ip6tables, and the
// KUBE-NP6-* sets in the same kernel as the IPv4 enforcer's.
func (l *lab) enforcer6(t testing.TB, w *world, log *slog.Logger) (*Enforcer, iptables.Interface, IPSets) {
	var ipt iptables.Interface
	var sets IPSets
	err := netns.Do(l.node, func() error {
		var err error
		if ipt, err = iptables.NewIPv6(); err != nil {
			return err
		}
		sets, err = NewNetlinkSetsAt(l.node)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{NodeName: "n1", Logger: log, Family: corev1.IPv6Protocol}, ipt, sets, w.listers()), ipt, sets
}

// TestEnforcerPacketsDualStack runs the IPv4 and the IPv6 enforcer of a
// dual-stack node side by side and proves each verdict with real packets
// over both families between two pods on a bridge: selectors admit a pod by
// both of its addresses, an ipBlock admits only its own family, the IPv6
// rejects answer at once (TCP reset, ICMPv6 port unreachable, also after a
// Service's DNAT), neighbour discovery between isolated pods is let
// through, each enforcer keeps to its own sets, and each family's cleanup
// removes its own rules and sets only.
func TestEnforcerPacketsDualStack(t *testing.T) {
	l := newLab(t)
	listen(t, l.b, 8080)
	listen(t, l.b, 9090)
	listen(t, l.a, 8080)
	w := &world{
		nss: []*corev1.Namespace{ns("default")},
		pods: []*corev1.Pod{
			dual(pod("default", "a", "n1", "10.250.0.2", []string{"app", "a"}, cport("http", 8080, corev1.ProtocolTCP)), "fd00:250::2"),
			dual(pod("default", "b", "n1", "10.250.0.3", []string{"app", "b"}, cport("http", 8080, corev1.ProtocolTCP), cport("dns", 9090, corev1.ProtocolUDP)), "fd00:250::3"),
		},
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e4, ipt4, sets4 := l.enforcer(t, w, log)
	e6, ipt6, sets6 := l.enforcer6(t, w, log)
	e4.SetInitialized()
	e6.SetInitialized()

	// A probe goes to port on b (or a) over both families; want4 and want6
	// say whether each is answered.
	type probe struct {
		from         vnetns.NsHandle
		to           [2]string // IPv4, IPv6 address
		port         string
		udp          bool
		want4, want6 bool
	}
	a, b := l.a, l.b
	toA, toB, svc := [2]string{"10.250.0.2", "fd00:250::2"}, [2]string{"10.250.0.3", "fd00:250::3"}, [2]string{"10.250.9.9", "fd00:250:9::9"}
	cases := []struct {
		name   string
		pols   []any
		probes []probe
	}{
		{"no policy", nil, []probe{{a, toB, "8080", false, true, true}, {b, toA, "8080", false, true, true}}},
		{"default deny ingress on b", []any{policy("default", "deny", sel("app", "b"), tIn)},
			[]probe{{a, toB, "8080", false, false, false}, {a, toB, "9090", true, false, false}, {b, toA, "8080", false, true, true},
				{a, svc, "80", false, false, false}}},
		{"allow a to b's named port", []any{policy("default", "deny", sel("app", "b"), tIn),
			ingress(policy("default", "web", sel("app", "b")), []networkingPeer{podPeer(sel("app", "a"), nil)}, named("http", corev1.ProtocolTCP))},
			[]probe{{a, toB, "8080", false, true, true}, {a, toB, "9090", false, false, false}, {a, svc, "80", false, true, true}}},
		{"udp by number", []any{ingress(policy("default", "dns", sel("app", "b")), nil, udp(9090))},
			[]probe{{a, toB, "9090", true, true, true}, {a, toB, "8080", false, false, false}}},
		{"IPv6 ipBlock with an except", []any{ingress(policy("default", "blk6", sel("app", "b")), []networkingPeer{blockPeer("fd00:250::/64", "fd00:250::2/128")})},
			[]probe{{a, toB, "8080", false, false, false}}},
		{"IPv6 ipBlock admits a, not over IPv4", []any{ingress(policy("default", "blk6", sel("app", "b")), []networkingPeer{blockPeer("fd00:250::/120", "fd00:250::3/128")})},
			[]probe{{a, toB, "8080", false, false, true}}},
		{"IPv4 ipBlock admits a, not over IPv6", []any{ingress(policy("default", "blk4", sel("app", "b")), []networkingPeer{blockPeer("10.250.0.0/24", "10.250.0.3/32")})},
			[]probe{{a, toB, "8080", false, true, false}}},
		{"egress deny on a, both isolated", []any{policy("default", "deny", sel("app", "b"), tIn),
			ingress(policy("default", "web", sel("app", "b")), []networkingPeer{podPeer(sel("app", "a"), nil)}),
			egress(policy("default", "out", sel("app", "a"), tOut), []networkingPeer{podPeer(sel("app", "b"), nil)}, tcp(8080))},
			[]probe{{a, toB, "8080", false, true, true}, {a, toB, "9090", false, false, false}, {b, toA, "8080", false, true, true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.setPolicies(policies(tc.pols)...)
			inNode(t, l, e4.Sync)
			inNode(t, l, e6.Sync)
			// Neighbour discovery starts afresh: address resolution between
			// isolated pods crosses the policy chains too.
			for _, p := range []string{"-a", "-b"} {
				run(t, "ip", "netns", "exec", strings.TrimSuffix(l.nodeName, "-node")+p, "ip", "-6", "neigh", "flush", "dev", "eth0")
			}
			// Each enforcer's sets are in the kernel as computed, side by side.
			in := Input{NodeName: "n1", Policies: w.pols, Pods: w.pods, Namespaces: w.nss}
			want4 := Compute(in)
			in.Family = corev1.IPv6Protocol
			want6 := Compute(in)
			inNode(t, l, func() error {
				have, err := sets4.List()
				if err != nil {
					return err
				}
				want := append(slices.Clone(want4.Sets), want6.Sets...)
				for _, s := range want {
					got := have[s.Name]
					if got == nil || got.Type != s.Type || got.Family != s.Family || strings.Join(sorted(got.Entries), " ") != strings.Join(s.Entries, " ") {
						return fmt.Errorf("set %s in the kernel = %+v, want %+v", s.Name, got, s)
					}
				}
				if len(have) != len(want) {
					return fmt.Errorf("%d sets in the kernel, want %d", len(have), len(want))
				}
				return nil
			})
			for _, p := range tc.probes {
				for i, want := range []bool{p.want4, p.want6} {
					addr := net.JoinHostPort(p.to[i], p.port)
					var got bool
					if p.udp {
						got = udpAnswered(t, p.from, addr)
					} else {
						got = connect(t, p.from, addr)
					}
					if got != want {
						var save []byte
						ipt := []iptables.Interface{ipt4, ipt6}[i]
						inNode(t, l, func() (err error) { save, err = ipt.Save("filter"); return })
						t.Errorf("to %s (udp %v): allowed = %v, want %v\n%s", addr, p.udp, got, want, save)
					}
				}
			}
		})
	}

	// The IPv6 rules are in ip6tables, the IPv4 ones in iptables.
	var save4, save6 []byte
	inNode(t, l, func() (err error) { save4, err = ipt4.Save("filter"); return })
	inNode(t, l, func() (err error) { save6, err = ipt6.Save("filter"); return })
	if !strings.Contains(string(save6), "-s fd00:250::2/128") || strings.Contains(string(save6), "10.250.") {
		t.Errorf("ip6tables filter:\n%s", save6)
	}
	if !strings.Contains(string(save4), "-s 10.250.0.2/32") || strings.Contains(string(save4), "fd00:") {
		t.Errorf("iptables filter:\n%s", save4)
	}
	inNode(t, l, func() error {
		if !e4.Check() || !e6.Check() {
			return errors.New("a Check after the syncs saw drift")
		}
		return nil
	})

	// Each family's cleanup removes its own rules and sets: the IPv6 one
	// first, and the IPv4 enforcer's sets stay (its rules still use them).
	count := func(prefix string) int {
		n := 0
		inNode(t, l, func() error {
			have, err := sets4.List()
			for name := range have {
				if strings.HasPrefix(name, prefix) {
					n++
				}
			}
			return err
		})
		return n
	}
	if count(PrefixSet) == 0 || count(PrefixSet6) == 0 {
		t.Fatalf("the last case left %d IPv4 and %d IPv6 sets, want some of each", count(PrefixSet), count(PrefixSet6))
	}
	inNode(t, l, func() error { return CleanupFamily(ipt6, sets6, corev1.IPv6Protocol) })
	inNode(t, l, func() (err error) { save6, err = ipt6.Save("filter"); return })
	if strings.Contains(string(save6), "KUBE-") || count(PrefixSet6) != 0 || count(PrefixSet) == 0 {
		t.Errorf("IPv6 cleanup: %d IPv6 sets and %d IPv4 sets left, ip6tables:\n%s", count(PrefixSet6), count(PrefixSet), save6)
	}
	if connect(t, a, "[fd00:250::3]:9090") != true || connect(t, a, "10.250.0.3:9090") {
		t.Errorf("after the IPv6 cleanup, want IPv6 open and IPv4 still enforced")
	}
	for range 2 {
		inNode(t, l, func() error { return Cleanup(ipt4, sets4) })
	}
	inNode(t, l, func() (err error) { save4, err = ipt4.Save("filter"); return })
	if strings.Contains(string(save4), "KUBE-") || count("KUBE-") != 0 {
		t.Errorf("cleanup left %d sets, iptables:\n%s", count("KUBE-"), save4)
	}
}
