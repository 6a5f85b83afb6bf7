package apiserver

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// TestPartialObjectMetadata: client-go's metadata client (what metadata
// informers, the garbage collector and controller-runtime's OnlyMetadata
// use) gets, lists and watches built-in and custom resources as
// PartialObjectMetadata.
func TestPartialObjectMetadata(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	mc, err := metadata.NewForConfig(&rest.Config{Host: a.url})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cms := mc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("default")
	widgets := mc.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace("default")

	cm := newConfigMap("one", map[string]string{"secret": "not in metadata"})
	cm.Labels = map[string]string{"app": "x"}
	a.create(configMapsPath, cm)
	a.post(widgetsPath, widget("w", map[string]any{"model": "m"})).obj(t, 201)

	got, err := cms.Get(ctx, "one", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.Labels["app"] != "x" || got.UID == "" {
		t.Fatalf("get: %+v", got)
	}
	// What the server sends: metadata only, not the data.
	accept := "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
	raw := a.do("GET", configMapsPath+"/one", "", nil, "Accept", accept).obj(t, 200)
	if raw.at("kind") != "PartialObjectMetadata" || raw.at("apiVersion") != "meta.k8s.io/v1" || raw.at("data") != nil || raw.at("metadata.name") != "one" {
		t.Fatalf("GET as PartialObjectMetadata: %v", raw)
	}
	raw = a.do("GET", widgetsPath, "", nil, "Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").obj(t, 200)
	if raw.at("kind") != "PartialObjectMetadataList" || len(raw.at("items").([]any)) != 1 {
		t.Fatalf("LIST as PartialObjectMetadataList: %v", raw)
	}
	if item := obj(raw.at("items").([]any)[0].(map[string]any)); item.at("spec") != nil || item.at("kind") != "PartialObjectMetadata" {
		t.Fatalf("list item %v", item)
	}
	list, err := widgets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "w" || list.ResourceVersion == "" {
		t.Fatalf("list: %+v", list)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	a.create(configMapsPath, newConfigMap("two", map[string]string{"k": "v"}))
	select {
	case e := <-w.ResultChan():
		p, ok := e.Object.(*metav1.PartialObjectMetadata)
		if e.Type != watch.Added || !ok || p.Name != "two" {
			t.Fatalf("watch event %v %#v", e.Type, e.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
}
