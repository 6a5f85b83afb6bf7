// Package reliability_test checks issue #10 end to end with the real binary: a
// cluster killed with SIGKILL at random moments converges again without losing or
// duplicating anything (crash_test.go), `minikit down` on a dedicated machine
// leaves its network as it found it (down_test.go), and a lab under steady load
// while Deployments scale and roll fails no request and leaks nothing
// (soak_test.go). Every test runs in network namespaces it creates and removes.
package reliability_test

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"

	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func ptr[T any](v T) *T { return &v }

// envInt reads a positive integer from the environment, or returns def.
func envInt(t testing.TB, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

// labClient is a clientset for the lab whose requests give up after timeout:
// requests cut off by a SIGKILL must fail, not hang the workload.
func labClient(t testing.TB, l *lab.Lab, timeout time.Duration) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst, rc.Timeout = 200, 400, timeout
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// nsHTTPClient makes its connections from inside the named network namespace
// (a lab host or a pod sandbox), one new connection per request, as a curl loop
// does. No packet leaves the root namespace.
func nsHTTPClient(netns string, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		DisableKeepAlives:  true,
		DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return lab.DialIn(ctx, netns, network, addr)
		},
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// httpGet fetches url with client and returns the body of a 200 answer.
func httpGet(client *http.Client, url, host string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("reading the answer of %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	return string(body), nil
}

// lookupA asks server (ip:port) for name's A records from inside the named
// network namespace, over UDP, as a pod's resolver does.
func lookupA(netns, server, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := lab.DialIn(ctx, netns, "udp", server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	dc := &dns.Conn{Conn: conn}
	if err := dc.WriteMsg(m); err != nil {
		return nil, err
	}
	r, err := dc.ReadMsg()
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("%s: %s", name, dns.RcodeToString[r.Rcode])
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return out, nil
}

// svcChain is kube-proxy's KUBE-SVC chain name of a TCP service port.
func svcChain(ns, name, port string) string {
	spn := ns + "/" + name
	if port != "" {
		spn += ":" + port
	}
	sum := sha256.Sum256([]byte(spn + "tcp"))
	return "KUBE-SVC-" + base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// webDeployment is an echo server Deployment with a readiness probe, a preStop
// sleep and a short grace period, so a rollout or a scale-down is graceful, as a
// Kubernetes manual recommends.
func webDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr(int64(5)),
					Containers: []corev1.Container{{
						Name: "echo", Image: "minikit/echo",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						// The endpoint leaves every node's rules while the process
						// still serves: the sleep outlasts the propagation.
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 2}}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
}

// service selects app on port 80 -> 8080 ("http").
func service(name, app string, typ corev1.ServiceType) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": "reliability"}},
		Spec: corev1.ServiceSpec{Type: typ, Selector: map[string]string{"app": app},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
}

// sleeper is a pod pinned to a node that only sleeps: a place to send requests
// from, and a witness that survives every round.
func sleeper(name, nodeName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": "probe"}},
		Spec: corev1.PodSpec{NodeName: nodeName, TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}}}},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// waitDeployment waits until a Deployment's rollout is complete.
func waitDeployment(ctx context.Context, c kubernetes.Interface, name string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		dep, err := c.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			want := *dep.Spec.Replicas
			s := dep.Status
			if s.ObservedGeneration >= dep.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want {
				return nil
			}
			last = fmt.Sprintf("want %d, status %+v", want, s)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("deployment %s not rolled out after %v: %s", name, d, last)
}

// procStats is what /proc says about a process (resident memory, open files
// and threads) and its goroutines, from the node's /metrics.
type procStats struct {
	RSSKiB int
	// AnonKiB is the anonymous part of RSS (heap, stacks): what a leak grows.
	// The rest is mostly file pages, bbolt's mmap of a database that grows
	// with what is stored.
	AnonKiB    int
	FDs        int
	Threads    int
	Goroutines int
}

func (s procStats) String() string {
	return fmt.Sprintf("RSS %d KiB (anon %d), %d fds, %d threads, %d goroutines", s.RSSKiB, s.AnonKiB, s.FDs, s.Threads, s.Goroutines)
}

// readGoroutines reads go_goroutines from the node's debug endpoint
// (127.0.0.1:10249/metrics, as kube-proxy serves it) inside its namespace.
func readGoroutines(nodeNS string) (int, error) {
	body, err := httpGet(nsHTTPClient(nodeNS, 5*time.Second), "http://127.0.0.1:10249/metrics", "")
	if err != nil {
		return 0, fmt.Errorf("reading %s's /metrics: %w", nodeNS, err)
	}
	for _, l := range strings.Split(body, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "go_goroutines" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no go_goroutines in %s's /metrics:\n%s", nodeNS, body)
}

func readProcStats(pid int) (procStats, error) {
	var s procStats
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			s.RSSKiB, _ = strconv.Atoi(f[1])
		case "RssAnon:":
			s.AnonKiB, _ = strconv.Atoi(f[1])
		case "Threads:":
			s.Threads, _ = strconv.Atoi(f[1])
		}
	}
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return s, err
	}
	s.FDs = len(fds)
	return s, nil
}

// nsInode is the inode of a network namespace file (0 if it does not exist):
// with it, a process still inside a deleted namespace can be found.
func nsInode(path string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

// processesInNetNS lists the PIDs whose network namespace has inode ino.
func processesInNetNS(ino uint64) []int {
	if ino == 0 {
		// A namespace that does not exist has no processes (and a /proc
		// entry whose namespace cannot be read must not match it).
		return nil
	}
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if nsInode("/proc/"+e.Name()+"/ns/net") == ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procID is a process by PID and start time, which together never repeat.
type procID struct {
	pid   int
	start string
}

// procStart is a process's start time in clock ticks ("" once it is gone or a zombie).
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}
