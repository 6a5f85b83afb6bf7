package controllers

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/apiservertest"
	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// testCluster is an in-process API server with the controllers running
// against it over loopback HTTP, as in `minikit server`.
type testCluster struct {
	t      *testing.T
	ctx    context.Context
	client kubernetes.Interface
	cfg    *rest.Config
	// writes counts mutating requests by "METHOD resource" (e.g. "PUT endpoints").
	writes *writeCounter

	mu   sync.Mutex
	stop func() // stops the running controllers
}

const waitTimeout = 20 * time.Second

func newTestCluster(t *testing.T) *testCluster {
	t.Helper()
	return newTestClusterOn(t, apiservertest.Start(t))
}

// newTestClusterOn is newTestCluster over a given API server.
func newTestClusterOn(t *testing.T, api *apiservertest.Server) *testCluster {
	t.Helper()
	wc := &writeCounter{counts: map[string]int{}}
	cfg := rest.CopyConfig(api.Config)
	cfg.WrapTransport = wc.wrap
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tc := &testCluster{t: t, ctx: ctx, client: client, cfg: cfg, writes: wc}
	t.Cleanup(tc.stopControllers)
	return tc
}

// startControllers runs a fresh Controllers and waits until it is ready.
func (tc *testCluster) startControllers(opts Config) {
	tc.t.Helper()
	tc.startControllersWith(opts, nil)
}

// startControllersWith is startControllers with a hook that adjusts the
// Controllers before they run.
func (tc *testCluster) startControllersWith(opts Config, adjust func(*Controllers)) {
	tc.t.Helper()
	ctx, cancel := context.WithCancel(tc.ctx)
	if opts.Metadata == nil {
		md, err := NewMetadataClient(tc.cfg)
		if err != nil {
			tc.t.Fatal(err)
		}
		opts.Metadata = md
	}
	c := New(tc.client, testutil.Logger(tc.t), opts)
	if adjust != nil {
		adjust(c)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		cancel()
		tc.t.Fatalf("controllers stopped before ready: %v", err)
	case <-time.After(waitTimeout):
		cancel()
		tc.t.Fatal("controllers not ready in time")
	}
	tc.mu.Lock()
	tc.stop = func() {
		cancel()
		if err := <-done; err != nil {
			tc.t.Errorf("controllers: %v", err)
		}
	}
	tc.mu.Unlock()
}

func (tc *testCluster) stopControllers() {
	tc.mu.Lock()
	stop := tc.stop
	tc.stop = nil
	tc.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// writeCounter counts the mutating requests the clients make.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (wc *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodGet {
			wc.mu.Lock()
			wc.counts[r.Method+" "+resourceOf(r.URL.Path)]++
			wc.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (wc *writeCounter) get(key string) int {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return wc.counts[key]
}

// resourceOf is the resource (and subresource) a request path names.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			return strings.Join(parts[i+2:i+3], "")
		}
	}
	if len(parts) > 0 {
		return parts[len(parts)-1]
	}
	return path
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// --- objects ---

func (tc *testCluster) createNode(name string, ready bool, lbls map[string]string, mutate ...func(*corev1.Node)) *corev1.Node {
	tc.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: status, Reason: "KubeletReady",
		}}},
	}
	for _, m := range mutate {
		m(n)
	}
	got, err := tc.client.CoreV1().Nodes().Create(tc.ctx, n, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("creating node %s: %v", name, err)
	}
	return got
}

func (tc *testCluster) pods(ns string, sel string) []corev1.Pod {
	tc.t.Helper()
	l, err := tc.client.CoreV1().Pods(ns).List(tc.ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		tc.t.Fatalf("listing pods: %v", err)
	}
	return l.Items
}

// activePods are the pods neither terminating nor finished.
func activePods(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			out = append(out, p)
		}
	}
	return out
}

func podNames(pods []corev1.Pod) string {
	var s []string
	for _, p := range pods {
		state := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			state += ",terminating"
		}
		if isPodReady(&p) {
			state += ",ready"
		}
		s = append(s, fmt.Sprintf("%s[%s@%s]", p.Name, state, p.Spec.NodeName))
	}
	return strings.Join(s, " ")
}

// setPodStatus writes a pod's status as the node agent would: Running with
// an IP, ready or not.
func (tc *testCluster) setPodStatus(ns, name, ip string, ready bool) {
	tc.t.Helper()
	tc.updatePodStatus(ns, name, func(p *corev1.Pod) { runningStatus(p, ip, ready) })
}

// updatePodStatus changes a pod's status, retrying on conflicts with the
// controllers' writes.
func (tc *testCluster) updatePodStatus(ns, name string, mutate func(*corev1.Pod)) {
	tc.t.Helper()
	for {
		p, err := tc.client.CoreV1().Pods(ns).Get(tc.ctx, name, metav1.GetOptions{})
		if err != nil {
			tc.t.Fatalf("getting pod %s: %v", name, err)
		}
		mutate(p)
		_, err = tc.client.CoreV1().Pods(ns).UpdateStatus(tc.ctx, p, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			tc.t.Fatalf("updating status of pod %s: %v", name, err)
		}
		return
	}
}

func runningStatus(p *corev1.Pod, ip string, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	if ip != "" {
		p.Status.PodIP = ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	setPodCondition(p, corev1.PodCondition{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()})
}

// fakeAgent stands in for the node agents: it finishes the deletion of
// terminating pods (as an agent does once the processes are gone) and, when
// autoReady is set, starts every bound pod as Running and Ready with an IP.
type fakeAgent struct {
	tc        *testCluster
	autoReady atomic.Bool
	nextIP    atomic.Int32
}

func (tc *testCluster) startAgent(autoReady bool) *fakeAgent {
	a := &fakeAgent{tc: tc}
	a.autoReady.Store(autoReady)
	ctx, cancel := context.WithCancel(tc.ctx)
	f := informers.NewSharedInformerFactory(tc.client, 0)
	inf := f.Core().V1().Pods().Informer()
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.handle(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, cur any) { a.handle(ctx, cur.(*corev1.Pod)) },
	})
	f.Start(ctx.Done())
	tc.t.Cleanup(func() { cancel(); f.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		tc.t.Fatal("agent cache did not sync")
	}
	return a
}

func (a *fakeAgent) ip() string {
	n := a.nextIP.Add(1)
	return fmt.Sprintf("10.244.%d.%d", n/200, n%200+10)
}

func (a *fakeAgent) handle(ctx context.Context, p *corev1.Pod) {
	pods := a.tc.client.CoreV1().Pods(p.Namespace)
	switch {
	case p.DeletionTimestamp != nil:
		zero := int64(0)
		_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	case p.Spec.NodeName != "" && p.Status.PodIP == "" && a.autoReady.Load():
		p = p.DeepCopy()
		runningStatus(p, a.ip(), true)
		_, _ = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	}
}

// readyAll marks every active, bound, not-ready pod matching sel Ready.
func (tc *testCluster) readyAll(ns, sel string, a *fakeAgent) int {
	tc.t.Helper()
	n := 0
	for _, p := range activePods(tc.pods(ns, sel)) {
		if p.Spec.NodeName != "" && !isPodReady(&p) {
			ip := p.Status.PodIP
			if ip == "" {
				ip = a.ip()
			}
			tc.setPodStatus(ns, p.Name, ip, true)
			n++
		}
	}
	return n
}
