// Package workloadslab holds the lab-tier tests (test/README.md) of StatefulSets, DaemonSets and
// Jobs: one three-node lab running the real minikit binary, driven with the real
// kubectl and checked from inside a pod with dig, as a student would.
package workloadslab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// manifests is what the chapters apply: the nginx StatefulSet behind its
// headless Service, a DaemonSet (as an ingress controller is run), and a
// client pod to look names up from, kept on node1, which runs the API.
const manifests = `apiVersion: v1
kind: Service
metadata:
  name: nginx
  labels:
    app: nginx
spec:
  ports:
  - port: 80
    name: web
  clusterIP: None
  selector:
    app: nginx
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  selector:
    matchLabels:
      app: nginx
  serviceName: nginx
  replicas: 2
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx
        ports:
        - containerPort: 80
          name: web
        readinessProbe:
          httpGet:
            path: /
            port: 80
          periodSeconds: 1
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-agent
spec:
  selector:
    matchLabels:
      app: node-agent
  template:
    metadata:
      labels:
        app: node-agent
    spec:
      containers:
      - name: pause
        image: registry.k8s.io/pause:3.10
---
apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  nodeName: node1
  containers:
  - name: sleeper
    image: busybox
    command: ["sleep", "infinity"]
`

type env struct {
	t   *testing.T
	l   *lab.Lab
	c   kubernetes.Interface
	ctx context.Context
}

