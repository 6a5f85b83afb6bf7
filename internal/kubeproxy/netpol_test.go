package kubeproxy

import (
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptablestest"
)

// The enforcer's jump stays rule 1 of FORWARD and its chains survive the
// proxy's full syncs (whole-table restores) and Cleanup.
func TestNetworkPolicyChainsSurvive(t *testing.T) {
	ipt := iptablestest.NewFake()
	np := "*filter\n:KUBE-NWPLCY-FORWARD - [0:0]\n:KUBE-POD-FW-ABCDEFGHIJKLMNOP - [0:0]\n" +
		"-A FORWARD -m comment --comment \"kubernetes network policy\" -j KUBE-NWPLCY-FORWARD\n" +
		"-A KUBE-NWPLCY-FORWARD -d 10.244.0.5/32 -j KUBE-POD-FW-ABCDEFGHIJKLMNOP\n" +
		"-A KUBE-POD-FW-ABCDEFGHIJKLMNOP -j REJECT\nCOMMIT\n"
	if err := ipt.Restore([]byte(np), true); err != nil {
		t.Fatal(err)
	}
	p, _ := testProxier(t, ipt)
	loadShape(p, shapes()[0])
	mustSync(t, p)
	p.forceFullSync()
	mustSync(t, p)
	fwd := ipt.Rules("filter", "FORWARD")
	if len(fwd) == 0 || !strings.HasSuffix(fwd[0], "-j KUBE-NWPLCY-FORWARD") {
		t.Errorf("FORWARD after full syncs = %q, want the network policy jump first", fwd)
	}
	if n := strings.Count(strings.Join(fwd, "\n"), "-j KUBE-NWPLCY-FORWARD"); n != 1 {
		t.Errorf("%d network policy jumps in FORWARD, want 1", n)
	}
	if got := ipt.Rules("filter", "KUBE-POD-FW-ABCDEFGHIJKLMNOP"); len(got) != 1 {
		t.Errorf("pod chain after full syncs = %q", got)
	}
	if err := Cleanup(ipt); err != nil {
		t.Fatal(err)
	}
	after := saved(t, ipt)
	for _, want := range []string{":KUBE-NWPLCY-FORWARD", ":KUBE-POD-FW-ABCDEFGHIJKLMNOP", "-j KUBE-NWPLCY-FORWARD"} {
		if !strings.Contains(after, want) {
			t.Errorf("Cleanup removed %q:\n%s", want, after)
		}
	}
	if strings.Contains(after, "KUBE-SERVICES") {
		t.Errorf("Cleanup left the proxy's chains:\n%s", after)
	}
}
