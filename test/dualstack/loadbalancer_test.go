package dualstack_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/loadbalancer"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestDualStackLoadBalancer: in a dual-stack lab the LoadBalancer pool has a
// range of each family (192.168.56.240-250, fd00:56::240-250). A
// RequireDualStack LoadBalancer Service gets the first address of each, the
// IPv4 one first as its ipFamilies; the node with the backend (the only
// candidate under externalTrafficPolicy Local) answers NDP for the IPv6
// address, and the lab's client host reaches the backend through it, which
// sees the client's own IPv6 address (Local keeps the source); the IPv4
// address still works beside it, answered by ARP from the same node.
func TestDualStackLoadBalancer(t *testing.T) {
	testenv.RequireRoot(t)
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, IPFamily: lab.IPFamilyDual})
	c := testenv.Client(t, l)
	ctx := context.Background()
	if want := "192.168.56.240-192.168.56.250,fd00:56::240-fd00:56::250"; l.LBPool() != want {
		t.Fatalf("lab pool %s, want %s", l.LBPool(), want)
	}

	backend := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: "agnhost", Image: agnhost,
			Args:  []string{"netexec", "--http-port=8080", "--udp-port=-1"},
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/hostname", Port: intstr.FromInt32(8080)}}}}}}}
	if _, err := c.CoreV1().Pods("default").Create(ctx, backend, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPodReady(t, c, "default", "web")

	require := corev1.IPFamilyPolicyRequireDualStack
	if _, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, IPFamilyPolicy: &require,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ingress []string
	testutil.Eventually(t, wait, "Service web has a load-balancer address of each family", func() error {
		svc, err := c.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ingress = nil
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			ingress = append(ingress, ing.IP)
		}
		if len(ingress) != 2 {
			return fmt.Errorf("ingress %v", ingress)
		}
		return nil
	})
	if want := []string{"192.168.56.240", "fd00:56::240"}; strings.Join(ingress, ",") != strings.Join(want, ",") {
		t.Fatalf("status.loadBalancer.ingress %v, want %v: the first address of each family of the pool, IPv4 first", ingress, want)
	}
	vip4, vip6 := netip.MustParseAddr(ingress[0]), netip.MustParseAddr(ingress[1])

	// get fetches url from the lab's client host and checks the answer.
	get := func(what, url, want string) {
		t.Helper()
		testutil.Eventually(t, wait, what, func() error {
			out, err := testenv.Run(l, lab.Client, "curl", "-sS", "-g", "--max-time", "2", url)
			if err != nil || out != want {
				return fmt.Errorf("curl %s: %q (%v), want %q", url, out, err, want)
			}
			return nil
		})
	}
	// seenFrom fetches /clientip and returns the address the backend saw.
	seenFrom := func(what, base, want string) {
		t.Helper()
		testutil.Eventually(t, wait, what, func() error {
			out, err := testenv.Run(l, lab.Client, "curl", "-sS", "-g", "--max-time", "2", base+"/clientip")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			ap, err := netip.ParseAddrPort(strings.TrimSpace(out))
			if err != nil || ap.Addr().String() != want {
				return fmt.Errorf("backend saw %q (%v), want %s", out, err, want)
			}
			return nil
		})
	}

	t.Run("node2 alone answers NDP for the IPv6 address", func(t *testing.T) {
		testutil.Eventually(t, wait, "exactly node2 answers NDP for "+vip6.String(), func() error {
			if got := announcers(t, l, vip6); len(got) != 1 || got[0] != "node2" {
				return fmt.Errorf("answered by %v", got)
			}
			return nil
		})
	})
	t.Run("the client host reaches the backend through the IPv6 address", func(t *testing.T) {
		base := "http://[" + vip6.String() + "]:80"
		get("the backend's name through "+vip6.String(), base+"/hostname", "web")
		seenFrom("the client host's own IPv6 address at the backend", base, l.Addr6(lab.Client).String())
		out, err := testenv.Run(l, lab.Client, "ip", "-6", "neigh", "show", vip6.String())
		if mac := macOf(t, l, "node2"); err != nil || !strings.Contains(out, "lladdr "+mac) {
			t.Errorf("the client host's neighbour entry for %s: %q (%v), want node2's %s", vip6, out, err, mac)
		}
	})
	t.Run("the IPv4 address still works, answered by the same node", func(t *testing.T) {
		base := "http://" + vip4.String() + ":80"
		get("the backend's name through "+vip4.String(), base+"/hostname", "web")
		seenFrom("the client host's own IPv4 address at the backend", base, l.Addr(lab.Client).String())
		if got := announcers(t, l, vip4); len(got) != 1 || got[0] != "node2" {
			t.Errorf("ARP for %s answered by %v, want node2", vip4, got)
		}
	})
}

// announcers asks from the client host who has ip (NDP for IPv6, ARP for
// IPv4) and returns the hosts whose eth1 answered.
func announcers(t *testing.T, l *lab.Lab, ip netip.Addr) []string {
	t.Helper()
	var macs []net.HardwareAddr
	err := netns.DoPath(netns.NetNSPath(lab.NS(l.Name(), lab.Client)), func() error {
		var err error
		if ip.Is4() {
			macs, err = loadbalancer.ProbeARP(context.Background(), "eth1", ip, 300*time.Millisecond)
		} else {
			macs, err = loadbalancer.ProbeNDP(context.Background(), "eth1", ip, 300*time.Millisecond)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, m := range macs {
		name := m.String()
		for _, h := range l.Hosts() {
			if macOf(t, l, h) == m.String() {
				name = h
			}
		}
		hosts = append(hosts, name)
	}
	return hosts
}

// macOf is the MAC address of host's eth1.
func macOf(t *testing.T, l *lab.Lab, host string) string {
	t.Helper()
	out, err := testenv.Run(l, host, "ip", "-o", "link", "show", "eth1")
	_, rest, ok := strings.Cut(out, "link/ether ")
	if err != nil || !ok {
		t.Fatalf("reading %s's MAC: %v: %s", host, err, out)
	}
	return strings.Fields(rest)[0]
}
