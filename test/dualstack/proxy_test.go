package dualstack_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"

// TestDualStackServiceProxy: on a dual-stack lab the proxy runs one
// proxier per family, in either mode (a subtest and a lab each). A pod on
// node1 reaches a dual-stack Service's IPv6 ClusterIP, answered by the
// backend on node2, which sees the client pod's own IPv6 address (pod
// traffic is not masqueraded); the lab's client host reaches the NodePort
// on node1's IPv6 address, forwarded to node2 and masqueraded to node1's
// address; the backend reaches itself through the IPv6 ClusterIP
// (hairpin); the IPv4 ClusterIP still works beside it, and the IPv6 rules
// are in the mode's IPv6 place alone (ip6tables; the ip6 kube-proxy table).
func TestDualStackServiceProxy(t *testing.T) {
	testenv.RequireRoot(t)
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run(mode, func(t *testing.T) { testDualStackServiceProxy(t, mode) })
	}
}

func testDualStackServiceProxy(t *testing.T, mode string) {
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, IPFamily: lab.IPFamilyDual, ProxyMode: mode})
	c := testenv.Client(t, l)
	ctx := context.Background()

	backend := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: "agnhost", Image: agnhost,
			Args:  []string{"netexec", "--http-port=8080", "--udp-port=-1"},
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/hostname", Port: intstr.FromInt32(8080)}}}}}}}
	client := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Command: []string{"sleep", "infinity"}}}}}
	for _, p := range []*corev1.Pod{backend, client} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitPodReady(t, c, "default", "web")
	cp := testenv.WaitPodReady(t, c, "default", "client")
	if len(cp.Status.PodIPs) != 2 {
		t.Fatalf("client podIPs %v, want one of each family", cp.Status.PodIPs)
	}
	client6 := cp.Status.PodIPs[1].IP

	prefer := corev1.IPFamilyPolicyPreferDualStack
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, IPFamilyPolicy: &prefer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 || !netip.MustParseAddr(svc.Spec.ClusterIPs[1]).Is6() {
		t.Fatalf("service web clusterIPs %v, want an IPv4 and an IPv6", svc.Spec.ClusterIPs)
	}
	vip4 := svc.Spec.ClusterIPs[0]
	vip6 := svc.Spec.ClusterIPs[1]
	np := svc.Spec.Ports[0].NodePort
	testutil.Eventually(t, wait, "an IPv6 EndpointSlice with the backend", func() error {
		l, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return err
		}
		for _, s := range l.Items {
			if s.AddressType == discoveryv1.AddressTypeIPv6 && len(s.Endpoints) == 1 {
				return nil
			}
		}
		return fmt.Errorf("slices %v", l.Items)
	})

	// get fetches path from url in pod or on a lab host and checks the answer.
	get := func(what string, run func(url string) (string, error), url, want string) {
		t.Helper()
		testutil.Eventually(t, wait, what, func() error {
			out, err := run(url)
			if err != nil || out != want {
				return fmt.Errorf("curl %s: %q (%v), want %q", url, out, err, want)
			}
			return nil
		})
	}
	fromPod := func(url string) (string, error) {
		return testenv.Exec(t, l, "client", "curl", "-sS", "-g", "--max-time", "2", url)
	}
	fromClientHost := func(url string) (string, error) {
		return testenv.Run(l, lab.Client, "curl", "-sS", "-g", "--max-time", "2", url)
	}

	t.Run("IPv6 ClusterIP from a pod", func(t *testing.T) {
		base := "http://[" + vip6 + "]:80"
		get("the backend's name through the IPv6 ClusterIP", fromPod, base+"/hostname", "web")
		get("the client pod's own IPv6 address at the backend", func(url string) (string, error) { return hostOf(fromPod, url) },
			base+"/clientip", client6)
	})
	t.Run("the backend reaches itself through the IPv6 ClusterIP (hairpin)", func(t *testing.T) {
		fromBackend := func(url string) (string, error) {
			return testenv.Exec(t, l, "web", "curl", "-sS", "-g", "--max-time", "2", url)
		}
		get("the backend's name through its own IPv6 ClusterIP", fromBackend, "http://["+vip6+"]:80/hostname", "web")
	})
	t.Run("IPv4 ClusterIP beside it", func(t *testing.T) {
		get("the backend's name through the IPv4 ClusterIP", fromPod, "http://"+vip4+":80/hostname", "web")
	})
	t.Run("NodePort on node1's IPv6 address from the client host", func(t *testing.T) {
		base := fmt.Sprintf("http://[%s]:%d", l.Addr6("node1"), np)
		get("the backend's name through node1's IPv6 NodePort", fromClientHost, base+"/hostname", "web")
		// node1 has no endpoint: it forwards to node2 over the IPv6 underlay,
		// masqueraded to its own address there.
		get("node1's IPv6 address at the backend", func(url string) (string, error) { return hostOf(fromClientHost, url) },
			base+"/clientip", l.Addr6("node1").String())
	})
	if mode == "nftables" {
		t.Run("the IPv6 rules are in the ip6 kube-proxy table only", func(t *testing.T) {
			out6, err := testenv.Run(l, "node1", "nft", "list", "table", "ip6", "kube-proxy")
			if err != nil || !strings.Contains(out6, vip6+" . tcp . 80 : goto service-") || !strings.Contains(out6, l.Addr6("node1").String()) {
				t.Errorf("node1's ip6 kube-proxy table lacks the service or the node's IPv6 address: %v\n%s", err, out6)
			}
			out4, err := testenv.Run(l, "node1", "nft", "list", "table", "ip", "kube-proxy")
			if err != nil || strings.Contains(out4, vip6) || !strings.Contains(out4, vip4+" . tcp . 80 : goto service-") {
				t.Errorf("node1's ip kube-proxy table: %v\n%s", err, out4)
			}
			ipt6, err := testenv.Run(l, "node1", "ip6tables-save", "-t", "nat")
			if err != nil || strings.Contains(ipt6, vip6) {
				t.Errorf("node1's ip6tables hold the service in nftables mode: %v\n%s", err, ipt6)
			}
		})
		return
	}
	t.Run("the IPv6 rules are in ip6tables only", func(t *testing.T) {
		out6, err := testenv.Run(l, "node1", "ip6tables-save", "-t", "nat")
		if err != nil || !strings.Contains(out6, `"default/web:http cluster IP"`) || !strings.Contains(out6, "-d "+vip6+"/128") {
			t.Errorf("node1's ip6tables nat lacks the service: %v\n%s", err, out6)
		}
		out4, err := testenv.Run(l, "node1", "iptables-save", "-t", "nat")
		if err != nil || strings.Contains(out4, vip6) || !strings.Contains(out4, "-d "+vip4+"/32") {
			t.Errorf("node1's iptables nat: %v\n%s", err, out4)
		}
	})
}

// hostOf runs a request for url whose reply is the address:port the server
// saw (agnhost netexec's /clientip) and returns the address.
func hostOf(run func(string) (string, error), url string) (string, error) {
	out, err := run(url)
	if err != nil {
		return out, err
	}
	ap, err := netip.ParseAddrPort(strings.TrimSpace(out))
	if err != nil {
		return out, err
	}
	return ap.Addr().String(), nil
}
