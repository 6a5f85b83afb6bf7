package netpol

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptsim"

	corev1 "k8s.io/api/core/v1"
)

// walk runs a packet through the rendered state with iptables/iptsim's walk of
// filter FORWARD and returns the verdict and the comment of the last rule.
func walk(t *testing.T, st *State, src, dst string) (verdict, by string) {
	t.Helper()
	text := strings.Replace(string(restoreInput(st, nil, jumpFix{})), "*filter\n",
		"*filter\n:FORWARD ACCEPT [0:0]\n"+JumpRule()+"\n", 1)
	rules, err := iptsim.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string]iptsim.IPSet{}
	for _, s := range st.Sets {
		sets[s.Name] = iptsim.IPSet{Type: s.Type, Entries: s.Entries}
	}
	outs, err := rules.Forward(iptsim.Node{Sets: sets, Addrs: []netip.Addr{netip.MustParseAddr("192.168.56.10")}},
		iptsim.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddrPort(dst), Proto: "tcp"})
	if err != nil || len(outs) != 1 {
		t.Fatalf("walking %s -> %s: %v %v", src, dst, outs, err)
	}
	for _, s := range outs[0].Steps {
		if s.Target == "MARK" && s.Mark&0x10000 != 0 || s.Target == "REJECT" {
			by = s.Comment
		}
	}
	return outs[0].Verdict, by
}

// With more isolated pods than dispatchDirect the hook chain dispatches by
// /28; every pod is still judged by its own chain, from both sides.
func TestDispatchManyPods(t *testing.T) {
	w := &world{nss: []*corev1.Namespace{ns("x")}}
	for i := range 40 {
		w.pods = append(w.pods, pod("x", fmt.Sprintf("p%d", i), "n1", fmt.Sprintf("10.244.1.%d", i+2), []string{"i", fmt.Sprint(i)}))
	}
	w.pols = append(w.pols,
		ingress(policy("x", "from-p0", sel()), []networkingPeer{podPeer(sel("i", "0"), nil)}),
		egress(policy("x", "p1-out", sel("i", "1"), tOut), []networkingPeer{blockPeer("10.244.1.32/28")}))
	st := Compute(Input{NodeName: "n1", Policies: w.pols, Pods: w.pods, Namespaces: w.nss})
	hook := 0
	for _, c := range st.Chains {
		if c.Name == ChainHook {
			hook = len(c.Rules)
		}
	}
	if hook > 12 {
		t.Errorf("hook chain has %d rules, want the pods dispatched by /28", hook)
	}
	for i := 1; i < 40; i++ {
		dst := fmt.Sprintf("10.244.1.%d:80", i+2)
		if v, by := walk(t, st, "10.244.1.2", dst); v != "ACCEPT" || by != "x/from-p0 ingress rule 0" {
			t.Errorf("p0 -> %s: %s by %q, want ACCEPT by x/from-p0 ingress rule 0", dst, v, by)
		}
	}
	// p1 may only send to 10.244.1.32/28, and only p0 may reach anyone.
	if v, by := walk(t, st, "10.244.1.3", "10.244.1.40:80"); v != "REJECT" || by != "x/p38 ingress: no NetworkPolicy allows" {
		t.Errorf("p1 -> p38: %s by %q", v, by)
	}
	if v, by := walk(t, st, "10.244.1.3", "10.244.1.10:80"); v != "REJECT" || by != "x/p1 egress: no NetworkPolicy allows" {
		t.Errorf("p1 -> p8: %s by %q", v, by)
	}
	// p1 reaching itself (through its Service): a pod cannot block itself.
	if v, by := walk(t, st, "10.244.1.3", "10.244.1.3:80"); v != "ACCEPT" || by != "" {
		t.Errorf("p1 -> p1: %s by %q, want ACCEPT", v, by)
	}
	if v, _ := walk(t, st, "192.168.56.10", "10.244.1.10:80"); v != "ACCEPT" {
		t.Errorf("node -> p8: %s, want ACCEPT (the node's own traffic)", v)
	}
}
