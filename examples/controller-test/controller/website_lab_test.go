package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	webv1 "example.com/controller-test/api/v1"

	"github.com/minikit/minikit/pkg/minikittest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The same controller against a real lab (root): the Website's pods run, its
// Service answers by its DNS name from another pod, and the status counts
// the replicas the readiness probes found ready.
func TestWebsiteInALab(t *testing.T) {
	l := minikittest.StartLab(t, minikittest.WithNodes(2), minikittest.WithLabCRDs("../config/crd"))
	c := startController(t, l.Config)
	ctx := context.Background()
	w := &webv1.Website{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: webv1.WebsiteSpec{Replicas: ptr.To[int32](2), Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
			Args: []string{"netexec", "--http-port=8080"}}}
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	client := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}}}}}
	if err := c.Create(ctx, client); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the Website's status: 2 ready replicas", func() error {
		var got webv1.Website
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "hello"}, &got); err != nil {
			return err
		}
		if got.Status.ReadyReplicas != 2 {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	eventually(t, 60*time.Second, "hello.default.svc.cluster.local answers from a pod", func() error {
		out, err := l.Exec(ctx, "default", "client", "curl", "-s", "--max-time", "2", "http://hello.default.svc.cluster.local/hostname")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, "hello-") {
			return fmt.Errorf("answer %q, want a hello pod's name", out)
		}
		return nil
	})
	// The short name too, through the pod's search path.
	out, err := l.Exec(ctx, "default", "client", "curl", "-s", "--max-time", "2", "http://hello/clientip")
	if err != nil || !strings.Contains(out, ":") {
		t.Errorf("http://hello/clientip from pod client: %q, %v", out, err)
	}
}
