package proxy_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// proxyChains lists a node's KUBE-* chains of the service proxy (the network
// policy's KUBE-NWPLCY-* and KUBE-POD-FW-* are not the proxy's), in nat and
// filter.
func proxyChains(t *testing.T, l *lab.Lab, host string) []string {
	t.Helper()
	var out []string
	for _, table := range []string{"nat", "filter", "mangle"} {
		save, err := testenv.Run(l, host, "iptables-save", "-t", table)
		if err != nil {
			t.Fatalf("iptables-save -t %s on %s: %v: %s", table, host, err, save)
		}
		for _, line := range strings.Split(save, "\n") {
			if strings.HasPrefix(line, ":KUBE-") && !strings.HasPrefix(line, ":KUBE-NWPLCY-") && !strings.HasPrefix(line, ":KUBE-POD-FW-") {
				out = append(out, table+" "+strings.Fields(line)[0][1:])
			}
		}
	}
	return out
}

// nftTable is `nft list table ip kube-proxy` on a node ("" when it has none).
func nftTable(l *lab.Lab, host string) string {
	out, err := testenv.Run(l, host, "nft", "list", "table", "ip", "kube-proxy")
	if err != nil {
		return ""
	}
	return out
}

// TestNFTablesMode brings up a lab whose nodes run the nftables proxy mode and
// checks it by packet path: a ClusterIP from a pod, a NodePort through the
// node without the endpoint (SNAT: the backend sees that node's address),
// externalTrafficPolicy Local (the client's own address; the other node
// drops), a Service without endpoints (rejected at once); then switches a
// node to iptables mode and back, each start leaving no rule of the other mode.
func TestNFTablesMode(t *testing.T) {
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, ProxyMode: "nftables"})
	c := testenv.Client(t, l)
	if _, err := c.AppsV1().Deployments("default").Create(ctx, deployment("echo", "minikit/echo", 1, 8080, "node1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clientPod(t, c, "client", "node2")
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "nothing"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, "echo", 1)
	vip := svc.Spec.ClusterIP + ":8080"
	np := svc.Spec.Ports[0].NodePort
	curl := func(url string) (string, error) {
		return testenv.Run(l, lab.Client, "curl", "-s", "-S", "--max-time", "2", url)
	}

	t.Run("every node has table ip kube-proxy and no KUBE-* chains", func(t *testing.T) {
		for _, n := range []string{"node1", "node2"} {
			testutil.Eventually(t, 30*time.Second, n+"'s table holds the echo service", func() error {
				if tbl := nftTable(l, n); !strings.Contains(tbl, "service-ips") || !strings.Contains(tbl, "default/echo/tcp/http") {
					return fmt.Errorf("table:\n%s", tbl)
				}
				return nil
			})
			if got := proxyChains(t, l, n); len(got) != 0 {
				t.Errorf("%s has iptables chains of the proxy: %v", n, got)
			}
		}
	})
	t.Run("ClusterIP from a pod on the other node", func(t *testing.T) {
		testutil.Eventually(t, 60*time.Second, "echo through the ClusterIP", func() error {
			out, err := testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://"+vip+"/")
			if err != nil || !strings.Contains(out, "pod=echo-") {
				return fmt.Errorf("curl: %v: %s", err, out)
			}
			return nil
		})
	})
	t.Run("NodePort via node2 is SNATed to node2's address", func(t *testing.T) {
		url := fmt.Sprintf("http://%s:%d/", l.Addr("node2"), np)
		testutil.Eventually(t, 30*time.Second, "echo via node2", func() error {
			out, err := curl(url)
			if err != nil || !strings.Contains(out, "client_address="+l.Addr("node2").String()+":") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		// nft lists kube-proxy's "mark set mark or 0x4000" in its own syntax.
		tbl := nftTable(l, "node2")
		for _, want := range []string{"meta mark set meta mark | 0x00004000", "masquerade fully-random", "ip daddr @nodeport-ips"} {
			if !strings.Contains(tbl, want) {
				t.Errorf("node2's table lacks %q", want)
			}
		}
	})
	t.Run("a pod reaches itself through its own Service (hairpin)", func(t *testing.T) {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("listing echo pods: %v", err)
		}
		self := pods.Items[0]
		testutil.Eventually(t, 30*time.Second, self.Name+" answered through the VIP", func() error {
			out, err := testenv.Exec(t, l, self.Name, "curl", "-s", "--max-time", "2", "http://"+vip+"/")
			// Masqueraded by the hairpin-connections set: the pod sees
			// node1's bridge address, not its own.
			if err != nil || !strings.Contains(out, "pod="+self.Name) || strings.Contains(out, "client_address="+self.Status.PodIP+":") {
				return fmt.Errorf("got %q (%v)", out, err)
			}
			return nil
		})
	})
	t.Run("the table deleted is repaired within one sync period", func(t *testing.T) {
		if out, err := testenv.Run(l, "node1", "nft", "delete", "table", "ip", "kube-proxy"); err != nil {
			t.Fatalf("nft delete table: %v: %s", err, out)
		}
		testutil.Eventually(t, 45*time.Second, "table back on node1", func() error {
			if tbl := nftTable(l, "node1"); !strings.Contains(tbl, "default/echo/tcp/http") {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		out, err := testenv.Run(l, lab.Client, "curl", "-s", "--max-time", "2", fmt.Sprintf("http://%s:%d/", l.Addr("node1"), np))
		if err != nil || !strings.Contains(out, "pod=echo-") {
			t.Errorf("NodePort on node1 after the repair: %v %s", err, out)
		}
	})
	t.Run("a service-ips element deleted is repaired within one sync period", func(t *testing.T) {
		elem := fmt.Sprintf("{ %s . tcp . 8080 }", svc.Spec.ClusterIP)
		if out, err := testenv.Run(l, "node1", "nft", "delete", "element", "ip", "kube-proxy", "service-ips", elem); err != nil {
			t.Fatalf("nft delete element: %v: %s", err, out)
		}
		testutil.Eventually(t, 45*time.Second, "element back on node1", func() error {
			out, err := testenv.Run(l, "node1", "nft", "get", "element", "ip", "kube-proxy", "service-ips", elem)
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	})
	t.Run("a Service without endpoints is rejected at once", func(t *testing.T) {
		url := "http://" + empty.Spec.ClusterIP + ":80/"
		testutil.Eventually(t, 30*time.Second, "connection refused", func() error {
			out, err := testenv.Exec(t, l, "client", "curl", "-s", "-S", "--max-time", "5", url)
			// reject-chain answers icmp port unreachable: ECONNREFUSED (curl
			// exit 7) at once, not a timeout (exit 28).
			if err == nil || !(strings.Contains(out, "refused") || strings.Contains(out, "(7)")) {
				return fmt.Errorf("curl: %v: %s", err, out)
			}
			return nil
		})
	})

	svc, err = c.CoreV1().Services("default").Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if _, err := c.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("Local: via node1 the backend sees the client's own address", func(t *testing.T) {
		url := fmt.Sprintf("http://%s:%d/", l.Addr("node1"), np)
		testutil.Eventually(t, 30*time.Second, "client address preserved", func() error {
			out, err := curl(url)
			if err != nil || !strings.Contains(out, "client_address="+l.Addr(lab.Client).String()+":") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	})
	t.Run("Local: node2, without an endpoint, drops", func(t *testing.T) {
		url := fmt.Sprintf("http://%s:%d/", l.Addr("node2"), np)
		testutil.Eventually(t, 30*time.Second, "node2 drops", func() error {
			if out, err := curl(url); err == nil {
				return fmt.Errorf("node2 answered: %s", out)
			}
			return nil
		})
		want := fmt.Sprintf("tcp . %d comment \"default/echo:http\" : drop", np)
		if tbl := nftTable(l, "node2"); !strings.Contains(tbl, want) {
			t.Errorf("node2's no-endpoint-nodeports has no %q:\n%s", want, tbl)
		}
	})

	switchMode := func(t *testing.T, mode string) {
		t.Helper()
		if err := l.Stop("node2", syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := l.SetProxyMode("node2", mode); err != nil {
			t.Fatal(err)
		}
		if err := l.Start("node2"); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("node2 switched to iptables keeps no nftables table", func(t *testing.T) {
		switchMode(t, "iptables")
		testutil.Eventually(t, 60*time.Second, "node2 in iptables mode", func() error {
			save, _ := testenv.Run(l, "node2", "iptables-save", "-t", "nat")
			if !strings.Contains(save, "default/echo:http cluster IP") {
				return fmt.Errorf("no KUBE-SERVICES rule for echo yet")
			}
			if tbl := nftTable(l, "node2"); tbl != "" {
				return fmt.Errorf("table ip kube-proxy still there:\n%s", tbl)
			}
			return nil
		})
		testutil.Eventually(t, 60*time.Second, "echo through the ClusterIP in iptables mode", func() error {
			out, err := testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://"+vip+"/")
			if err != nil || !strings.Contains(out, "pod=echo-") {
				return fmt.Errorf("curl: %v: %s", err, out)
			}
			return nil
		})
	})
	t.Run("node2 switched back to nftables keeps no KUBE-* chains", func(t *testing.T) {
		switchMode(t, "nftables")
		testutil.Eventually(t, 60*time.Second, "node2 in nftables mode", func() error {
			if tbl := nftTable(l, "node2"); !strings.Contains(tbl, "default/echo/tcp/http") {
				return fmt.Errorf("no table yet")
			}
			if got := proxyChains(t, l, "node2"); len(got) != 0 {
				return fmt.Errorf("iptables chains of the proxy left: %v", got)
			}
			return nil
		})
		testutil.Eventually(t, 60*time.Second, "echo through the ClusterIP in nftables mode", func() error {
			out, err := testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://"+vip+"/")
			if err != nil || !strings.Contains(out, "pod=echo-") {
				return fmt.Errorf("curl: %v: %s", err, out)
			}
			return nil
		})
	})
}
