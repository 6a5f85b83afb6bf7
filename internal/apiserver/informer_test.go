package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"
	"github.com/minikit/minikit/internal/testutil"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// processServer is an API server that can be stopped and started again on the same
// store file and the same address, as a restarted minikit process would be.
type processServer struct {
	t      *testing.T
	addr   string
	dbPath string
	store  *store.Bolt
	http   *http.Server
	served chan struct{}
}

func startProcessServer(t *testing.T) *processServer {
	p := &processServer{t: t, addr: "127.0.0.1:0", dbPath: filepath.Join(t.TempDir(), "db")}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *processServer) start() {
	p.t.Helper()
	st, err := store.OpenBolt(p.dbPath, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	srv, err := New(Config{Store: st, Validation: validation.DefaultConfig(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "test"})
	if err != nil {
		p.t.Fatal(err)
	}
	// The old listener's port may take a moment to be free again for a listener.
	var l net.Listener
	testutil.Eventually(p.t, waitTimeout, "listening on "+p.addr, func() error {
		l, err = net.Listen("tcp", p.addr)
		return err
	})
	p.addr = l.Addr().String()
	p.store, p.http, p.served = st, &http.Server{Handler: srv.Handler()}, make(chan struct{})
	go func(hs *http.Server, done chan struct{}) {
		defer close(done)
		if err := hs.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			p.t.Errorf("serving: %v", err)
		}
	}(p.http, p.served)
}

// stop drops every connection, as a dying process does, and closes the store.
func (p *processServer) stop() {
	if p.http == nil {
		return
	}
	p.http.Close()
	<-p.served
	p.store.Close()
	p.http = nil
}

// recorder collects informer notifications as "ADD ns/name", "UPDATE ns/name" and
// "DELETE ns/name".
type recorder struct {
	kind   string
	events chan string
}

func newRecorder(kind string) *recorder {
	return &recorder{kind: kind, events: make(chan string, 4096)}
}

func (r *recorder) add(verb string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := metaAccessor(obj)
	if err != nil {
		return
	}
	key := m.GetName()
	if ns := m.GetNamespace(); ns != "" {
		key = ns + "/" + key
	}
	r.events <- verb + " " + key
}

func (r *recorder) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.add("ADD", obj) },
		UpdateFunc: func(_, obj any) { r.add("UPDATE", obj) },
		DeleteFunc: func(obj any) { r.add("DELETE", obj) },
	}
}

// await consumes notifications until want arrives; others (resyncs, initial adds
// of built-in objects, replays after a relist) are skipped.
func (r *recorder) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	var seen []string
	for {
		select {
		case e := <-r.events:
			if e == want {
				return
			}
			seen = append(seen, e)
		case <-deadline:
			t.Fatalf("%s informer: no %q within 60s; saw %q", r.kind, want, seen)
		}
	}
}

func metaAccessor(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", obj)
	}
	return m, nil
}

