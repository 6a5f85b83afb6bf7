package netpol

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/iptables/iptablestest"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FuzzRenderPolicies renders a policy, a pod and a namespace built from
// fuzzed fields (names, labels, port names, CIDRs, protocols, numbers) and
// checks that the output is restore syntax in which no field became iptables
// syntax: every line is a chain declaration or a rule in one of our chains,
// and outside the --comment argument only our own vocabulary appears. Flag
// 0x20 renders for the IPv6 enforcer of a dual-stack cluster. As root it
// also creates the sets and loads the rules with iptables-restore (or
// ip6tables-restore) --test in a network namespace of its own.
func FuzzRenderPolicies(f *testing.F) {
	f.Add("x", "p", "a", "pod", "a", "http", "10.0.0.0/8", "10.1.0.0/16", "TCP", uint16(80), uint16(90), uint8(0xff))
	f.Add("ns\" -j ACCEPT", "p\n-A FORWARD -j DROP", "b", "k", "v", "no-such-port", "::/0", "bogus", "SCTP", uint16(0), uint16(0), uint8(0x3))
	f.Add("a'b", "c\\d", "e", "f", "g", "h", "0.0.0.0/0", "0.0.0.0/0", "UDP", uint16(65535), uint16(1), uint8(0x55))
	f.Add("x", "p6", "a", "pod", "a", "http", "fd00::/64", "fd00::8000:0:0:0/65", "TCP", uint16(80), uint16(90), uint8(0x2b))
	check := restoreTester(f)
	f.Fuzz(func(t *testing.T, namespace, name, podName, key, val, portName, cidr, except, proto string, port, endPort uint16, flags uint8) {
		pr := corev1.Protocol(proto)
		p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		p.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{key: val}}
		if flags&1 != 0 {
			p.Spec.PolicyTypes = []networkingv1.PolicyType{tIn, tOut}
		}
		var ports []networkingv1.NetworkPolicyPort
		num := intstr.FromInt32(int32(port))
		str := intstr.FromString(portName)
		end := int32(endPort)
		ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: &pr, Port: &num, EndPort: &end})
		ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: &pr, Port: &str})
		if flags&2 != 0 {
			ports = append(ports, networkingv1.NetworkPolicyPort{})
		}
		peers := []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: []string{except}}},
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: val}}},
			{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOpIn, Values: []string{val}}}}},
		}
		if flags&4 != 0 {
			peers = nil
		}
		p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: peers, Ports: ports}}
		if flags&8 != 0 {
			p.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: peers, Ports: ports}}
		}
		pd := pod(namespace, podName, "n1", fmt.Sprintf("10.244.%d.%d", flags, port%256), []string{key, val},
			corev1.ContainerPort{Name: portName, ContainerPort: int32(port), Protocol: pr})
		family := corev1.IPv4Protocol
		if flags&0x20 != 0 {
			family = corev1.IPv6Protocol
			dual(pd, fmt.Sprintf("fd00:10:244:%x::%x", flags, port))
		}
		in := Input{NodeName: "n1", Policies: []*networkingv1.NetworkPolicy{p}, Pods: []*corev1.Pod{pd},
			Namespaces: []*corev1.Namespace{ns(namespace, key, val)}, NoSCTP: flags&16 != 0, Family: family}
		st := Compute(in)
		data := restoreInput(st, nil, jumpFix{insert: true})
		if err := checkRestoreText(data); err != nil {
			t.Fatalf("%v\n--- input:\n%s", err, data)
		}
		for _, s := range st.Sets {
			for _, e := range s.Entries {
				if _, err := parseEntry(s.Type, e); err != nil {
					t.Fatalf("set %s: %v", s.Name, err)
				}
			}
		}
		// The stateful fake accepts it: every jump has its chain.
		if err := iptablestest.NewFake().Restore(data, true); err != nil {
			t.Fatalf("fake restore: %v\n%s", err, data)
		}
		check(t, st, data, family)
	})
}

