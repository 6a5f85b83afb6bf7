package netpol

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptablestest"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenWorld: node n1 runs x/a and x/b, node n2 runs y/a; z/c is hostNetwork.
func goldenWorld() *world {
	return &world{
		nss: []*corev1.Namespace{ns("x", "team", "red"), ns("y", "team", "blue"), ns("z")},
		pods: []*corev1.Pod{
			pod("x", "a", "n1", "10.244.1.2", []string{"pod", "a"}, cport("serve-80-tcp", 80, corev1.ProtocolTCP), cport("serve-81-udp", 81, corev1.ProtocolUDP)),
			pod("x", "b", "n1", "10.244.1.3", []string{"pod", "b"}, cport("serve-80-tcp", 8080, corev1.ProtocolTCP)),
			pod("y", "a", "n2", "10.244.2.2", []string{"pod", "a"}, cport("serve-80-tcp", 80, corev1.ProtocolTCP)),
			func() *corev1.Pod {
				p := pod("z", "c", "n1", "192.168.0.10", []string{"pod", "c"})
				p.Spec.HostNetwork = true
				return p
			}(),
		},
	}
}

// dualWorld is goldenWorld on a dual-stack cluster: every pod has an IPv6
// address beside its IPv4 one.
func dualWorld() *world {
	w := goldenWorld()
	for i, ip6 := range []string{"fd00:10:244:1::2", "fd00:10:244:1::3", "fd00:10:244:2::2", "fd00:192:168::10"} {
		dual(w.pods[i], ip6)
	}
	return w
}

type goldenCase struct {
	name string
	pols []*networkingv1.NetworkPolicy
}

// goldenCases are rendered for each family: testdata/NAME.golden for IPv4,
// testdata/ipv6/NAME.golden for IPv6.
func goldenCases() []goldenCase {
	sctp := corev1.ProtocolSCTP
	sctpPort := tcp(80)
	sctpPort.Protocol = &sctp
	return []goldenCase{
		{"no-policy", nil},
		{"default-deny", []*networkingv1.NetworkPolicy{policy("x", "deny-all", sel(), tIn, tOut)}},
		{"allow-all", []*networkingv1.NetworkPolicy{
			ingress(policy("x", "allow-all", sel()), []networkingPeer{}),
			egress(policy("x", "allow-all-out", sel(), tOut), nil)}},
		{"pod-and-namespace-selectors", []*networkingv1.NetworkPolicy{
			ingress(policy("x", "selectors", sel("pod", "a")),
				[]networkingPeer{podPeer(sel("pod", "b"), nil)},
				tcp(80)),
			ingress(policy("x", "from-blue", sel("pod", "a")),
				[]networkingPeer{podPeer(nil, sel("team", "blue"))}),
			ingress(policy("x", "both", sel("pod", "b")),
				[]networkingPeer{podPeer(sel("pod", "a"), sel())}),
		}},
		{"ipblock-except", []*networkingv1.NetworkPolicy{
			ingress(policy("x", "block", sel("pod", "a")),
				[]networkingPeer{blockPeer("10.244.0.0/16", "10.244.2.0/24", "10.244.1.3/32"), blockPeer("0.0.0.0/0", "10.0.0.0/8")})}},
		{"named-ports", []*networkingv1.NetworkPolicy{
			ingress(policy("x", "named-in", sel()), nil, named("serve-80-tcp", corev1.ProtocolTCP), named("no-such-port", corev1.ProtocolTCP)),
			egress(policy("x", "named-out", sel("pod", "a"), tOut), []networkingPeer{podPeer(sel(), sel())}, named("serve-80-tcp", corev1.ProtocolTCP)),
		}},
		{"end-port-udp-sctp", []*networkingv1.NetworkPolicy{
			ingress(policy("x", "ranges", sel("pod", "a")), nil, portRange(8000, 8100), udp(81), sctpPort)}},
		{"multiple-policies", []*networkingv1.NetworkPolicy{
			policy("x", "deny", sel(), tIn),
			ingress(policy("x", "allow-a", sel("pod", "b")), []networkingPeer{podPeer(sel("pod", "a"), nil)}),
			ingress(policy("x", "allow-y", sel("pod", "b")), []networkingPeer{podPeer(nil, sel("kubernetes.io/metadata.name", "y"))}, tcp(80)),
			egress(policy("y", "other-node", sel(), tOut), nil),
		}},
		// ipBlocks of both families in one rule: each family's state holds
		// its own, minus its own exceptions.
		{"ipblock-both-families", []*networkingv1.NetworkPolicy{
			ingress(policy("x", "blocks", sel("pod", "a")),
				[]networkingPeer{blockPeer("10.244.0.0/16", "10.244.2.0/24"), blockPeer("fd00:10:244::/48", "fd00:10:244:2::/64"),
					blockPeer("fd00:10:244:1::/125", "fd00:10:244:1::3/128"), blockPeer("::/0", "fd00::/8")},
				tcp(80)),
			egress(policy("x", "to-b", sel("pod", "a"), tOut), []networkingPeer{podPeer(sel("pod", "b"), nil)}, tcp(80)),
		}},
	}
}