// kubectl runs the real kubectl against the lab.
func (e *env) kubectl(args ...string) (string, error) {
	e.t.Helper()
	cmd := exec.CommandContext(e.ctx, "kubectl", append([]string{"--kubeconfig", e.l.Kubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (e *env) mustKubectl(args ...string) string {
	e.t.Helper()
	out, err := e.kubectl(args...)
	if err != nil {
		e.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// dig asks the cluster DNS from the client pod, through its resolv.conf.
func (e *env) dig(args ...string) []string {
	out, err := testenv.Exec(e.t, e.l, "client", append([]string{"dig", "+short", "+time=2", "+tries=2"}, args...)...)
	if err != nil {
		return []string{"error: " + err.Error() + ": " + out}
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, ";") {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return lines
}

func (e *env) pod(name string) *corev1.Pod {
	e.t.Helper()
	p, err := e.c.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// daemonNodes lists the nodes of the DaemonSet's running pods, sorted.
func (e *env) daemonNodes() ([]string, error) {
	l, err := e.c.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=node-agent"})
	if err != nil {
		return nil, err
	}
	var nodes []string
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	slices.Sort(nodes)
	return nodes, nil
}

func (e *env) waitDaemonNodes(want ...string) {
	e.t.Helper()
	testutil.Eventually(e.t, 2*time.Minute, fmt.Sprintf("daemon pods on %v", want), func() error {
		got, err := e.daemonNodes()
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("running on %v", got)
		}
		return nil
	})
}

func TestWorkloads(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"kubectl", "dig", "nslookup"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the workloads lab needs %s: %v", tool, err)
		}
	}
	l := testenv.NewLab(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, l: l, c: testenv.Client(t, l), ctx: ctx}
	path := filepath.Join(t.TempDir(), "workloads.yaml")
	if err := os.WriteFile(path, []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustKubectl("apply", "-f", path)
	e.mustKubectl("rollout", "status", "statefulset/web", "--timeout=120s")
	e.mustKubectl("rollout", "status", "daemonset/node-agent", "--timeout=120s")
	testenv.WaitPodReady(t, e.c, "default", "client")

	t.Run("get", func(t *testing.T) {
		out := e.mustKubectl("get", "sts,ds", "-o", "wide")
		for _, want := range []string{"statefulset.apps/web", "2/2", "daemonset.apps/node-agent", "registry.k8s.io/pause:3.10", "app=node-agent"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl get sts,ds -o wide lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("statefulset DNS follows the pod", func(t *testing.T) {
		e := *e
		e.t = t
		web0 := e.pod("web-0")
		if web0.Spec.Hostname != "web-0" || web0.Spec.Subdomain != "nginx" {
			t.Fatalf("web-0: hostname %q subdomain %q", web0.Spec.Hostname, web0.Spec.Subdomain)
		}
		name := "web-0.nginx.default.svc.cluster.local"
		testutil.Eventually(t, 30*time.Second, "dig "+name, func() error {
			if got := e.dig(name); !slices.Equal(got, []string{web0.Status.PodIP}) {
				return fmt.Errorf("got %q, want %s", got, web0.Status.PodIP)
			}
			return nil
		})
		// The headless Service lists both pods by name in SRV.
		testutil.Eventually(t, 30*time.Second, "SRV of the headless service", func() error {
			got := strings.Join(e.dig("SRV", "_web._tcp.nginx.default.svc.cluster.local"), "\n")
			for _, want := range []string{" 80 web-0.nginx.default.svc.cluster.local.", " 80 web-1.nginx.default.svc.cluster.local."} {
				if !strings.Contains(got, want) {
					return fmt.Errorf("no %q in %q", want, got)
				}
			}
			return nil
		})

		e.mustKubectl("delete", "pod", "web-0", "--wait=false")
		var again *corev1.Pod
		testutil.Eventually(t, 2*time.Minute, "web-0 recreated and ready", func() error {
			p, err := e.c.CoreV1().Pods("default").Get(e.ctx, "web-0", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.UID == web0.UID || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
				return fmt.Errorf("still the old pod or not running yet (ip %q)", p.Status.PodIP)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					again = p
					return nil
				}
			}
			return fmt.Errorf("not ready")
		})
		t.Logf("web-0 was %s on %s; recreated as %s on %s", web0.Status.PodIP, web0.Spec.NodeName, again.Status.PodIP, again.Spec.NodeName)
		testutil.Eventually(t, 30*time.Second, "dig "+name+" after the pod came back", func() error {
			if got := e.dig(name); !slices.Equal(got, []string{again.Status.PodIP}) {
				return fmt.Errorf("got %q, want %s", got, again.Status.PodIP)
			}
			return nil
		})
	})

	t.Run("job completes", func(t *testing.T) {
		e := *e
		e.t = t
		e.mustKubectl("create", "job", "lookup", "--image=busybox", "--", "nslookup", "kubernetes.default")
		if out, err := e.kubectl("wait", "--for=condition=complete", "job/lookup", "--timeout=120s"); err != nil {
			desc, _ := e.kubectl("describe", "job/lookup")
			logs, _ := e.kubectl("logs", "job/lookup")
			t.Fatalf("kubectl wait: %v: %s\n%s\nlogs:\n%s", err, out, desc, logs)
		}
		logs := e.mustKubectl("logs", "job/lookup")
		if !strings.Contains(logs, "kubernetes.default.svc.cluster.local") || !strings.Contains(logs, "10.96.0.1") {
			t.Errorf("nslookup output:\n%s", logs)
		}
		out := e.mustKubectl("get", "job", "lookup", "-o", "wide")
		if !strings.Contains(out, "Complete") || !strings.Contains(out, "1/1") || !strings.Contains(out, "batch.kubernetes.io/controller-uid=") {
			t.Errorf("kubectl get job -o wide:\n%s", out)
		}
	})

	// Last: it takes node3 out and back, which moves whatever ran there.
	t.Run("daemonset follows nodes", func(t *testing.T) {
		e := *e
		e.t = t
		e.waitDaemonNodes("node1", "node2", "node3")
		// node3 leaves: its agent stops and its Node is deleted.
		if err := l.Stop("node3", syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := e.c.CoreV1().Nodes().Delete(e.ctx, "node3", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitDaemonNodes("node1", "node2")
		testutil.Eventually(t, time.Minute, "desired 2", func() error {
			out, err := e.kubectl("get", "ds", "node-agent", "-o", "jsonpath={.status.desiredNumberScheduled}")
			if err != nil || out != "2" {
				return fmt.Errorf("desiredNumberScheduled %q: %v", out, err)
			}
			return nil
		})
		// node3 joins again: its agent registers a new Node.
		if err := l.Start("node3"); err != nil {
			t.Fatal(err)
		}
		e.waitDaemonNodes("node1", "node2", "node3")
		e.mustKubectl("rollout", "status", "daemonset/node-agent", "--timeout=120s")
	})
}
