// Package workloads_test drives Deployments, ReplicaSets and
// ReplicationControllers with the real kubectl in a lab, as a student would:
// a rollout to a new image and its undo, the ReplicaSets kubectl shows for
// them, and the Service still reaching ready pods that answer their names.
package rollout_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const manifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: hostnames
spec:
  replicas: 3
  selector:
    matchLabels:
      app: hostnames
  template:
    metadata:
      labels:
        app: hostnames
    spec:
      containers:
      - name: hostnames
        image: registry.k8s.io/serve_hostname:1.1
        ports:
        - containerPort: 9376
        readinessProbe:
          httpGet:
            path: /
            port: 9376
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: hostnames
spec:
  selector:
    app: hostnames
  ports:
  - port: 80
    targetPort: 9376
---
apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  containers:
  - name: sleeper
    image: busybox
    command: ["sleep", "infinity"]
`

type kubectl struct {
	t  *testing.T
	kc string
}

func (k kubectl) run(args ...string) (string, error) {
	out, err := exec.Command("kubectl", append([]string{"--kubeconfig", k.kc}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (k kubectl) ok(args ...string) string {
	k.t.Helper()
	out, err := k.run(args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

// replicaSets is `kubectl get rs -o wide` as NAME -> "DESIRED/CURRENT/READY IMAGES".
func (k kubectl) replicaSets() (map[string]string, string) {
	k.t.Helper()
	out := k.ok("get", "rs", "-o", "wide", "-l", "app=hostnames")
	lines := strings.Split(out, "\n")
	if h := strings.Fields(lines[0]); !slices.Equal(h, []string{"NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"}) {
		k.t.Fatalf("get rs -o wide header: %q", lines[0])
	}
	rs := map[string]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rs[f[0]] = fmt.Sprintf("%s/%s/%s %s", f[1], f[2], f[3], f[6])
	}
	return rs, out
}

// podsServe checks that every ready pod of the deployment runs image and
// that the Service reaches each of them from the client pod.
func podsServe(t *testing.T, l *lab.Lab, c kubernetes.Interface, image string) {
	t.Helper()
	var names []string
	testutil.Eventually(t, 90*time.Second, "3 ready pods of "+image, func() error {
		pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=hostnames"})
		if err != nil {
			return err
		}
		names = nil
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s still terminating", p.Name)
			}
			if p.Spec.Containers[0].Image != image || !ready(&p) {
				return fmt.Errorf("pod %s: image %s ready %v", p.Name, p.Spec.Containers[0].Image, ready(&p))
			}
			names = append(names, p.Name)
		}
		if len(names) != 3 {
			return fmt.Errorf("pods %v", names)
		}
		if n := testenv.ReadyEndpoints(c, "default", "hostnames"); n != 3 {
			return fmt.Errorf("%d ready endpoints", n)
		}
		return nil
	})
	seen := map[string]bool{}
	testutil.Eventually(t, 60*time.Second, "the Service reaches every pod", func() error {
		out, err := testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://hostnames.default.svc.cluster.local/")
		if err != nil {
			return fmt.Errorf("curl: %v: %s", err, out)
		}
		if !slices.Contains(names, out) {
			return fmt.Errorf("answer %q is not one of %v", out, names)
		}
		seen[out] = true
		if len(seen) < len(names) {
			return fmt.Errorf("reached %d of %d pods", len(seen), len(names))
		}
		return nil
	})
}

// podTemplateHash is the pod-template-hash label of the deployment's pods.
func podTemplateHash(t *testing.T, c kubernetes.Interface, d *appsv1.Deployment) string {
	t.Helper()
	pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + d.Name})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods of %s: %v", d.Name, err)
	}
	return pods.Items[0].Labels[appsv1.DefaultDeploymentUniqueLabelKey]
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func TestRolloutAndUndo(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	k := kubectl{t: t, kc: l.Kubeconfig()}
	file := filepath.Join(t.TempDir(), "hostnames.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	k.ok("apply", "-f", file)
	k.ok("rollout", "status", "deploy/hostnames", "--timeout=90s")
	testenv.WaitPodReady(t, c, "default", "client")
	podsServe(t, l, c, "registry.k8s.io/serve_hostname:1.1")
	d, err := c.AppsV1().Deployments("default").Get(context.Background(), "hostnames", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rs1 string
	rs, out := k.replicaSets()
	for name := range rs {
		rs1 = name
	}
	if len(rs) != 1 || rs[rs1] != "3/3/3 registry.k8s.io/serve_hostname:1.1" || rs1 != "hostnames-"+podTemplateHash(t, c, d) {
		t.Fatalf("after apply: %s", out)
	}

	k.ok("set", "image", "deploy/hostnames", "hostnames=registry.k8s.io/serve_hostname:1.2")
	k.ok("annotate", "deploy/hostnames", "kubernetes.io/change-cause=serve_hostname 1.2")
	k.ok("rollout", "status", "deploy/hostnames", "--timeout=90s")
	podsServe(t, l, c, "registry.k8s.io/serve_hostname:1.2")
	rs, out = k.replicaSets()
	if len(rs) != 2 {
		t.Fatalf("after set image, want two replica sets: %s", out)
	}
	var rs2 string
	for name, v := range rs {
		switch {
		case strings.HasPrefix(name, "hostnames-") && v == "3/3/3 registry.k8s.io/serve_hostname:1.2":
			rs2 = name
		case v != "0/0/0 registry.k8s.io/serve_hostname:1.1":
			t.Errorf("replica set %s: %s", name, v)
		}
	}
	if rs2 == "" {
		t.Fatalf("no replica set of the new image: %s", out)
	}
	hist := k.ok("rollout", "history", "deploy/hostnames")
	revs := map[string]string{}
	for _, line := range strings.Split(hist, "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			revs[f[0]] = strings.Join(f[1:], " ")
		}
	}
	if revs["REVISION"] != "CHANGE-CAUSE" || revs["1"] != "<none>" || revs["2"] != "serve_hostname 1.2" {
		t.Errorf("rollout history:\n%s", hist)
	}
	if rev1 := k.ok("rollout", "history", "deploy/hostnames", "--revision=1"); !strings.Contains(rev1, "registry.k8s.io/serve_hostname:1.1") {
		t.Errorf("rollout history --revision=1:\n%s", rev1)
	}

	// kubectl rollout undo reads the ReplicaSets and patches the template back.
	if out := k.ok("rollout", "undo", "deploy/hostnames", "--to-revision=1"); !strings.Contains(out, "rolled back") {
		t.Errorf("rollout undo: %s", out)
	}
	k.ok("rollout", "status", "deploy/hostnames", "--timeout=90s")
	podsServe(t, l, c, "registry.k8s.io/serve_hostname:1.1")
	rs, out = k.replicaSets()
	if len(rs) != 2 || rs[rs1] != "3/3/3 registry.k8s.io/serve_hostname:1.1" || rs[rs2] != "0/0/0 registry.k8s.io/serve_hostname:1.2" {
		t.Errorf("after undo: %s", out)
	}
	d, err = c.AppsV1().Deployments("default").Get(context.Background(), "hostnames", metav1.GetOptions{})
	if err != nil || d.Annotations["deployment.kubernetes.io/revision"] != "3" {
		t.Errorf("deployment after undo: revision %q, %v", d.Annotations["deployment.kubernetes.io/revision"], err)
	}

	// kubectl scale rs on a ReplicaSet of its own, and delete --cascade=orphan
	// leaves the pods behind without their owner.
	t.Run("replicaset scale and orphan", func(t *testing.T) { replicaSetScaleAndOrphan(t, k) })
}

func replicaSetScaleAndOrphan(t *testing.T, k kubectl) {
	k.t = t
	rs := strings.ReplaceAll(strings.Split(manifest, "---")[0], "kind: Deployment", "kind: ReplicaSet")
	rs = strings.ReplaceAll(rs, "name: hostnames", "name: front")
	rs = strings.ReplaceAll(rs, "app: hostnames", "app: front")
	file := filepath.Join(t.TempDir(), "rs.yaml")
	if err := os.WriteFile(file, []byte(rs), 0o644); err != nil {
		t.Fatal(err)
	}
	k.ok("apply", "-f", file)
	k.ok("scale", "rs/front", "--replicas=2")
	testutil.Eventually(t, 60*time.Second, "rs/front at 2 ready, the scaled-down pod gone", func() error {
		out := k.ok("get", "rs", "front", "--no-headers")
		if f := strings.Fields(out); len(f) < 4 || f[1] != "2" || f[2] != "2" || f[3] != "2" {
			return fmt.Errorf("%s", out)
		}
		// A pod the scale-down deletes is listed (Terminating) until its
		// grace period ends, still owned by the ReplicaSet.
		if pods := strings.Fields(k.ok("get", "pods", "-l", "app=front", "-o", "name")); len(pods) != 2 {
			return fmt.Errorf("pods %v, want 2", pods)
		}
		return nil
	})
	k.ok("delete", "rs/front", "--cascade=orphan")
	out := k.ok("get", "pods", "-l", "app=front", "-o", "jsonpath={range .items[*]}{.metadata.name}:{.metadata.ownerReferences}{\"\\n\"}{end}")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("pods after orphaning delete: %q", out)
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, ":") {
			t.Errorf("pod still has owners: %s", l)
		}
	}
}
