package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/topology"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
)

func startWithGateway(t *testing.T, src Source, gw *gwfake.Clientset) *Server {
	t.Helper()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{kubelet.AnnotationNetNSPrefix: prefix}}})
	s, err := New(Config{Lab: lab.State{Name: "gu", Dir: t.TempDir()}, Client: client, Gateway: gw, Source: src, PathOf: fakePathOf,
		Debounce: time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// A Gateway or route created is a patch with the Gateways and routes, as
// an Ingress is.
func TestLiveFeedFollowsGateways(t *testing.T) {
	src := &fakeSource{g: labGraph()}
	gw := gwfake.NewSimpleClientset()
	s := startWithGateway(t, src, gw)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ev := &events{sc: bufio.NewScanner(resp.Body)}
	ev.sc.Buffer(nil, 1<<20)
	if name, data := ev.next(t); name != "graph" {
		t.Fatalf("first event %s %s", name, data)
	}

	src.mu.Lock()
	src.g.Gateways = []topology.Gateway{{ID: "gw:default/web", Namespace: "default", Name: "web", Class: "minikit",
		Listeners: []topology.GatewayListener{{Name: "http", Protocol: "HTTP", Port: 80}}}}
	src.g.GatewayRoutes = []topology.GatewayRoute{{ID: "httproute:default/web", Kind: "HTTPRoute", Namespace: "default", Name: "web",
		Parents: []topology.RouteParent{{Gateway: "gw:default/web"}}}}
	src.mu.Unlock()
	g := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: "minikit", Listeners: []gatewayv1.Listener{{Name: "http", Protocol: gatewayv1.HTTPProtocolType, Port: 80}}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(context.Background(), g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name, data := ev.next(t)
	var p patch
	if err := json.Unmarshal(data, &p); name != "patch" || err != nil || p.Gateways == nil || len(*p.Gateways) != 1 || p.GatewayRoutes == nil || len(*p.GatewayRoutes) != 1 || p.Services != nil {
		t.Fatalf("event %s %s: %v", name, data, err)
	}
	if (*p.Gateways)[0].ID != "gw:default/web" || (*p.GatewayRoutes)[0].Parents[0].Gateway != "gw:default/web" {
		t.Fatalf("patch %s", data)
	}

	// The route goes: the patch says so with the whole (empty) list.
	src.mu.Lock()
	src.g.GatewayRoutes = nil
	src.mu.Unlock()
	rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other"}}
	if _, err := gw.GatewayV1().HTTPRoutes("default").Create(context.Background(), rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name, data = ev.next(t)
	p = patch{}
	if err := json.Unmarshal(data, &p); name != "patch" || err != nil || p.GatewayRoutes == nil || len(*p.GatewayRoutes) != 0 || p.Gateways == nil {
		t.Fatalf("event %s %s: %v", name, data, err)
	}
}

// Without the Gateway API's CRDs (the lists answer 404) the page starts
// and watches nothing of it: an informer would list in vain forever, and
// Start, waiting for its first list, would never return.
func TestLiveWithoutGatewayAPI(t *testing.T) {
	gw := gwfake.NewSimpleClientset()
	gw.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: gatewayv1.GroupName, Resource: a.GetResource().Resource}, "")
	})
	startWithGateway(t, &fakeSource{g: labGraph()}, gw)
	for _, a := range gw.Actions() {
		if l, ok := a.(k8stesting.ListAction); !ok || l.GetListRestrictions().Labels.String() != "" {
			t.Fatalf("action %#v on a cluster without the Gateway API: want only the four probing lists", a)
		}
	}
	if n := len(gw.Actions()); n != 4 {
		t.Fatalf("%d actions, want the four probing lists", n)
	}
}