// TestRenderGolden compares the rendered rules and sets with testdata/NAME.golden
// (go test -update rewrites them). The IPv4 rendering of a dual-stack
// cluster is the same text as that of an IPv4 one.
func TestRenderGolden(t *testing.T) {
	for _, tt := range goldenCases() {
		t.Run(tt.name, func(t *testing.T) {
			w := goldenWorld()
			st := Compute(Input{NodeName: "n1", Policies: tt.pols, Pods: w.pods, Namespaces: w.nss})
			got := checkGolden(t, st, filepath.Join("testdata", tt.name+".golden"))
			wd := dualWorld()
			st = Compute(Input{NodeName: "n1", Policies: tt.pols, Pods: wd.pods, Namespaces: wd.nss, Family: corev1.IPv4Protocol})
			if dual := string(RuleText(st)) + "# ipsets\n" + string(SetText(st)); dual != got {
				t.Errorf("IPv4 rendering on a dual-stack cluster differs:\n%s", dual)
			}
		})
	}
}

// TestRenderGoldenIPv6 renders the same cases for the IPv6 enforcer of a
// dual-stack cluster: the IPv4 layout with IPv6 addresses, inet6 sets of
// their own names, ICMPv6 rejects and neighbour discovery let through. No
// IPv4 address appears in it, and the IPv4 rendering holds no IPv6 one.
func TestRenderGoldenIPv6(t *testing.T) {
	for _, tt := range goldenCases() {
		t.Run(tt.name, func(t *testing.T) {
			w := dualWorld()
			st := Compute(Input{NodeName: "n1", Policies: tt.pols, Pods: w.pods, Namespaces: w.nss, Family: corev1.IPv6Protocol})
			got := checkGolden(t, st, filepath.Join("testdata", "ipv6", tt.name+".golden"))
			for _, s := range st.Sets {
				if s.Family != "inet6" || !strings.HasPrefix(s.Name, PrefixSet6) {
					t.Errorf("set %s of family %q, want %s* of inet6", s.Name, s.Family, PrefixSet6)
				}
			}
			if strings.Contains(got, "10.244.") || strings.Contains(got, "/32") || strings.Contains(got, "icmp-port") {
				t.Errorf("IPv4 in the IPv6 rendering:\n%s", got)
			}
			st4 := Compute(Input{NodeName: "n1", Policies: tt.pols, Pods: w.pods, Namespaces: w.nss})
			if v4 := string(RuleText(st4)) + string(SetText(st4)); strings.Contains(v4, "fd00:") || strings.Contains(v4, PrefixSet6) {
				t.Errorf("IPv6 in the IPv4 rendering:\n%s", v4)
			}
			// The chains are the same as IPv4's, by name.
			var names4, names6 []string
			for _, c := range st4.Chains {
				names4 = append(names4, c.Name)
			}
			for _, c := range st.Chains {
				names6 = append(names6, c.Name)
			}
			if strings.Join(names4, " ") != strings.Join(names6, " ") {
				t.Errorf("IPv6 chains %v, IPv4 chains %v", names6, names4)
			}
		})
	}
}

// checkGolden compares st's text with the golden file at path and returns it.
func checkGolden(t *testing.T, st *State, path string) string {
	t.Helper()
	if len(st.Problems) > 0 {
		t.Errorf("problems: %q", st.Problems)
	}
	got := string(RuleText(st)) + "# ipsets\n" + string(SetText(st))
	if *update {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("rendered rules differ from %s:\n%s", path, got)
	}
	// The stateful fake takes the input: every jump has its chain.
	ipt := iptablestest.NewFake()
	if err := ipt.Restore(restoreInput(st, nil, jumpFix{insert: true}), true); err != nil {
		t.Errorf("restore: %v", err)
	}
	// Every set entry is one the kernel takes for the set's family.
	sets := newFakeSets()
	if err := syncSets(sets, st.Sets, map[string]*Set{}); err != nil {
		t.Errorf("creating the sets: %v", err)
	}
	return got
}

