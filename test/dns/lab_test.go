// Package dnslab holds the lab-tier cluster DNS tests (test/README.md): a lab of network
// namespaces running the real minikit binary, queried from inside pods with dig,
// getent and curl as a student would.
//
// Tests and what they need:
//   - TestLabDNSListener: the coredns pods (kube-system, k8s-app=kube-dns)
//     queried directly from pods at their pod IPs, and the kube-dns Service
//     selecting them.
//   - TestLabDNSUpstream: an ExternalName to the lab's external host; needs
//     the lab to start nodes with --dns-upstream <external host>.
//   - TestLabDNSClusterIP: pods querying the kube-dns VIP 10.96.0.10, and
//     surviving a coredns pod going away; needs the service proxy.
//   - TestLabDNSSearchPath: pods resolving through their resolv.conf (search
//     path, nameserver 10.96.0.10) with dig, getent and curl; needs the proxy,
//     the agent writing dns.ResolvConf, and --dns-upstream for the
//     ExternalName.
package dnslab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/test/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// minikitBinary is the binary every lab test runs, built once (testenv).
func minikitBinary(t *testing.T) string { return testenv.Minikit(t) }

// env is one lab with the DNS scenario applied.
type env struct {
	t      *testing.T
	l      *lab.Lab
	c      kubernetes.Interface
	bin    string
	ctx    context.Context
	podIPs map[string]string // pod name -> IP
}

func up(t *testing.T, name string, nodes int) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("lab tests need root")
	}
	for _, tool := range []string{"dig", "nsenter", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("lab tests need %s", tool)
		}
	}
	bin := minikitBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	l, err := lab.Up(ctx, lab.Config{Name: name, Nodes: nodes, Dir: t.TempDir(), Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{"node1.log", "node2.log"} {
				if b, err := os.ReadFile(filepath.Join(l.Dir(), f)); err == nil {
					lines := strings.Split(string(b), "\n")
					t.Logf("%s (tail):\n%s", f, strings.Join(lines[max(0, len(lines)-40):], "\n"))
				}
			}
		}
		if err := l.Down(); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, l: l, c: c, bin: bin, ctx: ctx, podIPs: map[string]string{}}
	e.apply()
	return e
}

func labels(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// apply creates the scenario: the docs' hostnames Deployment behind a
// ClusterIP and a headless Service, a pod with hostname+subdomain behind its
// headless Service, an ExternalName to the external host, a client pod.
func (e *env) apply() {
	t, ctx := e.t, e.ctx
	three := int32(3)
	serve := corev1.Container{Name: "hostnames", Image: "registry.k8s.io/serve_hostname",
		Ports:          []corev1.ContainerPort{{ContainerPort: 9376}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(9376)}}, PeriodSeconds: 1}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hostnames"}, Spec: appsv1.DeploymentSpec{
		Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: labels("app", "hostnames")},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels("app", "hostnames")},
			Spec: corev1.PodSpec{Containers: []corev1.Container{serve}}}}}
	if _, err := e.c.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(9376), Protocol: corev1.ProtocolTCP}}
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "hostnames"}, Spec: corev1.ServiceSpec{Selector: labels("app", "hostnames"), Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Name: "hostnames-hl"}, Spec: corev1.ServiceSpec{Selector: labels("app", "hostnames"), ClusterIP: corev1.ClusterIPNone, Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Name: "sub"}, Spec: corev1.ServiceSpec{Selector: labels("dns", "sub"), ClusterIP: corev1.ClusterIPNone, Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "my.database.example.com"}},
	} {
		if _, err := e.c.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "host-pod", Labels: labels("dns", "sub")},
			Spec: corev1.PodSpec{Hostname: "host", Subdomain: "sub", Containers: []corev1.Container{serve}}},
		// The client stays on node1, which runs the API: the tests stop node2.
		{ObjectMeta: metav1.ObjectMeta{Name: "client"},
			Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "sleeper", Image: "busybox", Command: []string{"sleep", "infinity"}}}}},
	} {
		if _, err := e.c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitReadyPods(5)
}

