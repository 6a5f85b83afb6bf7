package controller_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	webv1 "example.com/controller-test/api/v1"
	"example.com/controller-test/controller"

	"github.com/minikit/minikit/pkg/minikittest"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// eventually polls cond every 50 ms until it returns nil, and fails the
// test with cond's last error after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The controller's logic against an in-process API (no root): the Website's
// Deployment and Service, applied by the controller's field manager and
// owned by the Website; its status through the status subresource,
// following the Deployment's ready replicas; a change of the spec; garbage
// collection of both when the Website goes.
func TestWebsite(t *testing.T) {
	t.Parallel()
	cfg := minikittest.StartAPI(t, minikittest.WithCRDs("../config/crd"))
	c := startController(t, cfg)
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "default", Name: "hello"}
	w := &webv1.Website{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
		Spec: webv1.WebsiteSpec{Replicas: ptr.To[int32](2), Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			Args: []string{"netexec", "--http-port=8080"}}}
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}

	var dep appsv1.Deployment
	eventually(t, 30*time.Second, "the Website's Deployment", func() error { return c.Get(ctx, key, &dep) })
	if got := ptr.Deref(dep.Spec.Replicas, 0); got != 2 {
		t.Errorf("Deployment replicas %d, want 2", got)
	}
	if ref := metav1.GetControllerOf(&dep); ref == nil || ref.Kind != "Website" || ref.UID != w.UID {
		t.Errorf("Deployment controller %v, want the Website %s", ref, w.UID)
	}
	if !slices.ContainsFunc(dep.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == controller.FieldOwner && m.Operation == metav1.ManagedFieldsOperationApply
	}) {
		t.Errorf("Deployment's managed fields %v: no Apply by %s", dep.ManagedFields, controller.FieldOwner)
	}
	var svc corev1.Service
	eventually(t, 30*time.Second, "the Website's Service", func() error { return c.Get(ctx, key, &svc) })
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[0].TargetPort.StrVal != "http" {
		t.Errorf("Service ports %+v, want 80 to http", svc.Spec.Ports)
	}
	if svc.Spec.ClusterIP == "" {
		t.Error("the Service has no ClusterIP")
	}

	// minikit's controllers make the pods; no node runs them, so the test
	// plays the kubelet and marks them Ready through the status subresource.
	eventually(t, 30*time.Second, "2 pods Ready", func() error {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{"app.kubernetes.io/name": "hello"}); err != nil {
			return err
		}
		if len(pods.Items) != 2 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if isReady(p) {
				continue
			}
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP = fmt.Sprintf("10.244.0.%d", 10+i)
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
			if err := c.Status().Update(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	eventually(t, 30*time.Second, "the Website's status", func() error {
		var got webv1.Website
		if err := c.Get(ctx, key, &got); err != nil {
			return err
		}
		want := webv1.WebsiteStatus{ObservedGeneration: got.Generation, ReadyReplicas: 2, URL: "http://hello.default.svc.cluster.local"}
		if got.Status != want {
			return fmt.Errorf("status %+v, want %+v", got.Status, want)
		}
		return nil
	})

	// A change of the spec reaches the Deployment.
	var cur webv1.Website
	if err := c.Get(ctx, key, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Replicas = ptr.To[int32](3)
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "3 replicas", func() error {
		if err := c.Get(ctx, key, &dep); err != nil {
			return err
		}
		if got := ptr.Deref(dep.Spec.Replicas, 0); got != 3 {
			return fmt.Errorf("%d replicas", got)
		}
		return nil
	})

	// The Website's deletion collects what it owns.
	if err := c.Delete(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Deployment and Service collected", func() error {
		for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
			if err := c.Get(ctx, key, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T: %v", o, err)
			}
		}
		return nil
	})
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
