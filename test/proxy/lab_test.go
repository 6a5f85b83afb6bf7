// Package proxy_test holds the service proxy's end-to-end tests (lab tier, test/README.md): a lab of
// network namespaces runs the real minikit binary, and real curl from a pod or from
// the lab's client host checks what the proxy's rules do to real packets.
package proxy_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

var ctx = context.Background()

func deployment(name, image string, replicas int32, port int32, nodeName string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	c := corev1.Container{Name: name, Image: image}
	if port != 0 {
		c.Ports = []corev1.ContainerPort{{ContainerPort: port}}
		c.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}}}
	}
	spec := corev1.PodSpec{Containers: []corev1.Container{c}}
	if nodeName != "" {
		spec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodeName}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

func waitEndpoints(t *testing.T, c kubernetes.Interface, svc string, n int) {
	t.Helper()
	testutil.Eventually(t, 90*time.Second, fmt.Sprintf("%d ready endpoints of %s", n, svc), func() error {
		if got := testenv.ReadyEndpoints(c, "default", svc); got != n {
			return fmt.Errorf("%d ready endpoints", got)
		}
		return nil
	})
}

func clientPod(t *testing.T, c kubernetes.Interface, name, nodeName string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}}}}}
	if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return testenv.WaitPodReady(t, c, "default", name)
}