func (e *env) waitReadyPods(n int) {
	e.t.Helper()
	e.eventually("pods ready", 2*time.Minute, func() (bool, string) {
		pods, err := e.c.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range pods.Items {
			if p.Status.PodIP != "" {
				e.podIPs[p.Name] = p.Status.PodIP
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		return ready >= n, fmt.Sprintf("%d of %d pods ready", ready, n)
	})
}

// eventually polls cond until it holds or d passes.
func (e *env) eventually(what string, d time.Duration, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %v: %s", what, d, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exec runs argv inside a pod (minikit exec).
func (e *env) exec(pod string, argv ...string) (string, error) {
	args := append([]string{"exec", "--kubeconfig", e.l.Kubeconfig(), pod, "--"}, argv...)
	out, err := exec.CommandContext(e.ctx, e.bin, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// dig runs dig in the client pod and returns its +short lines, sorted.
func (e *env) dig(args ...string) ([]string, error) {
	out, err := e.exec("client", append([]string{"dig", "+short", "+time=2", "+tries=2"}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("dig %s: %v: %s", strings.Join(args, " "), err, out)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, ";") {
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	return lines, nil
}

func (e *env) expectDig(want []string, args ...string) {
	e.t.Helper()
	sort.Strings(want)
	e.eventually("dig "+strings.Join(args, " "), 30*time.Second, func() (bool, string) {
		got, err := e.dig(args...)
		if err != nil {
			return false, err.Error()
		}
		return slices.Equal(got, want), fmt.Sprintf("got %q, want %q", got, want)
	})
}

// dnsPodIPs are the IPs of the ready coredns pods (kube-system,
// k8s-app=kube-dns), sorted, once there are two (the Deployment's replicas).
func (e *env) dnsPodIPs() []string {
	e.t.Helper()
	var ips []string
	e.eventually("coredns pods ready", 2*time.Minute, func() (bool, string) {
		pods, err := e.c.CoreV1().Pods("kube-system").List(e.ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			return false, err.Error()
		}
		ips = ips[:0]
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ips = append(ips, p.Status.PodIP)
				}
			}
		}
		return len(ips) == 2, fmt.Sprintf("%d ready coredns pods", len(ips))
	})
	sort.Strings(ips)
	return ips
}

// clientListener is a coredns pod's address.
func (e *env) clientListener() string { return e.dnsPodIPs()[0] }

func (e *env) clusterIP(name string) string {
	s, err := e.c.CoreV1().Services("default").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return s.Spec.ClusterIP
}

func (e *env) readyHostnamesIPs() []string {
	sl, err := e.c.DiscoveryV1().EndpointSlices("default").List(e.ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=hostnames-hl"})
	if err != nil {
		e.t.Fatal(err)
	}
	var ips []string
	for _, s := range sl.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				ips = append(ips, ep.Addresses...)
			}
		}
	}
	sort.Strings(ips)
	return ips
}

// TestLabDNSListener queries each record kind from a pod at its node's DNS
// listener, over UDP and TCP, and checks the kube-dns wiring in the API.
func TestLabDNSListener(t *testing.T) {
	e := up(t, "dnsl", 2)
	ns := e.clientListener()
	at := "@" + ns
	cip := e.clusterIP("hostnames")
	for _, proto := range []string{"+notcp", "+tcp"} {
		e.expectDig([]string{cip}, at, proto, "hostnames.default.svc.cluster.local", "A")
		e.expectDig([]string{"10.96.0.1"}, at, proto, "kubernetes.default.svc.cluster.local", "A")
		e.expectDig([]string{"0 100 80 hostnames.default.svc.cluster.local."}, at, proto, "_http._tcp.hostnames.default.svc.cluster.local", "SRV")
		e.expectDig([]string{"hostnames.default.svc.cluster.local."}, at, proto, "-x", cip)
		e.expectDig([]string{e.podIPs["host-pod"]}, at, proto, "host.sub.default.svc.cluster.local", "A")
		e.expectDig(nil, at, proto, "nope.default.svc.cluster.local", "A")
		e.expectDig([]string{"my.database.example.com."}, at, proto, "db.default.svc.cluster.local", "CNAME")
	}
	// The headless service follows its ready pods as they come and go.
	e.expectDig(e.readyHostnamesIPs(), at, "hostnames-hl.default.svc.cluster.local", "A")
	if n := len(e.readyHostnamesIPs()); n != 3 {
		t.Fatalf("%d ready hostnames pods, want 3", n)
	}
	if err := testenv.Scale(e.ctx, e.c, "default", "hostnames", 1); err != nil {
		t.Fatal(err)
	}
	e.eventually("scaled to 1", time.Minute, func() (bool, string) {
		ips := e.readyHostnamesIPs()
		return len(ips) == 1, fmt.Sprint(ips)
	})
	e.expectDig(e.readyHostnamesIPs(), at, "hostnames-hl.default.svc.cluster.local", "A")

	// Negative answers are exact: NXDOMAIN for a missing service, NODATA for AAAA.
	for q, want := range map[string]string{"nope.default.svc.cluster.local A": "NXDOMAIN", "hostnames.default.svc.cluster.local AAAA": "NOERROR"} {
		out, err := e.exec("client", append([]string{"dig", at, "+time=2"}, strings.Fields(q)...)...)
		if err != nil || !strings.Contains(out, "status: "+want) || !strings.Contains(out, "flags: qr aa rd;") || !strings.Contains(out, "AUTHORITY: 1") {
			t.Errorf("dig %s: want %s with aa and the SOA, got %v\n%s", q, want, err, out)
		}
	}

	// kube-system/kube-dns: 10.96.0.10, selecting the coredns pods, which
	// are its endpoints.
	svc, err := e.c.CoreV1().Services("kube-system").Get(e.ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.96.0.10" || svc.Spec.Selector["k8s-app"] != "kube-dns" || len(svc.Spec.Ports) != 3 {
		t.Errorf("kube-dns: clusterIP %s selector %v ports %v", svc.Spec.ClusterIP, svc.Spec.Selector, svc.Spec.Ports)
	}
	want := e.dnsPodIPs()
	e.eventually("kube-dns endpoints", 30*time.Second, func() (bool, string) {
		sl, err := e.c.DiscoveryV1().EndpointSlices("kube-system").List(e.ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kube-dns"})
		if err != nil {
			return false, err.Error()
		}
		var got []string
		for _, s := range sl.Items {
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					got = append(got, ep.Addresses...)
				}
			}
		}
		sort.Strings(got)
		return slices.Equal(got, want), fmt.Sprintf("got %v, want %v", got, want)
	})
}

// TestLabDNSUpstream: an ExternalName to the external host resolves through
// the upstream, and curl to the service name reaches its HTTP server.
// Needs the lab to pass --dns-upstream (the external host) to the nodes.
func TestLabDNSUpstream(t *testing.T) {
	e := up(t, "dnsu", 1)
	at := "@" + e.clientListener()
	ext := e.l.Addr(lab.External).String()
	e.expectDig([]string{"my.database.example.com.", ext}, at, "db.default.svc.cluster.local", "A")
	e.expectDig([]string{ext}, at, "my.database.example.com", "A")
	e.expectDig([]string{ext}, at, "+tcp", "www.example.com", "A")
}

// TestLabDNSSearchPath: what a student sees with the whole stack: pods
// resolve through their resolv.conf (nameserver 10.96.0.10, the search path)
// with dig +search, getent and curl.
// Needs the service proxy and the agent writing dns.ResolvConf.
func TestLabDNSSearchPath(t *testing.T) {
	e := up(t, "dnss", 2)
	resolv, err := e.exec("client", "cat", "/etc/resolv.conf")
	if err != nil || !strings.Contains(resolv, "nameserver 10.96.0.10") || !strings.Contains(resolv, "search default.svc.cluster.local svc.cluster.local cluster.local") {
		t.Fatalf("client resolv.conf (%v):\n%s", err, resolv)
	}
	cip := e.clusterIP("hostnames")
	for _, name := range []string{"hostnames", "hostnames.default", "hostnames.default.svc.cluster.local"} {
		e.expectDig([]string{cip}, "+search", name, "A")
		e.eventually("getent hosts "+name, 30*time.Second, func() (bool, string) {
			out, err := e.exec("client", "getent", "hosts", name)
			return err == nil && strings.HasPrefix(out, cip), out
		})
	}
	e.expectDig([]string{"10.96.0.1"}, "+search", "kubernetes.default", "A")
	e.expectDig([]string{"0 100 80 hostnames.default.svc.cluster.local."}, "+search", "_http._tcp.hostnames", "SRV")
	e.expectDig([]string{"hostnames.default.svc.cluster.local."}, "-x", cip)
	e.expectDig([]string{e.podIPs["host-pod"]}, "+search", "host.sub", "A")
	e.expectDig(e.readyHostnamesIPs(), "+search", "hostnames-hl", "A")
	e.eventually("curl hostnames", 30*time.Second, func() (bool, string) {
		out, err := e.exec("client", "curl", "-s", "--max-time", "3", "http://hostnames/")
		return err == nil && strings.HasPrefix(out, "hostnames-"), out
	})
	// Needs --dns-upstream too: the ExternalName's target is the external host.
	e.eventually("curl the ExternalName service", 30*time.Second, func() (bool, string) {
		out, err := e.exec("client", "curl", "-s", "--max-time", "3", "http://db/")
		return err == nil && strings.Contains(out, "external host"), out
	})
}

// TestLabDNSClusterIP: pods reach cluster DNS through the kube-dns VIP, over
// UDP and TCP, and resolution survives a coredns pod going away (it leaves
// the endpoints when it starts terminating and answers through its health
// plugin's lameduck meanwhile; the proxy moves the VIP to the other pod and
// cleans UDP conntrack): no lookup may fail for more than one retry.
// Needs the service proxy.
func TestLabDNSClusterIP(t *testing.T) {
	e := up(t, "dnsc", 2)
	const vip = "@10.96.0.10"
	cip := e.clusterIP("hostnames")
	for _, proto := range []string{"+notcp", "+tcp"} {
		e.expectDig([]string{cip}, vip, proto, "hostnames.default.svc.cluster.local", "A")
		e.expectDig([]string{"10.96.0.1"}, vip, proto, "kubernetes.default.svc.cluster.local", "A")
	}
	stop := make(chan struct{})
	failures := make(chan string, 1000)
	lookups, retried, execErrs := 0, 0, 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			out, err := e.exec("client", "dig", vip, "+short", "+time=1", "+tries=2", "hostnames.default.svc.cluster.local", "A")
			lines := strings.Split(out, "\n")
			switch {
			case err == nil && lines[len(lines)-1] == cip:
				// Answered, possibly after one retry (dig prints the
				// failed try as a comment line first).
				lookups++
				if len(lines) > 1 {
					retried++
				}
			case strings.HasPrefix(out, "Error:"):
				// minikit exec itself failed: not a DNS answer either way.
				execErrs++
			default:
				failures <- fmt.Sprintf("%v: %s", err, out)
			}
		}
	}()
	time.Sleep(2 * time.Second) // queries flowing to both listeners before the stop
	pods, err := e.c.CoreV1().Pods("kube-system").List(e.ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("coredns pods: %v %v", pods, err)
	}
	node := "pod " + pods.Items[0].Name
	if err := e.c.CoreV1().Pods("kube-system").Delete(e.ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	close(stop)
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Errorf("lookup failed after %s's DNS went away: %s", node, f)
	}
	if lookups < 10 {
		t.Errorf("only %d lookups in 12 s", lookups)
	}
	t.Logf("%d lookups through the VIP while %s's DNS went away, %d after a retry (%d minikit exec errors)", lookups, node, retried, execErrs)
}
