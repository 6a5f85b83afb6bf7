package cluster

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/leader"
	"github.com/minikit/minikit/internal/store"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// poll waits for cond, failing the test after a generous deadline.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A server (API only, on loopback: nothing touches the kernel) wins the
// controller-manager lease under its node name and runs the controllers under
// it; stopping releases the lease once the controllers have stopped.
func TestServerRunsSingletonsUnderLease(t *testing.T) {
	dir := t.TempDir()
	s, err := StartServer(ServerConfig{DataDir: dir, Listen: "127.0.0.1:0", DisableAgent: true, NodeName: "hA-Server1",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "test",
		LeaderElection: leader.Timing{LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			s.Stop(context.Background())
		}
	})
	client, err := kubernetes.NewForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	poll(t, "the controller-manager lease", func() bool {
		l, err := client.CoordinationV1().Leases(leader.DefaultNamespace).Get(ctx, leader.DefaultName, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "ha-server1"
	})
	one := int32(1)
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web"}}}}}}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the deployment controller's ReplicaSet", func() bool {
		rs, err := client.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{})
		return err == nil && len(rs.Items) == 1
	})

	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		t.Fatalf("stopping: %v", err)
	}
	stopped = true
	st, err := store.OpenBolt(filepath.Join(dir, "minikit.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	kvs, _, err := st.List("")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, kv := range kvs {
		if !strings.Contains(kv.Key, "leases") || !strings.HasSuffix(kv.Key, "/"+leader.DefaultNamespace+"/"+leader.DefaultName) {
			continue
		}
		found = true
		var l coordinationv1.Lease
		if err := json.Unmarshal(kv.Value, &l); err != nil {
			t.Fatal(err)
		}
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			t.Errorf("after Stop the lease is held by %q, want released", *l.Spec.HolderIdentity)
		}
	}
	if !found {
		t.Errorf("no controller-manager lease in the store")
	}
}
