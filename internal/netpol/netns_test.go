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
// a (10.250.0.2) and b (10.250.0.3), with no route anywhere else.
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
	run(t, append(inNode, "ip", "addr", "add", "10.250.0.1/24", "dev", "br0")...)
	run(t, append(inNode, "ip", "link", "set", "br0", "up")...)
	run(t, append(inNode, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")...)
	run(t, append(inNode, "sysctl", "-qw", "net.ipv4.ip_forward=1")...)
	for i, p := range []string{"a", "b"} {
		podNS := "mkt-np-" + id + "-" + p
		host := "vnp" + id + p
		run(t, append(inNode, "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", podNS)...)
		run(t, append(inNode, "ip", "link", "set", host, "master", "br0", "up")...)
		run(t, "ip", "netns", "exec", podNS, "ip", "addr", "add", fmt.Sprintf("10.250.0.%d/24", i+2), "dev", "eth0")
		run(t, "ip", "netns", "exec", podNS, "ip", "link", "set", "eth0", "up")
		run(t, "ip", "netns", "exec", podNS, "ip", "link", "set", "lo", "up")
		run(t, "ip", "netns", "exec", podNS, "ip", "route", "add", "default", "via", "10.250.0.1")
	}
	// A Service: 10.250.9.9:80 DNATed to b:8080, as the proxy would.
	run(t, append(inNode, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", "10.250.9.9/32", "-p", "tcp", "--dport", "80",
		"-j", "DNAT", "--to-destination", "10.250.0.3:8080")...)
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
