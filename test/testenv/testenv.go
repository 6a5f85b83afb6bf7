// Package testenv holds what end-to-end tests share: the minikit binary built once
// per test binary, labs that remove themselves, and snapshots of the root network
// namespace to prove a test changed nothing there.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/fsutil"
	"github.com/minikit/minikit/internal/testutil"

	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/lab"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Minikit returns the minikit binary the lab tier runs: $MINIKIT_BINARY when
// set (scripts/test.sh builds it once for every package of the tier, as
// pkg/minikittest.StartLab takes it), else one built once per test process.
func Minikit(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if bin := os.Getenv("MINIKIT_BINARY"); bin != "" {
			fi, err := os.Stat(bin)
			switch {
			case err != nil:
				buildErr = fmt.Errorf("MINIKIT_BINARY: %w", err)
			case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
				buildErr = fmt.Errorf("MINIKIT_BINARY=%s is not an executable file", bin)
			default:
				binPath = bin
			}
			return
		}
		// Removed by the next test process once this one is gone.
		dir, err := fsutil.ProcessTempDir("minikit-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "minikit")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/minikit/minikit/cmd/minikit").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// RequireRoot fails (under CI) or skips (elsewhere) a test that needs root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("this test needs root, and CI runs as root: it must not be skipped")
	}
	t.Skip("needs root")
}

// NewLab brings up a lab of n nodes with a unique name and removes it when the
// test ends, even on failure. The lab's logs are printed if the test failed.
func NewLab(t testing.TB, n int) *lab.Lab {
	t.Helper()
	return NewLabConfig(t, lab.Config{Nodes: n})
}

