// Package pods_test checks pods as network namespaces end to end, in labs: the
// sandbox, the containers, probes gating endpoints, the agent's crash recovery
// and repair of sandboxes deleted by hand.
package pods_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

var ctx = context.Background()

func sleeper(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}}}}}
}

func create(t *testing.T, c kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return testenv.WaitPodReady(t, c, "default", p.Name)
}

func ipamOwners(t *testing.T, l *lab.Lab, node string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(l.Dir(), node, "agent", "ipam.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Owners map[string]string `json:"owners"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("parsing ipam.json: %v: %s", err, b)
	}
	return f.Owners
}

func TestPodsOnOneNode(t *testing.T) {
	l := testenv.NewLab(t, 1)
	c := testenv.Client(t, l)
	a := create(t, c, sleeper("a", "node1"))
	b := create(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Spec: corev1.PodSpec{NodeName: "node1", Hostname: "bee", Containers: []corev1.Container{{Name: "echo", Image: "minikit/echo"}}}})

	t.Run("two pods reach each other by pod IP", func(t *testing.T) {
		out, err := testenv.Exec(t, l, "a", "curl", "-s", "--max-time", "3", "http://"+b.Status.PodIP+":8080/")
		if err != nil || !strings.Contains(out, "client_address="+a.Status.PodIP+":") {
			t.Fatalf("a -> b: %v: %q", err, out)
		}
	})
	t.Run("a pod reaches its node", func(t *testing.T) {
		out, err := testenv.Exec(t, l, "a", "curl", "-sk", "--max-time", "3", "https://"+l.Addr("node1").String()+":6443/healthz")
		if err != nil || out != "ok" {
			t.Fatalf("a -> node1 API: %v: %q", err, out)
		}
	})
	t.Run("hostname is the pod name, or spec.hostname", func(t *testing.T) {
		if out, err := testenv.Exec(t, l, "a", "hostname"); err != nil || out != "a" {
			t.Fatalf("hostname in a = %q (%v)", out, err)
		}
		if out, err := testenv.Exec(t, l, "b", "hostname"); err != nil || out != "bee" {
			t.Fatalf("hostname in b = %q (%v)", out, err)
		}
		if out, _ := testenv.Exec(t, l, "a", "cat", "/etc/hosts"); !strings.Contains(out, a.Status.PodIP+"\ta") {
			t.Fatalf("/etc/hosts in a lacks its own entry: %q", out)
		}
	})
	t.Run("deleting a pod removes its netns, veth and IP", func(t *testing.T) {
		podNS := testenv.SandboxName(t, c, b)
		if !netns.ExistsNamed(podNS) {
			t.Fatalf("netns %s of pod b missing before delete", podNS)
		}
		// The cluster's own DNS pods (kube-system/coredns) have their
		// veths on node1's cni0 too.
		dns := len(testenv.ClusterDNSPodsOn(t, c, "node1"))
		links, _ := testenv.Run(l, "node1", "ip", "-o", "link", "show", "master", "cni0")
		if strings.Count(links, "veth") != 2+dns {
			t.Fatalf("want %d veths on cni0 (a, b and %d coredns pods), got %q", 2+dns, dns, links)
		}
		if got := ipamOwners(t, l, "node1")[string(b.UID)]; got != b.Status.PodIP {
			t.Fatalf("IPAM holds %q for pod b, want %s", got, b.Status.PodIP)
		}
		if err := c.CoreV1().Pods("default").Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "pod b gone from the API", func() error {
			if _, err := c.CoreV1().Pods("default").Get(ctx, "b", metav1.GetOptions{}); err == nil {
				return fmt.Errorf("still there")
			}
			return nil
		})
		if netns.ExistsNamed(podNS) {
			t.Errorf("netns %s still exists", podNS)
		}
		links, _ = testenv.Run(l, "node1", "ip", "-o", "link", "show", "master", "cni0")
		if strings.Count(links, "veth") != 1+dns {
			t.Errorf("want %d veths left on cni0 (a and %d coredns pods), got %q", 1+dns, dns, links)
		}
		if _, ok := ipamOwners(t, l, "node1")[string(b.UID)]; ok {
			t.Errorf("IP of deleted pod b still reserved")
		}
		if _, err := os.Stat(filepath.Join(cni.PodNSDir, podNS)); !os.IsNotExist(err) {
			t.Errorf("pod namespace files of b left in %s", cni.PodNSDir)
		}
	})
}

func int32p(v int32) *int32 { return &v }

