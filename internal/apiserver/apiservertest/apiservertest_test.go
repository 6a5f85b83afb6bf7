package apiservertest

import (
	"context"
	"testing"

	"github.com/minikit/minikit/internal/apiserver"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStartServesTheAPI(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	if _, err := s.Client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("built-in namespace default: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}}
	if _, err := s.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store.Get("/registry/core/configmaps/default/c"); err != nil {
		t.Errorf("the created ConfigMap is not in the server's store: %v", err)
	}
}

// Two servers over one store see each other's writes; closing one leaves
// the store (the caller's) to the other.
func TestServersShareAStore(t *testing.T) {
	a := Start(t)
	b := StartConfig(t, apiserver.Config{Store: a.Store, Identity: "b"})
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}}
	if _, err := a.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := b.Client.CoreV1().ConfigMaps("default").Get(ctx, "c", metav1.GetOptions{}); err == nil {
		t.Error("a closed server still answers")
	}
	if _, err := a.Client.CoreV1().ConfigMaps("default").Get(ctx, "c", metav1.GetOptions{}); err != nil {
		t.Errorf("the other server, after one closed: %v", err)
	}
	a.Close()
	if _, err := a.Store.Get("/registry/core/configmaps/default/c"); err == nil {
		t.Error("the store a server opened is still open after Close")
	}
}