// TestInformers runs client-go shared informers, as every minikit component does,
// against the server, restarts the server underneath them, and checks that the
// same informers carry on.
func TestInformers(t *testing.T) {
	p := startProcessServer(t)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + p.addr, QPS: 1000, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	recs := map[string]*recorder{}
	for kind, inf := range map[string]cache.SharedIndexInformer{
		"services":        factory.Core().V1().Services().Informer(),
		"endpointslices":  factory.Discovery().V1().EndpointSlices().Informer(),
		"pods":            factory.Core().V1().Pods().Informer(),
		"nodes":           factory.Core().V1().Nodes().Informer(),
		"replicasets":     factory.Apps().V1().ReplicaSets().Informer(),
		"rcs":             factory.Core().V1().ReplicationControllers().Informer(),
		"serviceaccounts": factory.Core().V1().ServiceAccounts().Informer(),
		"leases":          factory.Coordination().V1().Leases().Informer(),
		"statefulsets":    factory.Apps().V1().StatefulSets().Informer(),
		"daemonsets":      factory.Apps().V1().DaemonSets().Informer(),
		"jobs":            factory.Batch().V1().Jobs().Informer(),
	} {
		recs[kind] = newRecorder(kind)
		if _, err := inf.AddEventHandler(recs[kind].handler()); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	// Informers stop before the server does (cleanups run last in, first out).
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	for typ, ok := range factory.WaitForCacheSync(stop) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	recs["services"].await(t, "ADD default/kubernetes")

	ctx := context.Background()
	// lifecycle creates, updates and deletes one object of each kind through
	// client-go and waits for each informer to see each step.
	lifecycle := func(t *testing.T, suffix string, deleteToo bool) {
		steps := []struct {
			kind   string
			name   string
			create func(name string) error
			update func(name string) error
			delete func(name string) error
		}{
			{"services", "default/web" + suffix,
				func(n string) error {
					_, err := cs.CoreV1().Services("default").Create(ctx, newService(n), metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					s, err := cs.CoreV1().Services("default").Get(ctx, n, metav1.GetOptions{})
					if err == nil {
						s.Labels = map[string]string{"updated": "true"}
						_, err = cs.CoreV1().Services("default").Update(ctx, s, metav1.UpdateOptions{})
					}
					return err
				},
				func(n string) error { return cs.CoreV1().Services("default").Delete(ctx, n, metav1.DeleteOptions{}) }},
			{"endpointslices", "default/web" + suffix,
				func(n string) error {
					_, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, newSlice(n, "10.244.0.5"), metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					s, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, n, metav1.GetOptions{})
					if err == nil {
						s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.0.6"}})
						_, err = cs.DiscoveryV1().EndpointSlices("default").Update(ctx, s, metav1.UpdateOptions{})
					}
					return err
				},
				func(n string) error {
					return cs.DiscoveryV1().EndpointSlices("default").Delete(ctx, n, metav1.DeleteOptions{})
				}},
			{"pods", "default/web" + suffix,
				func(n string) error {
					_, err := cs.CoreV1().Pods("default").Create(ctx, newPod(n, "", nil), metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					pod, err := cs.CoreV1().Pods("default").Get(ctx, n, metav1.GetOptions{})
					if err == nil {
						pod.Status.Phase = corev1.PodRunning
						pod.Status.PodIP = "10.244.0.5"
						_, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
					}
					return err
				},
				func(n string) error { return cs.CoreV1().Pods("default").Delete(ctx, n, metav1.DeleteOptions{}) }},
			{"nodes", "node" + suffix,
				func(n string) error {
					_, err := cs.CoreV1().Nodes().Create(ctx, newNode(n), metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					_, err := cs.CoreV1().Nodes().Patch(ctx, n, "application/strategic-merge-patch+json",
						[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
					return err
				},
				func(n string) error { return cs.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}) }},
			{"replicasets", "default/web" + suffix,
				func(n string) error {
					_, err := cs.AppsV1().ReplicaSets("default").Create(ctx, newReplicaSet(n), metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					// kubectl scale rs: the scale subresource, then a status write.
					sc, err := cs.AppsV1().ReplicaSets("default").GetScale(ctx, n, metav1.GetOptions{})
					if err != nil {
						return err
					}
					sc.Spec.Replicas = 3
					if _, err := cs.AppsV1().ReplicaSets("default").UpdateScale(ctx, n, sc, metav1.UpdateOptions{}); err != nil {
						return err
					}
					rs, err := cs.AppsV1().ReplicaSets("default").Get(ctx, n, metav1.GetOptions{})
					if err == nil {
						rs.Status.Replicas = 3
						_, err = cs.AppsV1().ReplicaSets("default").UpdateStatus(ctx, rs, metav1.UpdateOptions{})
					}
					return err
				},
				func(n string) error { return cs.AppsV1().ReplicaSets("default").Delete(ctx, n, metav1.DeleteOptions{}) }},
			{"rcs", "default/web" + suffix,
				func(n string) error {
					_, err := cs.CoreV1().ReplicationControllers("default").Create(ctx, newRC(n), metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					_, err := cs.CoreV1().ReplicationControllers("default").Patch(ctx, n, "application/merge-patch+json",
						[]byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
					return err
				},
				func(n string) error {
					return cs.CoreV1().ReplicationControllers("default").Delete(ctx, n, metav1.DeleteOptions{})
				}},
			{"serviceaccounts", "default/robot" + suffix,
				func(n string) error {
					_, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					_, err := cs.CoreV1().ServiceAccounts("default").Patch(ctx, n, "application/merge-patch+json",
						[]byte(`{"automountServiceAccountToken":false}`), metav1.PatchOptions{})
					return err
				},
				func(n string) error {
					return cs.CoreV1().ServiceAccounts("default").Delete(ctx, n, metav1.DeleteOptions{})
				}},
			{"leases", "kube-node-lease/node" + suffix,
				func(n string) error {
					holder, d := n, int32(40)
					_, err := cs.CoordinationV1().Leases("kube-node-lease").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n},
						Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d}}, metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					l, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, n, metav1.GetOptions{})
					if err == nil {
						now := metav1.NewMicroTime(time.Now())
						l.Spec.RenewTime = &now
						_, err = cs.CoordinationV1().Leases("kube-node-lease").Update(ctx, l, metav1.UpdateOptions{})
					}
					return err
				},
				func(n string) error {
					return cs.CoordinationV1().Leases("kube-node-lease").Delete(ctx, n, metav1.DeleteOptions{})
				}},
			{"statefulsets", "default/web" + suffix,
				func(n string) error {
					_, err := cs.AppsV1().StatefulSets("default").Create(ctx, newStatefulSet(n), metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					set, err := cs.AppsV1().StatefulSets("default").Get(ctx, n, metav1.GetOptions{})
					if err == nil {
						set.Status.Replicas, set.Status.ReadyReplicas = 1, 1
						_, err = cs.AppsV1().StatefulSets("default").UpdateStatus(ctx, set, metav1.UpdateOptions{})
					}
					return err
				},
				func(n string) error {
					return cs.AppsV1().StatefulSets("default").Delete(ctx, n, metav1.DeleteOptions{})
				}},
			{"daemonsets", "default/web" + suffix,
				func(n string) error {
					_, err := cs.AppsV1().DaemonSets("default").Create(ctx, newDaemonSet(n), metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					_, err := cs.AppsV1().DaemonSets("default").Patch(ctx, n, "application/strategic-merge-patch+json",
						[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.27"}]}}}}`), metav1.PatchOptions{})
					return err
				},
				func(n string) error { return cs.AppsV1().DaemonSets("default").Delete(ctx, n, metav1.DeleteOptions{}) }},
			{"jobs", "default/web" + suffix,
				func(n string) error {
					_, err := cs.BatchV1().Jobs("default").Create(ctx, newJob(n), metav1.CreateOptions{})
					return err
				},
				func(n string) error {
					j, err := cs.BatchV1().Jobs("default").Get(ctx, n, metav1.GetOptions{})
					if err == nil {
						j.Status.Active = 1
						_, err = cs.BatchV1().Jobs("default").UpdateStatus(ctx, j, metav1.UpdateOptions{})
					}
					return err
				},
				func(n string) error { return cs.BatchV1().Jobs("default").Delete(ctx, n, metav1.DeleteOptions{}) }},
		}
		for _, st := range steps {
			name := st.name[strings.LastIndex(st.name, "/")+1:]
			rec := recs[st.kind]
			if err := st.create(name); err != nil {
				t.Fatalf("creating %s %s: %v", st.kind, name, err)
			}
			rec.await(t, "ADD "+st.name)
			if err := st.update(name); err != nil {
				t.Fatalf("updating %s %s: %v", st.kind, name, err)
			}
			rec.await(t, "UPDATE "+st.name)
			if !deleteToo {
				continue
			}
			if err := st.delete(name); err != nil {
				t.Fatalf("deleting %s %s: %v", st.kind, name, err)
			}
			rec.await(t, "DELETE "+st.name)
		}
	}

	t.Run("before restart", func(t *testing.T) { lifecycle(t, "-1", true) })
	t.Run("before restart, kept", func(t *testing.T) { lifecycle(t, "-2", false) })

	addr := p.addr
	p.stop()
	p.start()
	if p.addr != addr {
		t.Fatalf("restarted on %s, want %s", p.addr, addr)
	}

	t.Run("after restart", func(t *testing.T) { lifecycle(t, "-3", true) })
	t.Run("after restart, objects from before", func(t *testing.T) {
		if err := cs.CoreV1().Services("default").Delete(ctx, "web-2", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		recs["services"].await(t, "DELETE default/web-2")
		if err := cs.CoreV1().Nodes().Delete(ctx, "node-2", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		recs["nodes"].await(t, "DELETE node-2")
	})

	// The caches agree with the server.
	svcs, err := factory.Core().V1().Services().Lister().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range svcs {
		names = append(names, s.Namespace+"/"+s.Name)
	}
	if len(names) != 1 || names[0] != "default/kubernetes" {
		t.Errorf("service cache holds %v, want only default/kubernetes", names)
	}
	// The ReplicaSet kept from before the restart is in the cache with the
	// replicas its update set.
	rs, err := factory.Apps().V1().ReplicaSets().Lister().ReplicaSets("default").Get("web-2")
	if err != nil || *rs.Spec.Replicas != 3 || rs.Status.Replicas != 3 {
		t.Errorf("replica set cache: %+v %v", rs, err)
	}
	rc, err := factory.Core().V1().ReplicationControllers().Lister().ReplicationControllers("default").Get("web-2")
	if err != nil || *rc.Spec.Replicas != 0 || rc.Spec.Selector["app"] != "web-2" {
		t.Errorf("replication controller cache: %+v %v", rc, err)
	}
}

func newReplicaSet(name string) *appsv1.ReplicaSet {
	lbls := map[string]string{"app": name}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbls},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "serve-hostname"}}},
			},
		},
	}
}

// newRC leaves the selector to be defaulted from the template's labels.
func newRC(name string) *corev1.ReplicationController {
	return &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ReplicationControllerSpec{
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "serve-hostname"}}},
			},
		},
	}
}

func workloadTemplate(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
}

func newStatefulSet(name string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.StatefulSetSpec{
		ServiceName: "nginx", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: workloadTemplate(name)}}
}

func newDaemonSet(name string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: workloadTemplate(name)}}
}

func newJob(name string) *batchv1.Job {
	t := workloadTemplate(name)
	t.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: batchv1.JobSpec{Template: t}}
}

func newSlice(name, ip string) *discoveryv1.EndpointSlice {
	port := int32(8080)
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port}},
	}
}
