package kubedns

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream but still served

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func readyNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// TestRegistrar: nodes publish their listeners into kube-system/kube-dns,
// only once they are ready; a gone node's listener is removed by the others;
// a stopping node withdraws its own.
func TestRegistrar(t *testing.T) {
	client := fake.NewClientset(readyNode("node1"), readyNode("node2"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(node, addr string) (ready chan struct{}, stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		r := &Registrar{Client: client, NodeName: node, Addr: netip.MustParseAddr(addr), Logger: log, Resync: 50 * time.Millisecond}
		ready = make(chan struct{})
		done := make(chan struct{})
		go func() { r.Run(ctx, ready); close(done) }()
		return ready, func() { cancel(); <-done }
	}
	ready1, stop1 := start("node1", "10.244.1.1")
	ready2, stop2 := start("node2", "10.244.2.1")
	defer stop2()
	close(ready1)
	waitEndpoints(t, client, "10.244.1.1")
	svc, err := client.CoreV1().Services("kube-system").Get(context.Background(), "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector != nil || len(svc.Spec.Ports) != 2 || svc.Labels["k8s-app"] != "kube-dns" {
		t.Errorf("kube-dns service: selector %v, ports %v, labels %v", svc.Spec.Selector, svc.Spec.Ports, svc.Labels)
	}
	close(ready2)
	waitEndpoints(t, client, "10.244.1.1", "10.244.2.1")
	sl, _ := client.DiscoveryV1().EndpointSlices("kube-system").List(context.Background(), metav1.ListOptions{})
	for _, s := range sl.Items {
		if s.Labels[discoveryv1.LabelManagedBy] != ManagedBy || s.Labels[discoveryv1.LabelServiceName] != "kube-dns" || len(s.Ports) != 2 {
			t.Errorf("slice %s: labels %v ports %d", s.Name, s.Labels, len(s.Ports))
		}
	}
	// node2 leaves the cluster without saying goodbye: node1 removes it.
	stop2()
	if err := client.CoreV1().Nodes().Delete(context.Background(), "node2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// (stop2 withdrew node2 already; put its slice back as a crashed node would leave it.)
	r2 := &Registrar{Client: client, NodeName: "node2", Addr: netip.MustParseAddr("10.244.2.1")}
	if _, err := r2.ensureSlice(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, client, "10.244.1.1")
	waitSlices(t, client, "kube-dns-node1")
	stop1()
	waitEndpoints(t, client)
	waitSlices(t, client)
}

func waitEndpoints(t *testing.T, client kubernetes.Interface, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var got []string
	for time.Now().Before(deadline) {
		got = nil
		if ep, err := client.CoreV1().Endpoints("kube-system").Get(context.Background(), "kube-dns", metav1.GetOptions{}); err == nil {
			for _, ss := range ep.Subsets {
				for _, a := range ss.Addresses {
					got = append(got, a.IP)
				}
			}
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("kube-dns endpoints %v, want %v", got, want)
}

func waitSlices(t *testing.T, client kubernetes.Interface, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var got []string
	for time.Now().Before(deadline) {
		got = nil
		sl, _ := client.DiscoveryV1().EndpointSlices("kube-system").List(context.Background(), metav1.ListOptions{})
		for _, s := range sl.Items {
			got = append(got, s.Name)
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("kube-dns slices %s, want %s", strings.Join(got, " "), strings.Join(want, " "))
}
