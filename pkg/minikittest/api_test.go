package minikittest_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/pkg/minikittest"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

func clientset(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A Deployment makes a ReplicaSet and its Pods, which stay Pending without
// a node; deleting the Deployment collects them.
func TestStartAPIRunsControllers(t *testing.T) {
	t.Parallel()
	c := clientset(t, minikittest.StartAPI(t))
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}}}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "3 Pending pods of the Deployment", func() error {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 3 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
				return fmt.Errorf("pod %s: phase %q on node %q", p.Name, p.Status.Phase, p.Spec.NodeName)
			}
		}
		return nil
	})
	if err := c.AppsV1().Deployments("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the Deployment's ReplicaSet and pods collected", func() error {
		rs, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if n := len(rs.Items) + len(pods.Items); n != 0 {
			return fmt.Errorf("%d ReplicaSets and %d pods left", len(rs.Items), len(pods.Items))
		}
		return nil
	})
}

// WithoutControllers: the Deployment stays alone.
func TestStartAPIWithoutControllers(t *testing.T) {
	t.Parallel()
	c := clientset(t, minikittest.StartAPI(t, minikittest.WithoutControllers()))
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}}}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The absence of something cannot be polled for; a second write that the
	// server orders after any controller's would-be write is what we check
	// against instead: the ReplicaSet list is empty at the resourceVersion
	// of a later object.
	cm, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{ResourceVersion: cm.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Items) != 0 {
		t.Errorf("%d ReplicaSets without controllers", len(rs.Items))
	}
}

// Many APIs in parallel in one test binary: each its own store and port,
// the same names in each without conflict.
func TestStartAPIParallel(t *testing.T) {
	t.Parallel()
	hosts := make(chan string, 8)
	t.Run("group", func(t *testing.T) {
		for i := range 8 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				cfg := minikittest.StartAPI(t)
				hosts <- cfg.Host
				c := clientset(t, cfg)
				ctx := context.Background()
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "same"}, Data: map[string]string{"i": fmt.Sprint(i)}}
				if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				got, err := c.CoreV1().ConfigMaps("default").Get(ctx, "same", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got.Data["i"] != fmt.Sprint(i) {
					t.Errorf("configmap of API %d holds %q", i, got.Data["i"])
				}
			})
		}
	})
	// Every one listened on loopback, on a port of its own, and is gone:
	// the group's cleanups have run.
	close(hosts)
	seen := map[string]bool{}
	for h := range hosts {
		u, err := url.Parse(h)
		if err != nil {
			t.Fatal(err)
		}
		if u.Hostname() != "127.0.0.1" {
			t.Errorf("API at %s, want 127.0.0.1", h)
		}
		if seen[u.Host] {
			t.Errorf("two APIs at %s", u.Host)
		}
		seen[u.Host] = true
		conn, err := net.Dial("tcp", u.Host)
		if err == nil {
			conn.Close()
			t.Errorf("API at %s still accepts connections after its test", h)
		}
	}
	if len(seen) != 8 {
		t.Errorf("%d APIs started, want 8", len(seen))
	}
}

// WithCRDs installs the CRDs of a directory (YAML and JSON, ignoring other
// kinds and files) before StartAPI returns: custom resources are served at
// once, validated, with a status subresource that server-side apply writes.
func TestStartAPIWithCRDs(t *testing.T) {
	t.Parallel()
	cfg := minikittest.StartAPI(t, minikittest.WithCRDs("testdata/crds"))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace("default")
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w"}, "spec": map[string]any{"size": int64(2)}}}
	if _, err := widgets.Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Widget right after StartAPI: %v", err)
	}
	bad := w.DeepCopy()
	bad.SetName("bad")
	unstructured.SetNestedField(bad.Object, int64(0), "spec", "size")
	if _, err := widgets.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("creating a Widget of size 0: %v, want Invalid", err)
	}
	status := []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"status":{"phase":"Ready"}}`)
	if _, err := widgets.Patch(ctx, "w", types.ApplyPatchType, status, metav1.PatchOptions{FieldManager: "test", Force: ptr.To(true)}, "status"); err != nil {
		t.Fatalf("applying the status: %v", err)
	}
	got, err := widgets.Get(ctx, "w", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase, _, _ := unstructured.NestedString(got.Object, "status", "phase"); phase != "Ready" {
		t.Errorf("status.phase %q, want Ready", phase)
	}
	gadgets := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"})
	if _, err := gadgets.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing the JSON file's Gadgets: %v", err)
	}
	// The Namespace of the same file is no CRD: not created.
	if _, err := clientset(t, cfg).CoreV1().Namespaces().Get(ctx, "widgets-system", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace widgets-system: %v, want NotFound", err)
	}
}

// fatalTB records StartAPI's Fatal and unwinds with a panic that startFails
// recovers, where testing.T would end the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panicExit()
}

func (f *fatalTB) Fatal(args ...any) { f.msg = fmt.Sprint(args...); panicExit() }

type exit struct{}

func panicExit() { panic(exit{}) }

func startFails(t *testing.T, opts ...minikittest.Option) string {
	f := &fatalTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(exit); !ok {
					panic(r)
				}
			}
		}()
		minikittest.StartAPI(f, opts...)
	}()
	if f.msg == "" {
		t.Fatal("StartAPI did not fail")
	}
	return f.msg
}

func TestStartAPIWithCRDsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing path", "testdata/nothing-here", "no such file or directory"},
		{"no CRD in the files", "testdata/crds/README.txt", "no CustomResourceDefinition in testdata/crds/README.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if msg := startFails(t, minikittest.WithCRDs(tc.path)); !strings.Contains(msg, tc.want) {
				t.Errorf("StartAPI failed with %q, want it to say %q", msg, tc.want)
			}
		})
	}
}
