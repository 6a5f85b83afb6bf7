package envtestcompat_test

import (
	"context"
	"testing"

	"github.com/minikit/minikit/pkg/minikittest/envtestcompat"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// An envtest test, unchanged but for the Use line: envtest installs its
// CRDDirectoryPaths into minikit, and a controller-runtime client serves.
func TestEnvtestOnMinikit(t *testing.T) {
	testEnv := &envtest.Environment{CRDDirectoryPaths: []string{"../testdata/crds"}, ErrorIfCRDPathMissing: true}
	envtestcompat.Use(t, testEnv)
	cfg, err := testEnv.Start()
	if err != nil {
		t.Fatalf("envtest start: %v", err)
	}
	defer func() {
		if err := testEnv.Stop(); err != nil {
			t.Errorf("envtest stop: %v", err)
		}
	}()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "default"}, "spec": map[string]any{"size": int64(1)}}}
	if err := c.Create(ctx, w); err != nil {
		t.Fatalf("creating a Widget: %v", err)
	}
	bad := w.DeepCopy()
	bad.SetName("bad")
	unstructured.SetNestedField(bad.Object, int64(0), "spec", "size")
	if err := c.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Errorf("creating a Widget of size 0: %v, want Invalid", err)
	}
	if len(testEnv.CRDs) != 2 {
		t.Errorf("envtest installed %d CRDs, want 2", len(testEnv.CRDs))
	}
}
