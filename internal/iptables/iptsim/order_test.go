package iptsim_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

// fiveEndpoints is a Service with five endpoints as kube-proxy writes it: the
// KUBE-SVC rules' probabilities 1/5, 1/4, 1/3, 1/2 printed with ten decimals
// (0.3333333333 is not a third), so the five paths' probabilities are 0.2
// only up to floating-point noise in their last bits.
func fiveEndpoints() string {
	var b strings.Builder
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n")
	b.WriteString(":KUBE-SERVICES - [0:0]\n:KUBE-SVC-WEB - [0:0]\n")
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&b, ":KUBE-SEP-WEB%d - [0:0]\n", i)
	}
	b.WriteString("-A PREROUTING -j KUBE-SERVICES\n-A OUTPUT -j KUBE-SERVICES\n")
	b.WriteString("-A KUBE-SERVICES -d 10.96.0.80/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-WEB\n")
	for i := 1; i <= 5; i++ {
		if n := 5 - i + 1; n > 1 {
			fmt.Fprintf(&b, "-A KUBE-SVC-WEB -m statistic --mode random --probability %0.10f -j KUBE-SEP-WEB%d\n", 1/float64(n), i)
		} else {
			fmt.Fprintf(&b, "-A KUBE-SVC-WEB -j KUBE-SEP-WEB%d\n", i)
		}
	}
	// The endpoints' addresses are not in the rules' order, so a sort by
	// address would show too.
	for i, ip := range []string{"10.244.1.7", "10.244.0.9", "10.244.1.3", "10.244.0.4", "10.244.1.5"} {
		fmt.Fprintf(&b, "-A KUBE-SEP-WEB%d -p tcp -m tcp -j DNAT --to-destination %s:8080\n", i+1, ip)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// Paths of equal probability come in the order of the KUBE-SEP rules, not in
// the order their floating-point noise would give, and the same rules give
// the same order every time.
func TestOrderEqualProbabilitiesFollowRules(t *testing.T) {
	r, err := iptsim.Parse(fiveEndpoints())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.244.1.7:8080", "10.244.0.9:8080", "10.244.1.3:8080", "10.244.0.4:8080", "10.244.1.5:8080"}
	for range 20 {
		outs := trace(t, r, node("192.168.56.10"), pkt("192.168.56.100", "10.96.0.80:80"))
		var got []string
		for _, o := range outs {
			got = append(got, o.Dst.String())
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("paths in order %v, want the KUBE-SEP rules' order %v", got, want)
		}
	}
}

// A more probable path still comes first, wherever its rule is.
func TestOrderMostProbableFirst(t *testing.T) {
	outs := []iptsim.Outcome{{Verdict: "a", Probability: 0.25}, {Verdict: "b", Probability: 0.5}, {Verdict: "c", Probability: 0.2499999999}, {Verdict: "d", Probability: 0.25000000001}}
	iptsim.SortOutcomes(outs)
	var got []string
	for _, o := range outs {
		got = append(got, o.Verdict)
	}
	if strings.Join(got, "") != "bacd" {
		t.Errorf("order %v, want b (0.5) first, then a, c, d in their own order", got)
	}
}
