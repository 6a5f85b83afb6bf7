package netpol

import (
	"flag"
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

// TestRenderGolden compares the rendered rules and sets with testdata/NAME.golden
// (go test -update rewrites them).
func TestRenderGolden(t *testing.T) {
	sctp := corev1.ProtocolSCTP
	sctpPort := tcp(80)
	sctpPort.Protocol = &sctp
	tests := []struct {
		name string
		pols []*networkingv1.NetworkPolicy
	}{
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := goldenWorld()
			st := Compute(Input{NodeName: "n1", Policies: tt.pols, Pods: w.pods, Namespaces: w.nss})
			if len(st.Problems) > 0 {
				t.Errorf("problems: %q", st.Problems)
			}
			got := string(RuleText(st)) + "# ipsets\n" + string(SetText(st))
			path := filepath.Join("testdata", tt.name+".golden")
			if *update {
				os.MkdirAll("testdata", 0o755)
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
		})
	}
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
	}
	for _, tt := range tests {
		var ex []string
		for _, e := range tt.except {
			ex = append(ex, e)
		}
		p := blockPeer(tt.cidr, ex...)
		c := &computer{st: &State{}}
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