// NewLabConfig is NewLab with more of the lab's configuration (e.g. its
// ProxyMode); the name, directory and binary are the test's own.
func NewLabConfig(t testing.TB, cfg lab.Config) *lab.Lab {
	t.Helper()
	RequireRoot(t)
	bin := Minikit(t)
	b := make([]byte, 3)
	rand.Read(b)
	name := "mkt" + hex.EncodeToString(b)
	dir := filepath.Join(os.TempDir(), "minikit-"+name)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg.Name, cfg.Dir, cfg.Binary = name, dir, bin
	// The lab goes even when this test binary dies without running its
	// cleanups (-timeout, a kill).
	watchdog, err := lab.StartWatchdog(bin, name, dir)
	if err != nil {
		t.Fatalf("starting the lab's watchdog: %v", err)
	}
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		watchdog.Stop()
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		defer watchdog.Stop()
		if t.Failed() {
			for _, h := range l.Hosts() {
				if b, err := os.ReadFile(filepath.Join(dir, h+".log")); err == nil {
					t.Logf("=== %s.log (last 4 KiB)\n%s", h, tail(b, 4096))
				}
			}
		}
		if err := l.Down(); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	return l
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Run runs a command on a lab host and returns its combined output.
func Run(l *lab.Lab, host string, argv ...string) (string, error) {
	out, err := l.Command(host, argv...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Exec runs a command inside a pod of the lab (minikit exec).
func Exec(t testing.TB, l *lab.Lab, pod string, argv ...string) (string, error) {
	args := append([]string{"--kubeconfig", l.Kubeconfig(), "exec", pod, "--"}, argv...)
	out, err := exec.Command(Minikit(t), args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Client returns a clientset for the lab.
func Client(t testing.TB, l *lab.Lab) kubernetes.Interface {
	t.Helper()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// WaitPodReady waits for a pod to be Ready and returns it.
func WaitPodReady(t testing.TB, c kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testutil.Eventually(t, 60*time.Second, "pod "+name+" Ready", func() error {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("phase %s", p.Status.Phase)
	})
	return pod
}

// RootSnapshot describes the root network namespace: links, addresses, routes,
// rules, and the netns names and mounts under /run/netns and /run/minikit for
// which mine returns true (other tests' labs may come and go meanwhile). Two
// equal snapshots mean a test left the machine's own network as it found it.
func RootSnapshot(t testing.TB, mine func(name string) bool) string {
	t.Helper()
	var b strings.Builder
	for _, argv := range [][]string{
		{"ip", "-o", "link", "show"},
		{"ip", "-o", "addr", "show"},
		{"ip", "route", "show", "table", "all"},
		{"ip", "rule", "show"},
		{"iptables-save"},
	} {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
		fmt.Fprintf(&b, "## %s\n%s\n", strings.Join(argv, " "), normalize(string(out)))
	}
	var names []string
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if mine(e.Name()) {
			names = append(names, e.Name())
		}
	}
	entries, _ = os.ReadDir("/run/minikit/ns")
	for _, e := range entries {
		if mine(e.Name()) {
			names = append(names, "podns/"+e.Name())
		}
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "## namespaces\n%s\n", strings.Join(names, "\n"))
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	var ms []string
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (strings.HasPrefix(f[4], "/run/netns/") || strings.HasPrefix(f[4], "/run/minikit")) && mine(filepath.Base(f[4])) {
			ms = append(ms, f[4])
		}
	}
	sort.Strings(ms)
	fmt.Fprintf(&b, "## mounts\n%s\n", strings.Join(ms, "\n"))
	return b.String()
}

var (
	reCounters  = regexp.MustCompile(`\[\d+:\d+\]`)
	reGenerated = regexp.MustCompile(`(?m)^# (Generated|Completed) .*$`)
	reStats     = regexp.MustCompile(`(?m)\s+(valid_lft|preferred_lft) \S+`)
)

// normalize drops what changes by itself: packet counters, timestamps, lifetimes.
func normalize(s string) string {
	s = reCounters.ReplaceAllString(s, "")
	s = reGenerated.ReplaceAllString(s, "")
	return reStats.ReplaceAllString(s, "")
}

// SandboxName is the network namespace of a pod of the lab.
func SandboxName(t testing.TB, c kubernetes.Interface, pod *corev1.Pod) string {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name, err := kubelet.PodSandboxName(n, pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// ReadyEndpoints counts the ready endpoints of Service svc in namespace ns
// across its EndpointSlices, or -1 when they cannot be listed.
func ReadyEndpoints(c kubernetes.Interface, ns, svc string) int {
	sl, err := c.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svc})
	if err != nil {
		return -1
	}
	n := 0
	for _, s := range sl.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				n++
			}
		}
	}
	return n
}

// Buffer is a bytes.Buffer that a child process's output and the test can share.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Scale reads a Deployment's Scale and writes it back with n replicas, as
// kubectl scale with --resource-version does. The Scale carries the
// Deployment's resourceVersion and the deployment controller writes its
// status meanwhile, so a write that lost that race (409, Kubernetes' answer)
// reads again, as client-go's RetryOnConflict does.
func Scale(ctx context.Context, c kubernetes.Interface, namespace, name string, n int32) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := c.AppsV1().Deployments(namespace).GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = n
		_, err = c.AppsV1().Deployments(namespace).UpdateScale(ctx, name, s, metav1.UpdateOptions{})
		return err
	})
}

// ClusterDNSPods waits until the cluster's own DNS, kubeadm's
// kube-system/coredns Deployment, has all its replicas Ready and no other
// pods (a rollout or a deleted pod's replacement in between), and returns
// those pods. Tests that count a node's veths or a lab's namespaces expect
// these pods too, as a user of a kubeadm cluster sees them in
// `kubectl get pods -A`.
func ClusterDNSPods(t testing.TB, c kubernetes.Interface) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	testutil.Eventually(t, 90*time.Second, "kube-system/coredns's replicas Ready", func() error {
		d, err := c.AppsV1().Deployments("kube-system").Get(context.Background(), "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		l, err := c.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			return err
		}
		if len(l.Items) != int(want) {
			return fmt.Errorf("%d pods, want %d", len(l.Items), want)
		}
		for _, p := range l.Items {
			ready := false
			for _, cond := range p.Status.Conditions {
				ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
			}
			if !ready || p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
				return fmt.Errorf("pod %s not Ready (phase %s)", p.Name, p.Status.Phase)
			}
		}
		pods = l.Items
		return nil
	})
	return pods
}

// ClusterDNSPodsOn is ClusterDNSPods on node alone.
func ClusterDNSPodsOn(t testing.TB, c kubernetes.Interface, node string) []corev1.Pod {
	t.Helper()
	var on []corev1.Pod
	for _, p := range ClusterDNSPods(t, c) {
		if p.Spec.NodeName == node {
			on = append(on, p)
		}
	}
	return on
}