func TestDeploymentEndpointsAndReadiness(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	flags := t.TempDir() // readiness flags: a pod is ready while its file exists
	labels := map[string]string{"app": "hostnames"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hostnames"},
		Spec: appsv1.DeploymentSpec{
			Replicas: int32p(3), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "hostnames", Image: "registry.k8s.io/serve_hostname",
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, ProbeHandler: corev1.ProbeHandler{
						Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "test ! -e " + flags + "/$(hostname).down"}}}}}},
			}},
		},
	}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hostnames"}, Spec: corev1.ServiceSpec{Selector: labels,
		Ports: []corev1.ServicePort{{Name: "default", Port: 80, TargetPort: intstr.FromInt32(9376)}}}}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(t, c, sleeper("client", "node1"))

	// readyIPs returns the ready addresses of Endpoints and of the EndpointSlices.
	readyIPs := func() (ep, slice, notReady []string) {
		e, err := c.CoreV1().Endpoints("default").Get(ctx, "hostnames", metav1.GetOptions{})
		if err == nil {
			for _, s := range e.Subsets {
				for _, a := range s.Addresses {
					ep = append(ep, a.IP)
				}
				for _, a := range s.NotReadyAddresses {
					notReady = append(notReady, a.IP)
				}
			}
		}
		sl, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=hostnames"})
		if err == nil {
			for _, s := range sl.Items {
				for _, e := range s.Endpoints {
					if e.Conditions.Ready != nil && *e.Conditions.Ready {
						slice = append(slice, e.Addresses...)
					}
				}
			}
		}
		sort.Strings(ep)
		sort.Strings(slice)
		return
	}
	waitReady := func(n int) []string {
		t.Helper()
		var ips []string
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%d ready endpoints in Endpoints and EndpointSlice", n), func() error {
			ep, slice, _ := readyIPs()
			if len(ep) != n || strings.Join(ep, ",") != strings.Join(slice, ",") {
				return fmt.Errorf("endpoints %v, slice %v", ep, slice)
			}
			ips = ep
			return nil
		})
		return ips
	}
	scale := func(n int32) {
		t.Helper()
		if err := testenv.Scale(ctx, c, "default", "hostnames", n); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("each of 3 pods answers its own name on 9376", func(t *testing.T) {
		ips := waitReady(3)
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hostnames"})
		if err != nil {
			t.Fatal(err)
		}
		byIP := map[string]string{}
		for _, p := range pods.Items {
			byIP[p.Status.PodIP] = p.Name
			if !strings.HasPrefix(p.Name, "hostnames-") {
				t.Errorf("pod name %q does not look like NAME-hash-suffix", p.Name)
			}
		}
		// The readiness probe checks a flag file, not the port, so a pod can
		// be ready a moment before serve_hostname listens (as in Kubernetes):
		// each pod must answer its own name soon, not at the first try.
		for _, ip := range ips {
			testutil.Eventually(t, 30*time.Second, ip+" answers its pod name", func() error {
				out, err := testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "3", "http://"+ip+":9376/")
				if err != nil || out != byIP[ip] {
					return fmt.Errorf("%s answered %q (%v), want its pod name %q", ip, out, err, byIP[ip])
				}
				return nil
			})
		}
	})
	t.Run("scaling to 5 and back to 2 updates Endpoints and EndpointSlices", func(t *testing.T) {
		scale(5)
		waitReady(5)
		scale(2)
		waitReady(2)
	})
	t.Run("a failing readiness probe moves the pod to notReady and back", func(t *testing.T) {
		ips := waitReady(2)
		pods, _ := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hostnames"})
		var victim corev1.Pod
		for _, p := range pods.Items {
			if p.Status.PodIP == ips[0] {
				victim = p
			}
		}
		flag := filepath.Join(flags, victim.Name+".down")
		if err := os.WriteFile(flag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "pod "+victim.Name+" not ready in Endpoints and the slice", func() error {
			ep, slice, notReady := readyIPs()
			if len(ep) != 1 || len(slice) != 1 || len(notReady) != 1 || notReady[0] != victim.Status.PodIP {
				return fmt.Errorf("ready %v, slice ready %v, notReady %v", ep, slice, notReady)
			}
			return nil
		})
		os.Remove(flag)
		waitReady(2)
	})
}

func TestAgentCrashAdoptionAndRepair(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	keep := create(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "keep"},
		Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: "echo", Image: "minikit/echo"}}}})
	gone := create(t, c, sleeper("gone", "node2"))
	client := create(t, c, sleeper("client", "node1"))
	_ = client

	if err := l.Stop("node2", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// While the agent is down: delete a pod (the API keeps it terminating, as for a
	// real kubelet that is away) and force it out.
	zero := int64(0)
	if err := c.CoreV1().Pods("default").Delete(ctx, "gone", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	goneNS := testenv.SandboxName(t, c, gone)
	if !netns.ExistsNamed(goneNS) {
		t.Fatalf("sandbox of pod gone vanished before the agent came back")
	}
	if _, ok := ipamOwners(t, l, "node2")[string(gone.UID)]; !ok {
		t.Fatalf("IP of pod gone not reserved before the agent came back")
	}
	if err := l.Start("node2"); err != nil {
		t.Fatal(err)
	}

	t.Run("running pod adopted, not recreated", func(t *testing.T) {
		testutil.Eventually(t, 30*time.Second, "client reaches pod keep", func() error {
			out, err := testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://"+keep.Status.PodIP+":8080/")
			if err != nil || !strings.Contains(out, "pod=keep") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		p, err := c.CoreV1().Pods("default").Get(ctx, "keep", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs := p.Status.ContainerStatuses[0]
		if p.Status.PodIP != keep.Status.PodIP || cs.RestartCount != 0 || cs.ContainerID != keep.Status.ContainerStatuses[0].ContainerID {
			t.Fatalf("pod keep changed: IP %s->%s, container %s->%s, restarts %d", keep.Status.PodIP, p.Status.PodIP,
				keep.Status.ContainerStatuses[0].ContainerID, cs.ContainerID, cs.RestartCount)
		}
	})
	t.Run("pod deleted while the agent was away is cleaned up", func(t *testing.T) {
		testutil.Eventually(t, 30*time.Second, "sandbox of pod gone removed", func() error {
			if netns.ExistsNamed(goneNS) {
				return fmt.Errorf("netns %s still exists", goneNS)
			}
			if _, ok := ipamOwners(t, l, "node2")[string(gone.UID)]; ok {
				return fmt.Errorf("IP still reserved")
			}
			return nil
		})
	})
	t.Run("netns deleted by hand is recreated", func(t *testing.T) {
		ns := testenv.SandboxName(t, c, keep)
		if err := netns.DeleteNamed(ns); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "pod keep answers again after its netns was deleted", func() error {
			out, err := testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://"+keep.Status.PodIP+":8080/")
			if err != nil || !strings.Contains(out, "pod=keep") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	})
}
