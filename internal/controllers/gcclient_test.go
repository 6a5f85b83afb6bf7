package controllers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// TestMetadataClientWatchOfWholeObjects: the metadata client reads a watch
// stream of whole objects, as our API server sends, as PartialObjectMetadata,
// and an ERROR event's Status as a Status.
func TestMetadataClientWatchOfWholeObjects(t *testing.T) {
	const stream = `{"type":"ADDED","object":{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w","namespace":"default","uid":"u1","resourceVersion":"7","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"c","uid":"u0"}]},"spec":{"size":3}}}
{"type":"MODIFIED","object":{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w","namespace":"default","uid":"u1","resourceVersion":"8","deletionTimestamp":"2026-01-01T00:00:00Z","finalizers":["foregroundDeletion"]}}}
{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old resource version"}}
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" || r.URL.Path != "/apis/example.com/v1/namespaces/default/widgets" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(stream))
	}))
	defer srv.Close()
	md, err := NewMetadataClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	w, err := md.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).
		Namespace("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	want := []struct {
		typ       watch.EventType
		rv        string
		owners    int
		deleting  bool
		statusErr metav1.StatusReason
	}{
		{typ: watch.Added, rv: "7", owners: 1},
		{typ: watch.Modified, rv: "8", deleting: true},
		{typ: watch.Error, statusErr: metav1.StatusReasonExpired},
	}
	for i, wt := range want {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-time.After(waitTimeout):
			t.Fatalf("event %d: none", i)
		}
		if ev.Type != wt.typ {
			t.Fatalf("event %d: type %s, want %s (%#v)", i, ev.Type, wt.typ, ev.Object)
		}
		if wt.typ == watch.Error {
			st, ok := ev.Object.(*metav1.Status)
			if !ok || st.Reason != wt.statusErr {
				t.Errorf("event %d: %#v, want a Status with reason %s", i, ev.Object, wt.statusErr)
			}
			continue
		}
		pm, ok := ev.Object.(*metav1.PartialObjectMetadata)
		if !ok {
			t.Fatalf("event %d: %T, want PartialObjectMetadata", i, ev.Object)
		}
		if pm.Name != "w" || pm.UID != "u1" || pm.ResourceVersion != wt.rv || len(pm.OwnerReferences) != wt.owners ||
			(pm.DeletionTimestamp != nil) != wt.deleting {
			t.Errorf("event %d: %+v", i, pm.ObjectMeta)
		}
	}
}
