// Package lab_test checks the lab as a student and CI use it: several nodes made of
// network namespaces, pods reaching each other across nodes, the client and the
// external host, agents that crash and rejoin, nodes removed, and a clean down.
package lab_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func pod(name, node, image string, command ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: image, Command: command}}},
	}
}

func createPod(t *testing.T, c kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := c.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return testenv.WaitPodReady(t, c, "default", p.Name)
}

func TestThreeNodeLab(t *testing.T) {
	l := testenv.NewLab(t, 3)
	c := testenv.Client(t, l)
	nodes, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 3 {
		t.Fatalf("got %d nodes, want 3", len(nodes.Items))
	}
	cidrs := map[string]bool{}
	for _, n := range nodes.Items {
		if cidrs[n.Spec.PodCIDR] {
			t.Fatalf("podCIDR %s given twice", n.Spec.PodCIDR)
		}
		cidrs[n.Spec.PodCIDR] = true
	}
	a := createPod(t, c, pod("a", "node1", "busybox", "sleep", "infinity"))
	b := createPod(t, c, pod("b", "node3", "minikit/echo"))

	t.Run("pod on node1 reaches pod on node3 by IP, unNATed", func(t *testing.T) {
		out, err := testenv.Exec(t, l, "a", "curl", "-s", "--max-time", "5", "http://"+b.Status.PodIP+":8080/")
		if err != nil {
			t.Fatalf("curl: %v: %s", err, out)
		}
		if !strings.Contains(out, "client_address="+a.Status.PodIP+":") || !strings.Contains(out, "node=node3") {
			t.Fatalf("echo server answered %q; want it to see pod a (%s) and to run on node3", out, a.Status.PodIP)
		}
	})
	t.Run("pod reaches the external host, masqueraded to its node's address", func(t *testing.T) {
		out, err := testenv.Exec(t, l, "a", "curl", "-s", "--max-time", "5", "http://"+l.Addr(lab.External).String()+"/")
		if err != nil {
			t.Fatalf("curl: %v: %s", err, out)
		}
		if !strings.Contains(out, "client_address="+l.Addr("node1").String()+":") {
			t.Fatalf("external host saw %q; want node1's address %s", out, l.Addr("node1"))
		}
	})
	t.Run("client reaches node addresses but not pod IPs", func(t *testing.T) {
		for i := 1; i <= 3; i++ {
			node := fmt.Sprintf("node%d", i)
			if out, err := testenv.Run(l, lab.Client, "ping", "-c1", "-W2", l.Addr(node).String()); err != nil {
				t.Errorf("client cannot reach %s: %v: %s", node, err, out)
			}
		}
		if out, err := testenv.Run(l, lab.Client, "curl", "-s", "--max-time", "2", "http://"+b.Status.PodIP+":8080/"); err == nil {
			t.Fatalf("client reached pod IP %s: %s", b.Status.PodIP, out)
		}
	})
	t.Run("no lab namespace routes to the machine's uplink", func(t *testing.T) {
		for _, h := range l.Hosts() {
			out, err := testenv.Run(l, h, "ip", "route", "show", "default")
			if err != nil || out != "" {
				t.Errorf("%s has a default route %q (%v)", h, out, err)
			}
		}
	})
}

