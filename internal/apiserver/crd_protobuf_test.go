package apiserver

import (
	"context"
	"testing"

	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// TestCRDOverProtobuf: the apiextensions clientset, configured for protobuf
// as Kubernetes' e2e framework and many controllers configure client-go,
// creates and reads a CRD.
func TestCRDOverProtobuf(t *testing.T) {
	a := newTestAPI(t)
	cs, err := apiextensionsclientset.NewForConfig(&rest.Config{Host: a.url,
		ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	created, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, widgetCRD(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create over protobuf: %v", err)
	}
	if created.Spec.Names.Kind != "Widget" || created.UID == "" {
		t.Fatalf("created %+v", created.ObjectMeta)
	}
	a.waitEstablished(created.Name, widgetsPath)
	got, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, created.Name, metav1.GetOptions{})
	if err != nil || got.Spec.Group != "example.com" {
		t.Fatalf("get: %v %+v", err, got)
	}
}
