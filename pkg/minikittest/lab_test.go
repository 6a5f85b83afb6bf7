package minikittest_test

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

	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/pkg/minikittest"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// A Deployment of agnhost behind a Service answers by the Service's DNS name
// from a pod, and by NodePort from the client host.
func TestStartLab(t *testing.T) {
	l := minikittest.StartLab(t, minikittest.WithNodes(2))
	if len(l.Nodes) != 2 || l.Nodes[0] != "node1" {
		t.Errorf("nodes %v, want node1 and node2", l.Nodes)
	}
	for _, h := range append(l.Nodes, minikittest.ClientHost, minikittest.ExternalHost) {
		if !l.Addresses[h].IsValid() {
			t.Errorf("no address for %s in %v", h, l.Addresses)
		}
	}
	c := clientset(t, l.Config)
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
					Args: []string{"netexec", "--http-port=8080"}}}}}}}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	svc, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}}}}}
	if _, err := c.CoreV1().Pods("default").Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "web.default.svc.cluster.local answers from pod client", func() error {
		out, err := l.Exec(ctx, "default", "client", "curl", "-s", "--max-time", "2", "http://web.default.svc.cluster.local/hostname")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, "web-") {
			return fmt.Errorf("answer %q, want a web pod's name", out)
		}
		return nil
	})
	url := fmt.Sprintf("http://%s:%d/hostname", l.Addresses["node2"], svc.Spec.Ports[0].NodePort)
	testutil.Eventually(t, 30*time.Second, "the NodePort answers from the client host", func() error {
		out, err := l.Run(ctx, minikittest.ClientHost, "curl", "-s", "--max-time", "2", url)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, "web-") {
			return fmt.Errorf("answer %q, want a web pod's name", out)
		}
		return nil
	})
	b, err := os.ReadFile(l.Kubeconfig)
	if err != nil || !strings.Contains(string(b), "server: https://127.0.0.1:") {
		t.Errorf("kubeconfig %s: %v\n%s", l.Kubeconfig, err, b)
	}
}

// The lab goes also when the test binary dies without running its cleanups
// (as on go test's -timeout): the helper process below starts a lab and
// exits at once; its watchdog removes the lab.
func TestStartLabRemovedWhenTheProcessDies(t *testing.T) {
	if os.Getenv("MINIKITTEST_HELPER") == "exit" {
		l := minikittest.StartLab(t, minikittest.WithNodes(1))
		fmt.Printf("lab %s %s\n", l.Name, l.Dir)
		os.Exit(3)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStartLabRemovedWhenTheProcessDies$", "-test.v")
	cmd.Env = append(os.Environ(), "MINIKITTEST_HELPER=exit")
	out, err := cmd.Output()
	var name, dir string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "lab" {
			name, dir = f[1], f[2]
		}
	}
	if name == "" {
		t.Fatalf("the helper did not start a lab (%v):\n%s", err, out)
	}
	testutil.Eventually(t, 60*time.Second, "lab "+name+" removed by its watchdog", func() error {
		left := []string{}
		if _, err := os.Stat(dir); err == nil {
			left = append(left, dir)
		}
		ns, _ := filepath.Glob("/run/netns/" + name + "-*")
		left = append(left, ns...)
		if len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	})
}

// Without root, StartLab fails the test with a message that says why and
// what to do; it never skips it. The helper process runs the test binary as
// nobody.
func TestStartLabWithoutRootFails(t *testing.T) {
	if os.Getenv("MINIKITTEST_HELPER") == "nonroot" {
		minikittest.StartLab(t)
		fmt.Println("StartLab returned")
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test drops root to check StartLab's failure: it needs root")
	}
	// A copy that nobody may run: the test binary's own directory may be private.
	dir, err := os.MkdirTemp("", "minikittest-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "test")
	if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copying the test binary: %v", err)
	}
	cmd := exec.Command(bin, "-test.run=^TestStartLabWithoutRootFails$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MINIKITTEST_HELPER=nonroot", "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	for _, want := range []string{"--- FAIL: TestStartLabWithoutRootFails", "StartLab needs root"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("StartLab as nobody (%v): output lacks %q:\n%s", err, want, out)
		}
	}
	for _, unwanted := range []string{"--- SKIP", "StartLab returned"} {
		if strings.Contains(string(out), unwanted) {
			t.Errorf("StartLab as nobody: output has %q:\n%s", unwanted, out)
		}
	}
}