// ourWords is every argument a rendered rule may hold outside a comment,
// besides chain and set names, addresses and numbers.
var ourWords = map[string]bool{
	"-A": true, "-I": true, "-D": true, "-X": true, "FORWARD": true, "1": true, "-m": true, "-p": true, "-s": true, "-d": true, "-j": true,
	"comment": true, "--comment": true, "set": true, "--match-set": true, "src": true, "dst": true, "dst,dst": true,
	"tcp": true, "udp": true, "sctp": true, "--dport": true, "conntrack": true, "--ctstate": true, "RELATED,ESTABLISHED": true, "!": true, "DNAT": true,
	"RETURN": true, "MARK": true, "--set-xmark": true, "0x10000/0x10000": true, "0x0/0x10000": true, "mark": true, "--mark": true,
	"REJECT": true, "--reject-with": true, "tcp-reset": true, "icmp-port-unreachable": true, "addrtype": true, "--src-type": true, "LOCAL": true,
	"icmp6-port-unreachable": true, "ipv6-icmp": true, "icmp6": true, "--icmpv6-type": true, "neighbour-solicitation": true, "neighbour-advertisement": true,
}

func checkRestoreText(data []byte) error {
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if lines[0] != "*filter" || lines[len(lines)-1] != "COMMIT" {
		return fmt.Errorf("not one filter table")
	}
	for _, l := range lines[1 : len(lines)-1] {
		if strings.HasPrefix(l, ":") {
			f := strings.Fields(l[1:])
			if len(f) != 3 || !(Owned(f[0])) || f[1] != "-" || f[2] != "[0:0]" {
				return fmt.Errorf("bad chain declaration %q", l)
			}
			continue
		}
		args := iptables.SplitRule(l)
		if strings.Count(l, `"`)%2 != 0 {
			return fmt.Errorf("unbalanced quotes in %q", l)
		}
		if len(args) < 2 || (!Owned(args[1]) && args[1] != "FORWARD") {
			return fmt.Errorf("rule outside our chains: %q", l)
		}
		for i := 2; i < len(args); i++ {
			a := args[i]
			if args[i-1] == "--comment" {
				if strings.ContainsAny(a, "\"\\'\n\r") || len(a) > 255 {
					return fmt.Errorf("comment %q in %q", a, l)
				}
				continue
			}
			if ourWords[a] || Owned(a) || OwnedSet(a) || isAddrOrPort(a) {
				continue
			}
			return fmt.Errorf("argument %q in %q is not ours", a, l)
		}
	}
	return nil
}

func isAddrOrPort(a string) bool {
	if p, err := netip.ParsePrefix(a); err == nil && p.Addr().Zone() == "" {
		return true // an IPv6 address has letters
	}
	for _, c := range a {
		if !strings.ContainsRune("0123456789./:", c) {
			return false
		}
	}
	return a != ""
}

// restoreTester returns a check that, as root, creates the state's sets in a
// network namespace of its own and runs iptables-restore --test there
// (ip6tables-restore for the IPv6 family).
func restoreTester(f *testing.F) func(t *testing.T, st *State, data []byte, family corev1.IPFamily) {
	if os.Geteuid() != 0 {
		return func(*testing.T, *State, []byte, corev1.IPFamily) {}
	}
	b := make([]byte, 3)
	rand.Read(b)
	name := "mkt-npfz-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		f.Fatalf("creating netns %s: %v: %s", name, err, out)
	}
	f.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	h, err := netns.GetFromName(name)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { h.Close() })
	sets, err := NewNetlinkSetsAt(h)
	if err != nil {
		f.Fatal(err)
	}
	return func(t *testing.T, st *State, data []byte, family corev1.IPFamily) {
		defer func() {
			have, _ := sets.List()
			for n := range have {
				sets.Destroy(n)
			}
		}()
		have, err := sets.List()
		if err != nil {
			t.Fatal(err)
		}
		if err := syncSets(sets, st.Sets, have); err != nil {
			t.Fatalf("creating sets: %v", err)
		}
		restore := "iptables-restore"
		if family == corev1.IPv6Protocol {
			restore = "ip6tables-restore"
		}
		cmd := exec.Command("ip", "netns", "exec", name, restore, "--test", "--noflush", "-w")
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("iptables-restore --test rejects the rendered rules: %v: %s\n--- input:\n%s", err, out, data)
		}
	}
}
