package netpol_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// driftWarning is what the enforcer logs, at WARN, when it finds its rules
// changed by hand (np-contract).
const driftWarning = "network policy rules changed outside minikit"

// TestNetworkPolicyChaos breaks node2's enforcement by hand, as a curious
// student would: its chains flushed come back within a sync (and the agent says
// so), and its agent killed with kill -9 leaves the rules enforcing while it is
// down and restarts into the very same rules.
func TestNetworkPolicyChaos(t *testing.T) {
	e := newEnv(t)
	xb := e.pod("x", "b") // on node2
	if xb.node != "node2" {
		t.Fatalf("x/b runs on %s, want node2", xb.node)
	}
	e.apply(t, ingress(policy("x", "only-from-a", sel("pod", "b")), nil, podPeer("pod", "a")))
	allow := func(from, to *pod, _ probe) bool { return to != xb || (from.ns == "x" && from.name == "a") }
	e.expect(t, "x/b only from x/a", allow)
	if t.Failed() {
		t.FailNow()
	}
	before := enforcerState(t, e.l, "node2")
	if !strings.Contains(before, "-j REJECT") || !strings.Contains(before, "x/only-from-a ingress rule 0") {
		t.Fatalf("node2's enforcer rules lack the REJECT or the rule comment of x/only-from-a:\n%s", before)
	}
	log := filepath.Join(e.l.Dir(), "node2.log")

	t.Run("chains flushed by hand are restored and the agent warns", func(t *testing.T) {
		mark, _ := os.ReadFile(log)
		rules, err := enforcerRules(e.l, "node2")
		if err != nil {
			t.Fatal(err)
		}
		var flushed []string
		for _, line := range strings.Split(rules, "\n") {
			if strings.HasPrefix(line, ":") {
				chain := strings.Fields(line)[0][1:]
				if out, err := testenv.Run(e.l, "node2", "iptables", "-F", chain); err != nil {
					t.Fatalf("iptables -F %s: %v: %s", chain, err, out)
				}
				flushed = append(flushed, chain)
			}
		}
		t.Logf("flushed %s on node2", strings.Join(flushed, ", "))
		testutil.Eventually(t, 30*time.Second, "node2 logs the drift at WARN", func() error {
			b, _ := os.ReadFile(log)
			for _, line := range strings.Split(string(b[len(mark):]), "\n") {
				if strings.Contains(line, driftWarning) && strings.Contains(line, "level=WARN") {
					return nil
				}
			}
			return fmt.Errorf("no WARN line with %q in the new part of node2.log", driftWarning)
		})
		e.expect(t, "x/b only from x/a after the flush", allow)
		testutil.Eventually(t, 30*time.Second, "node2's enforcer rules as before the flush", func() error {
			if now := enforcerState(t, e.l, "node2"); now != before {
				return fmt.Errorf("now:\n%s\nbefore:\n%s", now, before)
			}
			return nil
		})
	})

	t.Run("kill -9 of the agent leaves enforcement in place; the restart converges to the same rules", func(t *testing.T) {
		if err := e.l.Stop("node2", syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// node2's pods cannot be exec'd into while its agent is down: probe from node1's.
		for _, from := range e.pods {
			if from.node != "node1" {
				continue
			}
			want := allowed
			if !allow(from, xb, tcp80) {
				want = denied
			}
			for _, addr := range []string{xb.ip, xb.svcIP} {
				if got, out := e.connect(from, tcp80, addr); got != want {
					t.Errorf("agent down: %s -> x/b (%s) TCP/80: %c, want %c (%s)", from, addr, got, want, out)
				}
			}
		}
		if now := enforcerState(t, e.l, "node2"); now != before {
			t.Errorf("node2's enforcer rules changed while its agent was down:\n%s\nbefore:\n%s", now, before)
		}
		if err := e.l.Start("node2"); err != nil {
			t.Fatal(err)
		}
		// The restarted agent is live and syncing when a new policy shows up in
		// node2's kernel; once it is deleted again, node2 must hold what it did.
		e.apply(t, ingress(policy("x", "also-from-c", sel("pod", "b")), nil, podPeer("pod", "c")))
		e.expect(t, "x/b from x/a and x/c after the restart", func(from, to *pod, _ probe) bool {
			return to != xb || (from.ns == "x" && (from.name == "a" || from.name == "c"))
		}, tcp80)
		if err := e.c.NetworkingV1().NetworkPolicies("x").Delete(ctx, "also-from-c", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.expect(t, "x/b only from x/a after the restart", allow)
		testutil.Eventually(t, 30*time.Second, "node2's enforcer rules as before the kill", func() error {
			if now := enforcerState(t, e.l, "node2"); now != before {
				return fmt.Errorf("now:\n%s\nbefore:\n%s", now, before)
			}
			return nil
		})
		n, first, err := forwardJumps(e.l, "node2")
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 || !first {
			t.Errorf("node2's FORWARD has %d jumps to %s (first rule: %v), want exactly one, first", n, hookChain, first)
		}
	})
}
