package proxy_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// kubectlRaw runs the real kubectl's `get --raw PATH` against the lab.
func kubectlRaw(l *lab.Lab, path string) (string, error) {
	out, err := exec.Command("kubectl", "--kubeconfig", l.Kubeconfig(), "get", "--raw", path).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestProxySubresources drives the API server's pods|services|nodes/proxy with
// the real kubectl (the API server, in node1's namespace, dials pods on both
// nodes and node2's agent over the lab's networks), and checks that pods reach
// the API through the kubernetes Service's ClusterIP, which needs the
// EndpointSlice the API server writes for it.
func TestProxySubresources(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	if _, err := c.AppsV1().Deployments("default").Create(ctx, deployment("hostnames", "registry.k8s.io/serve_hostname", 2, 9376, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	porter := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "porter", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{
			Name: "porter", Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1", Args: []string{"porter"},
			Env: []corev1.EnvVar{
				{Name: "SERVE_PORT_8080", Value: "foo"},
				{Name: "SERVE_PORT_8081", Value: `<a href="/rewriteme">test</a>`},
				{Name: "SERVE_TLS_PORT_8443", Value: "tls baz"},
				{Name: "SERVE_UDP_PORT_8082", Value: "udp"},
			},
			Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8443)}}},
		}}}}
	if _, err := c.CoreV1().Pods("default").Create(ctx, porter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "hostnames", Namespace: "default"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "hostnames"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(9376)}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: "default"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "nothing"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
	} {
		if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitEndpoints(t, c, "hostnames", 2)
	testenv.WaitPodReady(t, c, "default", "porter")
	pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hostnames"})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("listing hostnames pods: %v", err)
	}
	isHostname := map[string]bool{}
	for _, p := range pods.Items {
		isHostname[p.Name] = true
	}

	t.Run("services/NAME:PORT and http:NAME:PORTNAME reach a ready endpoint", func(t *testing.T) {
		for _, id := range []string{"hostnames:80", "http:hostnames:http", "hostnames:http"} {
			path := "/api/v1/namespaces/default/services/" + id + "/proxy/"
			seen := map[string]bool{}
			testutil.Eventually(t, 30*time.Second, "both pods answered "+path, func() error {
				out, err := kubectlRaw(l, path)
				if err != nil || !isHostname[out] {
					return fmt.Errorf("kubectl get --raw %s: %v: %s", path, err, out)
				}
				seen[out] = true
				if len(seen) < 2 {
					return fmt.Errorf("only %v answered", seen)
				}
				return nil
			})
		}
	})
	t.Run("pods/NAME:PORT/proxy/PATH reaches that pod, on either node", func(t *testing.T) {
		for _, p := range pods.Items {
			path := "/api/v1/namespaces/default/pods/" + p.Name + ":9376/proxy/any/path"
			if out, err := kubectlRaw(l, path); err != nil || out != p.Name {
				t.Errorf("kubectl get --raw %s (pod on %s): %v: %q, want %q", path, p.Spec.NodeName, err, out, p.Name)
			}
		}
		for path, want := range map[string]string{
			// No port: the pod's first container port.
			"/api/v1/namespaces/default/pods/porter/proxy/":            "foo",
			"/api/v1/namespaces/default/pods/https:porter:8443/proxy/": "tls baz",
			// HTML links are rewritten to go through the proxy.
			"/api/v1/namespaces/default/pods/porter:8081/proxy/": `<a href="/api/v1/namespaces/default/pods/porter:8081/proxy/rewriteme">test</a>`,
		} {
			if out, err := kubectlRaw(l, path); err != nil || out != want {
				t.Errorf("kubectl get --raw %s: %v: %q, want %q", path, err, out, want)
			}
		}
	})
	t.Run("nodes/NODE/proxy reaches the node's agent", func(t *testing.T) {
		// The agent's /containerLogs (its /healthz and /logs come with another
		// change). Every hostnames pod logged the requests proxied to it above;
		// porter, on node2, logged its UDP server.
		want := map[string]string{"/api/v1/nodes/node2/proxy/containerLogs/default/porter/porter": "Started UDP server on port 8082"}
		for _, p := range pods.Items {
			want["/api/v1/nodes/"+p.Spec.NodeName+"/proxy/containerLogs/default/"+p.Name+"/hostnames"] = "HTTP request from"
		}
		for path, w := range want {
			if out, err := kubectlRaw(l, path); err != nil || !strings.Contains(out, w) {
				t.Errorf("kubectl get --raw %s: %v: %q, want it to contain %q", path, err, out, w)
			}
		}
	})
	t.Run("a service without endpoints is 503", func(t *testing.T) {
		out, err := kubectlRaw(l, "/api/v1/namespaces/default/services/empty:80/proxy/")
		if err == nil || !strings.Contains(out, "ServiceUnavailable") || !strings.Contains(out, `no endpoints available for service "empty:80"`) {
			t.Errorf("kubectl get --raw services/empty:80/proxy/: %v: %s", err, out)
		}
	})
	t.Run("pods reach the API at the kubernetes Service", func(t *testing.T) {
		sl, err := c.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sl.Labels[discoveryv1.LabelServiceName] != "kubernetes" || len(sl.Endpoints) != 1 ||
			len(sl.Endpoints[0].Addresses) != 1 || sl.Endpoints[0].Addresses[0] != l.Addr("node1").String() {
			t.Errorf("slice default/kubernetes: labels %v endpoints %+v, want node1's %s", sl.Labels, sl.Endpoints, l.Addr("node1"))
		}
		svc, err := c.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, node := range []string{"node1", "node2"} {
			name := "client-" + node
			clientPod(t, c, name, node)
			url := "https://" + svc.Spec.ClusterIP + "/version"
			testutil.Eventually(t, 30*time.Second, name+" reached "+url, func() error {
				out, err := testenv.Exec(t, l, name, "curl", "-sk", "--max-time", "2", url)
				if err != nil || !strings.Contains(out, `"gitVersion"`) {
					return fmt.Errorf("curl -k %s: %v: %s", url, err, out)
				}
				return nil
			})
		}
	})
}