func TestAgentRestartAndNodeRemoval(t *testing.T) {
	l := testenv.NewLab(t, 3)
	c := testenv.Client(t, l)
	ctx := context.Background()
	a := createPod(t, c, pod("a", "node1", "busybox", "sleep", "infinity"))
	b := createPod(t, c, pod("b", "node2", "minikit/echo"))
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "b"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "endpoints of b list pod b", func() error {
		ep, err := c.CoreV1().Endpoints("default").Get(ctx, "b", metav1.GetOptions{})
		if err != nil || len(ep.Subsets) == 0 || len(ep.Subsets[0].Addresses) != 1 {
			return fmt.Errorf("endpoints %v (%v)", ep, err)
		}
		return nil
	})

	t.Run("killed agent rejoins and keeps its pods", func(t *testing.T) {
		if err := l.Stop("node2", syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := l.Start("node2"); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "pod a reaches pod b after node2's agent restarted", func() error {
			out, err := testenv.Exec(t, l, "a", "curl", "-s", "--max-time", "2", "http://"+b.Status.PodIP+":8080/")
			if err != nil || !strings.Contains(out, "pod=b") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		p, err := c.CoreV1().Pods("default").Get(ctx, "b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.UID != b.UID || p.Status.PodIP != b.Status.PodIP || p.Status.ContainerStatuses[0].RestartCount != 0 ||
			p.Status.ContainerStatuses[0].ContainerID != b.Status.ContainerStatuses[0].ContainerID {
			t.Fatalf("pod b was not adopted as it was: before %s %s %s, after %s %s %s restarts %d",
				b.UID, b.Status.PodIP, b.Status.ContainerStatuses[0].ContainerID,
				p.UID, p.Status.PodIP, p.Status.ContainerStatuses[0].ContainerID, p.Status.ContainerStatuses[0].RestartCount)
		}
	})

	t.Run("removed node: routes withdrawn, endpoints dropped", func(t *testing.T) {
		cidr := ""
		n2, err := c.CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cidr = n2.Spec.PodCIDR
		if out, _ := testenv.Run(l, "node1", "ip", "route", "show", cidr); !strings.Contains(out, "via "+l.Addr("node2").String()) {
			t.Fatalf("node1 has no route to node2's pods before removal: %q", out)
		}
		if err := l.RemoveNode(ctx, "node2"); err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"node1", "node3"} {
			testutil.Eventually(t, 20*time.Second, h+" withdrew its route to "+cidr, func() error {
				if out, _ := testenv.Run(l, h, "ip", "route", "show", cidr); out != "" {
					return fmt.Errorf("route still there: %s", out)
				}
				return nil
			})
		}
		testutil.Eventually(t, 30*time.Second, "pod b's endpoint dropped", func() error {
			ep, err := c.CoreV1().Endpoints("default").Get(ctx, "b", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, s := range ep.Subsets {
				if len(s.Addresses)+len(s.NotReadyAddresses) > 0 {
					return fmt.Errorf("endpoints still list %v", s)
				}
			}
			return nil
		})
		_ = a
	})
}

func TestLabDownLeavesNothing(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Minikit(t)
	dir := filepath.Join(t.TempDir(), "lab")
	name := fmt.Sprintf("mkd%d", os.Getpid()%100000)
	// Other tests' labs may run meanwhile: look only at this lab's namespaces.
	mine := func(n string) bool {
		if strings.HasPrefix(n, name+"-") {
			return true
		}
		for i := 1; i <= 2; i++ {
			if strings.HasPrefix(n, kubelet.SandboxPrefix(fmt.Sprintf("node%d", i), filepath.Join(dir, fmt.Sprintf("node%d", i), "agent"))) {
				return true
			}
		}
		return false
	}
	before := testenv.RootSnapshot(t, mine)
	// No kubeconfig merge: under sudo it would go into the caller's ~/.kube/config.
	up := exec.Command(bin, "lab", "up", "--name", name, "--nodes", "2", "--dir", dir, "--kubeconfig-merge=false")
	if out, err := up.CombinedOutput(); err != nil {
		exec.Command(bin, "lab", "down", "--name", name, "--dir", dir).Run()
		t.Fatalf("lab up: %v: %s", err, out)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			exec.Command(bin, "lab", "down", "--name", name, "--dir", dir).Run()
		}
	})
	// A second lab of the same name is refused, clearly.
	out, err := exec.Command(bin, "lab", "up", "--name", name, "--nodes", "2", "--dir", dir, "--kubeconfig-merge=false").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already exists") {
		t.Fatalf("second lab up: err %v, output %q; want a clear 'already exists' error", err, out)
	}
	// Put some pods on it so down has something to remove.
	kc := filepath.Join(dir, "kubeconfig")
	apply := exec.Command("kubectl", "--kubeconfig", kc, "apply", "-f", "../../examples/clusterip/hostnames.yaml")
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	if out, err := exec.Command("kubectl", "--kubeconfig", kc, "rollout", "status", "deploy/hostnames", "--timeout=60s").CombinedOutput(); err != nil {
		t.Fatalf("rollout: %v: %s", err, out)
	}
	if out, err := exec.Command(bin, "lab", "down", "--name", name, "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("lab down: %v: %s", err, out)
	}
	downed = true
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("lab dir %s still exists", dir)
	}
	if entries, _ := os.ReadDir("/run/minikit/ns"); len(entries) > 0 {
		for _, e := range entries {
			if mine(e.Name()) {
				t.Errorf("pod namespace mounts left: %s", e.Name())
			}
		}
	}
	out, _ = exec.Command("pgrep", "-f", dir).CombinedOutput()
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("processes of the lab still run: %s", out)
	}
	if after := testenv.RootSnapshot(t, mine); after != before {
		t.Fatalf("root namespace changed by lab up/down:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

// A lab up that fails part way (here: node2's namespace is taken) returns the
// error and removes what it made, and nothing that it did not make.
func TestLabUpFailureRemovesWhatItMade(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Minikit(t)
	name := fmt.Sprintf("mkf%d", os.Getpid()%100000)
	mine := func(n string) bool { return strings.HasPrefix(n, name+"-") }
	before := testenv.RootSnapshot(t, mine)
	taken := lab.NS(name, "node2")
	if err := netns.CreateNamed(taken); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.DeleteNamed(taken) })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l, err := lab.Up(ctx, lab.Config{Name: name, Nodes: 2, Dir: filepath.Join(t.TempDir(), "lab"), Binary: bin})
	if err == nil {
		l.Down()
		t.Fatal("lab up succeeded with node2's namespace taken")
	}
	if !strings.Contains(err.Error(), taken) {
		t.Errorf("lab up: %v; want an error naming %s", err, taken)
	}
	for _, h := range []string{"net", "node1", lab.Client, lab.External} {
		if netns.ExistsNamed(lab.NS(name, h)) {
			t.Errorf("namespace %s left behind by the failed lab up", lab.NS(name, h))
		}
	}
	if !netns.ExistsNamed(taken) {
		t.Errorf("the failed lab up removed %s, which it did not make", taken)
	}
	if err := netns.DeleteNamed(taken); err != nil {
		t.Fatal(err)
	}
	if after := testenv.RootSnapshot(t, mine); after != before {
		t.Fatalf("root namespace changed by the failed lab up:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

// Down stops every process a lab started, whatever its binary is called (here
// a copy named "mk"): it knows them by PID and start time.
func TestLabDownStopsARenamedBinary(t *testing.T) {
	testenv.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "mk")
	src, err := os.ReadFile(testenv.Minikit(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("mkr%d", os.Getpid()%100000)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l, err := lab.Up(ctx, lab.Config{Name: name, Nodes: 1, Dir: filepath.Join(t.TempDir(), "lab"), Binary: bin})
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	pids := map[string]int{}
	for _, h := range append(l.Hosts(), "forwarder") {
		if pid := l.PID(h); pid != 0 {
			pids[h] = pid
		}
	}
	if len(pids) < 2 {
		t.Fatalf("lab up recorded processes %v; want node1's and the forwarder at least", pids)
	}
	if err := l.Down(); err != nil {
		t.Errorf("lab down: %v", err)
	}
	for h, pid := range pids {
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z ") {
			t.Errorf("%s's process %d still runs after lab down: %s", h, pid, st)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// BenchmarkLabUp measures `lab up` until every node is Ready, for 2 and 5 nodes.
func BenchmarkLabUp(b *testing.B) {
	for _, n := range []int{2, 5} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			testenv.RequireRoot(b)
			bin := testenv.Minikit(b)
			var total time.Duration
			for i := 0; i < b.N; i++ {
				dir := filepath.Join(b.TempDir(), "lab")
				start := time.Now()
				l, err := lab.Up(context.Background(), lab.Config{Name: fmt.Sprintf("mkb%d", i), Nodes: n, Dir: dir, Binary: bin})
				if err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				b.StopTimer()
				l.Down()
				b.StartTimer()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/lab-up")
		})
	}
}