func TestSubtract(t *testing.T) {
	tests := []struct {
		cidr   string
		except []string
		want   string
	}{
		{"10.0.0.0/8", nil, "10.0.0.0/8"},
		{"10.0.0.0/8", []string{"10.0.0.0/8"}, ""},
		{"10.0.0.0/8", []string{"0.0.0.0/0"}, ""},
		{"10.0.0.0/30", []string{"10.0.0.1/32"}, "10.0.0.0/32 10.0.0.2/31"},
		{"10.0.0.0/24", []string{"192.168.0.0/16"}, "10.0.0.0/24"},
		{"fd00::/125", []string{"fd00::3/128"}, "fd00::/127 fd00::2/128 fd00::4/126"},
		{"fd00::/64", []string{"fd00::/8"}, ""},
		{"fd00::/64", []string{"10.0.0.0/8"}, "fd00::/64"}, // an except of the other family is not this block's
		{"fd00::/64", []string{"fd00:0:0:0:8000::/65"}, "fd00::/65"},
	}
	for _, tt := range tests {
		var ex []string
		for _, e := range tt.except {
			ex = append(ex, e)
		}
		p := blockPeer(tt.cidr, ex...)
		c := &computer{st: &State{}, fam: familyOf(corev1.IPv4Protocol)}
		if netip.MustParsePrefix(tt.cidr).Addr().Is6() {
			c.fam = familyOf(corev1.IPv6Protocol)
		}
		nets := c.peers(policy("x", "p", nil), []networkingPeer{p}, "x/p ingress rule 0")
		var got []string
		for _, n := range nets {
			got = append(got, n.String())
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("%s except %v = %v, want %s", tt.cidr, tt.except, got, tt.want)
		}
	}
}

// The IPv6 hook chain dispatches many isolated pods by /124 (16 addresses,
// as /28 for IPv4), and every pod's jump is reached through its group.
func TestDispatchManyPodsIPv6(t *testing.T) {
	w := &world{nss: []*corev1.Namespace{ns("x")}}
	for i := range 40 {
		w.pods = append(w.pods, dual(pod("x", fmt.Sprintf("p%d", i), "n1", fmt.Sprintf("10.244.1.%d", i+2), nil),
			fmt.Sprintf("fd00:10:244:1::%x", i+2)))
	}
	w.pols = append(w.pols, policy("x", "deny", sel(), tIn))
	st := Compute(Input{NodeName: "n1", Policies: w.pols, Pods: w.pods, Namespaces: w.nss, Family: corev1.IPv6Protocol})
	chains := map[string][]string{}
	for _, c := range st.Chains {
		chains[c.Name] = c.Rules
	}
	hook := chains[ChainHook]
	if len(hook) > 10 {
		t.Errorf("hook chain has %d rules, want the pods dispatched by /124:\n%s", len(hook), strings.Join(hook, "\n"))
	}
	reached := map[string]string{} // pod address -> the group it is reached through
	for _, r := range hook {
		f := strings.Fields(r)
		if len(f) < 4 || f[2] != "-d" {
			continue
		}
		group := netip.MustParsePrefix(f[3])
		target := f[len(f)-1]
		if group.Bits() == 128 {
			reached[group.Addr().String()] = group.String()
			continue
		}
		if group.Bits() != 124 || !strings.HasPrefix(target, PrefixPolicy) {
			t.Errorf("hook rule %q: want a /124 group's chain", r)
		}
		for _, pr := range chains[target] {
			pf := strings.Fields(pr)
			a := netip.MustParsePrefix(pf[3])
			if !group.Contains(a.Addr()) || a.Bits() != 128 || !strings.HasPrefix(pf[len(pf)-1], PrefixPod) {
				t.Errorf("group %s holds %q", group, pr)
			}
			reached[a.Addr().String()] = group.String()
		}
	}
	for _, p := range w.pods {
		if reached[p.Status.PodIPs[1].IP] == "" {
			t.Errorf("pod %s (%s) has no jump to its chain", p.Name, p.Status.PodIPs[1].IP)
		}
	}
}