func TestClusterIPAndNodePort(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	if _, err := c.AppsV1().Deployments("default").Create(ctx, deployment("hostnames", "registry.k8s.io/serve_hostname", 3, 9376, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clientPod(t, c, "client", "node1")
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hostnames", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "hostnames"},
			Ports: []corev1.ServicePort{{Name: "default", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(9376)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, "hostnames", 3)
	vip := svc.Spec.ClusterIP + ":80"

	t.Run("ClusterIP from a pod spreads over every endpoint", func(t *testing.T) {
		seen := map[string]bool{}
		testutil.Eventually(t, 60*time.Second, "answers from all 3 pods", func() error {
			out, err := testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://"+vip+"/")
			if err != nil || !strings.HasPrefix(out, "hostnames-") {
				return fmt.Errorf("curl: %v: %s", err, out)
			}
			seen[out] = true
			if len(seen) < 3 {
				return fmt.Errorf("seen %v", seen)
			}
			return nil
		})
	})
	t.Run("a pod reaches itself through its own Service (hairpin)", func(t *testing.T) {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hostnames"})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("listing hostnames pods: %v", err)
		}
		self := pods.Items[0].Name
		testutil.Eventually(t, 60*time.Second, self+" answered through the VIP", func() error {
			out, err := testenv.Exec(t, l, self, "curl", "-s", "--max-time", "2", "http://"+vip+"/")
			if err != nil || out != self {
				return fmt.Errorf("got %q (%v)", out, err)
			}
			return nil
		})
	})
	t.Run("NodePort from the client host on every node", func(t *testing.T) {
		np := svc.Spec.Ports[0].NodePort
		for _, n := range []string{"node1", "node2"} {
			url := fmt.Sprintf("http://%s:%d/", l.Addr(n), np)
			testutil.Eventually(t, 30*time.Second, "NodePort on "+n, func() error {
				out, err := testenv.Run(l, lab.Client, "curl", "-s", "--max-time", "2", url)
				if err != nil || !strings.HasPrefix(out, "hostnames-") {
					return fmt.Errorf("curl %s: %v: %s", url, err, out)
				}
				return nil
			})
		}
	})
	t.Run("iptables -t nat -F is repaired within one sync period", func(t *testing.T) {
		if out, err := testenv.Run(l, "node1", "iptables", "-t", "nat", "-F"); err != nil {
			t.Fatalf("flush: %v: %s", err, out)
		}
		testutil.Eventually(t, 45*time.Second, "rules back", func() error {
			out, err := testenv.Run(l, "node1", "iptables-save", "-t", "nat")
			if err != nil || !strings.Contains(out, `-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`) ||
				!strings.Contains(out, "default/hostnames:default cluster IP") {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		out, err := testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://"+vip+"/")
		if err != nil || !strings.HasPrefix(out, "hostnames-") {
			t.Errorf("service after repair: %v %s", err, out)
		}
	})
	t.Run("scaled to zero, the VIP refuses connections at once", func(t *testing.T) {
		if err := testenv.Scale(ctx, c, "default", "hostnames", 0); err != nil {
			t.Fatal(err)
		}
		waitEndpoints(t, c, "hostnames", 0)
		testutil.Eventually(t, 30*time.Second, "connection refused", func() error {
			out, err := testenv.Exec(t, l, "client", "curl", "-s", "-S", "--max-time", "5", "http://"+vip+"/")
			// REJECT answers icmp-port-unreachable: connect fails at once with
			// ECONNREFUSED (curl exit 7), not a timeout (exit 28).
			if err == nil || !(strings.Contains(out, "refused") || strings.Contains(out, "(7)")) {
				return fmt.Errorf("curl: %v: %s", err, out)
			}
			return nil
		})
	})
}

// TestSourceIPAndExternalTrafficPolicy is the chapter's two diagrams: with
// externalTrafficPolicy Cluster, a NodePort hit on node2 is forwarded to the
// endpoint on node1 and SNATed to node2's address; with Local, the endpoint sees
// the client's own address and node2, which has no endpoint, drops the packet.
func TestSourceIPAndExternalTrafficPolicy(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	if _, err := c.AppsV1().Deployments("default").Create(ctx, deployment("echo", "minikit/echo", 1, 8080, "node1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "echo"},
			ExternalIPs: []string{l.Addr("node2").String()},
			Ports:       []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, "echo", 1)
	np := svc.Spec.Ports[0].NodePort
	client := l.Addr(lab.Client).String()
	curl := func(url string) (string, error) {
		return testenv.Run(l, lab.Client, "curl", "-s", "--max-time", "2", url)
	}

	t.Run("Cluster: via node2 the echo server sees node2's address (SNAT, mark 0x4000)", func(t *testing.T) {
		url := fmt.Sprintf("http://%s:%d/", l.Addr("node2"), np)
		testutil.Eventually(t, 30*time.Second, "echo via node2", func() error {
			out, err := curl(url)
			if err != nil || !strings.Contains(out, "client_address="+l.Addr("node2").String()+":") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		save, _ := testenv.Run(l, "node2", "iptables-save", "-t", "nat")
		// iptables-save prints --or-mark 0x4000 as --set-xmark 0x4000/0x4000.
		for _, want := range []string{"-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000", "--mark 0x4000/0x4000 -j RETURN", "-j MASQUERADE"} {
			if !strings.Contains(save, want) {
				t.Errorf("node2's nat table lacks %q", want)
			}
		}
	})
	t.Run("externalIPs: the chapter's externalIPs reach the service from the client", func(t *testing.T) {
		url := fmt.Sprintf("http://%s:8080/", l.Addr("node2"))
		testutil.Eventually(t, 30*time.Second, "echo via externalIP", func() error {
			out, err := curl(url)
			if err != nil || !strings.Contains(out, "pod=echo-") {
				return fmt.Errorf("%v: %s", err, out)
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
	t.Run("Local: via node1 the echo server sees the client's own address", func(t *testing.T) {
		url := fmt.Sprintf("http://%s:%d/", l.Addr("node1"), np)
		testutil.Eventually(t, 30*time.Second, "client address preserved", func() error {
			out, err := curl(url)
			if err != nil || !strings.Contains(out, "client_address="+client+":") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	})
	t.Run("Local: node2, without an endpoint, drops", func(t *testing.T) {
		url := fmt.Sprintf("http://%s:%d/", l.Addr("node2"), np)
		testutil.Eventually(t, 30*time.Second, "node2 drops", func() error {
			out, err := curl(url)
			if err == nil {
				return fmt.Errorf("node2 answered: %s", out)
			}
			return nil
		})
		save, _ := testenv.Run(l, "node2", "iptables-save", "-t", "filter")
		if !strings.Contains(save, `--comment "default/echo:http has no local endpoints" -m addrtype --dst-type LOCAL`) {
			t.Errorf("node2's filter table has no 'has no local endpoints' drop rule:\n%s", save)
		}
	})
}

// TestUDPServiceSurvivesBackendReplacement sends datagrams from one fixed source
// port (one conntrack entry) to a UDP service while its only backend is replaced:
// without conntrack cleanup the entry would keep pointing at the dead pod.
func TestUDPServiceSurvivesBackendReplacement(t *testing.T) {
	l := testenv.NewLab(t, 1)
	c := testenv.Client(t, l)
	if _, err := c.AppsV1().Deployments("default").Create(ctx, deployment("udp", "minikit/echo", 1, 8080, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "udp", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "udp"},
			Ports: []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, "udp", 1)
	client := clientPod(t, c, "client", "node1")

	// A UDP socket opened inside the client pod's netns, bound to a fixed port.
	var conn *net.UDPConn
	err = netns.DoPath(netns.NetNSPath(testenv.SandboxName(t, c, client)), func() error {
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero, Port: 40053})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	vip := &net.UDPAddr{IP: net.ParseIP(svc.Spec.ClusterIP), Port: 53}
	ask := func() (string, error) {
		if _, err := conn.WriteToUDP([]byte("hello"), vip); err != nil {
			return "", err
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 512)
		n, _, err := conn.ReadFromUDP(buf)
		return string(buf[:n]), err
	}
	var first string
	testutil.Eventually(t, 30*time.Second, "UDP answer", func() error {
		out, err := ask()
		first = out
		return err
	})
	pods, _ := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=udp"})
	old := pods.Items[0].Name
	if !strings.Contains(first, "pod="+old) {
		t.Fatalf("first answer %q not from %s", first, old)
	}
	zero := int64(0)
	if err := c.CoreV1().Pods("default").Delete(ctx, old, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "answers from the replacement pod on the same 5-tuple", func() error {
		out, err := ask()
		if err != nil || !strings.Contains(out, "pod=udp-") || strings.Contains(out, "pod="+old) {
			return fmt.Errorf("%q (%v)", out, err)
		}
		return nil
	})
}
