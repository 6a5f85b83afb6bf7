package main

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
)

// nodeNetns creates the network namespace of a fake lab's node and removes
// it when the test ends.
func nodeNetns(t *testing.T, ns string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
}

func inNetns(t *testing.T, ns, stdin string, argv ...string) {
	t.Helper()
	c := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	c.Stdin = strings.NewReader(stdin)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%s in %s: %v: %s", strings.Join(argv, " "), ns, err, out)
	}
}

// TestProxyRules prints the rules of a lab whose node1 runs the nftables
// mode and node2 the iptables mode, each in the tool's own syntax.
func TestProxyRules(t *testing.T) {
	b := make([]byte, 3)
	rand.Read(b)
	name := "mkt-nfttrace-" + hex.EncodeToString(b)
	fakeLabs(t, map[string][]string{name: {"node1", "node2", "client", "external"}})
	nodeNetns(t, name+"-node1")
	nodeNetns(t, name+"-node2")
	inNetns(t, name+"-node1", "", "nft", "-f", "../../internal/nft/nftsim/testdata/overall.nft")
	inNetns(t, name+"-node2", `*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-ZJMBFACUQCTMIK2C - [0:0]
:MINIKIT-POSTROUTING - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -j MINIKIT-POSTROUTING
-A KUBE-SERVICES -d 10.111.22.24/32 -p tcp -m comment --comment "default/echo:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-ZJMBFACUQCTMIK2C
-A KUBE-SVC-ZJMBFACUQCTMIK2C -p tcp -m comment --comment "default/echo:http" -j DNAT --to-destination 10.244.1.2:8080
-A MINIKIT-POSTROUTING -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN
COMMIT
`, "iptables-restore")

	out, err := run(t, "proxy", "rules", "--lab", name, "node1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# node node1 (" + name + "-node1): proxy mode nftables\n",
		"table ip kube-proxy {",
		"ip daddr . meta l4proto . th dport vmap @service-ips",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("node1's rules lack %q:\n%s", want, out)
		}
	}

	out, err = run(t, "proxy", "rules", "--lab", name, "node2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "# node node2 ("+name+"-node2): proxy mode iptables\n") {
		t.Errorf("node2's header:\n%s", out)
	}
	for _, want := range []string{"*nat", ":KUBE-SERVICES - [0:0]", "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
		"-A KUBE-SVC-ZJMBFACUQCTMIK2C -p tcp", "COMMIT", "*filter"} {
		if !strings.Contains(out, want) {
			t.Errorf("node2's rules lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MINIKIT-POSTROUTING") {
		t.Errorf("node2's rules show a chain that is not the proxy's:\n%s", out)
	}

	// Every node, in lab order.
	out, err = run(t, "proxy", "rules", "--lab", name)
	if err != nil {
		t.Fatal(err)
	}
	i1, i2 := strings.Index(out, "# node node1"), strings.Index(out, "# node node2")
	if i1 < 0 || i2 < i1 {
		t.Errorf("all nodes: want node1 then node2:\n%s", out)
	}

	for _, args := range [][]string{{"node3"}, {"client"}} {
		if _, err := run(t, append([]string{"proxy", "rules", "--lab", name}, args...)...); err == nil {
			t.Errorf("proxy rules %v: no error", args)
		}
	}
}

func TestCompleteProxyRules(t *testing.T) {
	fakeLabs(t, map[string][]string{"lab": {"node1", "node2", "client", "external"}})
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"proxy", "rules", ""}, []string{"node1", "node2"}},
		{[]string{"proxy", "rules", "--lab", ""}, []string{"lab"}},
		{[]string{"proxy", "rules", "node1", ""}, []string{}},
	} {
		got, _ := complete(t, tc.args...)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("complete %q = %q, want %q", tc.args, got, tc.want)
		}
	}
}
