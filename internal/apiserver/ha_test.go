package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"
	"github.com/minikit/minikit/internal/testutil"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Several API servers share one store: these tests run two (or three)
// Servers over one bbolt store in one process, as minikit servers share one
// etcd.

// rerunStore runs every Update closure twice, as the etcd backend does when a
// commit loses a race with another server: first in a transaction it
// discards, then for real. With steal, between the two runs it commits what a
// concurrent server would have: the ClusterIPs and NodePorts the discarded run
// picked, allocated to another Service.
type rerunStore struct {
	store.Interface
	mu     sync.Mutex
	steal  bool
	stolen []string // allocation keys taken between runs
	reruns int
}

var errDiscard = errors.New("discarded run")

// recordingTx remembers the keys a run wrote.
type recordingTx struct {
	store.Tx
	puts []string
}

func (t *recordingTx) Put(key string, value []byte) error {
	t.puts = append(t.puts, key)
	return t.Tx.Put(key, value)
}

func (r *rerunStore) Update(fn func(store.Tx) error) (int64, error) {
	var wrote []string
	_, err := r.Interface.Update(func(tx store.Tx) error {
		rt := &recordingTx{Tx: tx}
		if err := fn(rt); err != nil {
			return err
		}
		wrote = rt.puts
		return errDiscard
	})
	r.mu.Lock()
	r.reruns++
	steal := r.steal
	r.mu.Unlock()
	if errors.Is(err, errDiscard) && steal {
		var taken []string
		for _, k := range wrote {
			if strings.HasPrefix(k, allocIPPrefix) || strings.HasPrefix(k, allocPortPrefix) {
				taken = append(taken, k)
			}
		}
		if len(taken) > 0 {
			if _, err := r.Interface.Update(func(tx store.Tx) error {
				for _, k := range taken {
					if err := tx.Put(k, []byte("other/thief")); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return 0, err
			}
			r.mu.Lock()
			r.stolen = append(r.stolen, taken...)
			r.mu.Unlock()
		}
	}
	return r.Interface.Update(fn)
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// sharedAPI serves srv over HTTP as a testAPI whose store is st (shared: the
// caller closes it).
func sharedAPI(t *testing.T, st store.Interface, srv *Server) *testAPI {
	t.Helper()
	hs := httptest.NewServer(srv.Handler())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		hs.CloseClientConnections()
		hs.Close()
	})
	return &testAPI{t: t, store: st, srv: srv, http: hs, url: hs.URL, client: client}
}

func openShared(t *testing.T) *store.Bolt {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Every write path gives the same result when the store runs its closure a
// second time after another server took what the first run allocated: the
// second run allocates afresh instead of calling the first run's picks
// "already allocated", and nothing from the discarded run leaks.
func TestWritesSurviveRetriedTransactions(t *testing.T) {
	st := openShared(t)
	rs := &rerunStore{Interface: st}
	srv, err := New(Config{Store: rs, Logger: quietLog, Version: "test", AdvertiseAddress: "192.0.2.10", Port: 6443, Identity: "server-a"})
	if err != nil {
		t.Fatalf("bootstrap with every transaction run twice: %v", err)
	}
	a := sharedAPI(t, st, srv)
	rs.mu.Lock()
	rs.steal = true
	rs.mu.Unlock()

	web := newService("web", nodePortType)
	a.create(servicesPath, web)
	// PUT: a second port needs a second NodePort.
	web.Spec.Ports = append(web.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443})
	a.put(servicesPath+"/web", web).mustCode(t, http.StatusOK, web)
	// PATCH: a ClusterIP Service becomes a NodePort one.
	db := newService("db")
	a.create(servicesPath, db)
	a.patch(servicesPath+"/db", "application/merge-patch+json", `{"spec":{"type":"NodePort"}}`).mustCode(t, http.StatusOK, db)

	rs.mu.Lock()
	stolen := slices.Clone(rs.stolen)
	rs.mu.Unlock()
	if len(stolen) < 4 { // web: IP, port; web's new port; db: IP; db's port
		t.Errorf("only %d allocations taken between runs (%v): the test did not exercise retries", len(stolen), stolen)
	}
	for _, svc := range []*corev1.Service{web, db} {
		owner := svcResource.key(svc.Namespace, svc.Name)
		keys := []string{allocIPPrefix + svc.Spec.ClusterIP}
		for _, p := range svc.Spec.Ports {
			if p.NodePort == 0 {
				t.Errorf("%s port %d has no nodePort", owner, p.Port)
			}
			keys = append(keys, allocPortPrefix+strconv.Itoa(int(p.NodePort)))
		}
		for _, k := range keys {
			if slices.Contains(stolen, k) {
				t.Errorf("%s holds %s, which another server took", owner, k)
			}
			kv, err := st.Get(k)
			if err != nil || string(kv.Value) != owner {
				t.Errorf("allocation %s: %q, %v; want owned by %s", k, kv.Value, err, owner)
			}
		}
	}
	// Nothing of the discarded runs is left but what the thief took.
	for _, prefix := range []string{allocIPPrefix, allocPortPrefix} {
		kvs, _, err := st.List(prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range kvs {
			if string(kv.Value) == "other/thief" || kv.Value == nil {
				continue
			}
			if _, err := st.Get(string(kv.Value)); err != nil {
				t.Errorf("allocation %s owned by %s, which does not exist", kv.Key, kv.Value)
			}
		}
	}

	// A namespace and its default ServiceAccount, created twice over.
	a.create("/api/v1/namespaces", newNamespace("team"))
	var sas corev1.ServiceAccountList
	a.read("/api/v1/namespaces/team/serviceaccounts", &sas)
	if len(sas.Items) != 1 || sas.Items[0].Name != "default" {
		t.Errorf("namespace team has service accounts %v, want only default", sas.Items)
	}
	// Delete reports the deleted object and frees what it held.
	var gone corev1.Service
	a.delete(servicesPath+"/web").mustCode(t, http.StatusOK, &gone)
	if gone.Name != "web" || gone.Spec.ClusterIP != web.Spec.ClusterIP {
		t.Errorf("delete answered %s %s, want web %s", gone.Name, gone.Spec.ClusterIP, web.Spec.ClusterIP)
	}
	if _, err := st.Get(allocIPPrefix + web.Spec.ClusterIP); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("clusterIP %s of deleted web still allocated (%v)", web.Spec.ClusterIP, err)
	}
}

// Two servers on one store, 200 concurrent Service creates each, every
// transaction run twice: no ClusterIP or NodePort is handed out twice and
// every allocation record belongs to its Service.
func TestSharedStoreConcurrentServiceCreates(t *testing.T) {
	st := openShared(t)
	var apis [2]*testAPI
	for i := range apis {
		srv, err := New(Config{Store: &rerunStore{Interface: st}, Logger: quietLog, Version: "test",
			AdvertiseAddress: fmt.Sprintf("192.0.2.%d", 10+i), Port: 6443, Identity: fmt.Sprintf("server-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		apis[i] = sharedAPI(t, st, srv)
	}
	const perServer = 200
	createServicesOn(t, apis[:], perServer)
	items := checkAllocations(t, apis[0], validation.DefaultConfig())
	if len(items) != 2*perServer+1 {
		t.Errorf("%d services, want %d", len(items), 2*perServer+1)
	}
}

// clock is a settable time for Server.now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// apiEndpoints reads default/kubernetes' Endpoints and EndpointSlice
// addresses, checking that they agree and carry this port.
func apiEndpoints(t *testing.T, s *Server, port int32) []string {
	t.Helper()
	eobj, err := s.get(endpointsResource, "default", "kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	ep := eobj.(*corev1.Endpoints)
	var fromEP []string
	if len(ep.Subsets) != 1 || len(ep.Subsets[0].Ports) != 1 || ep.Subsets[0].Ports[0].Port != port {
		t.Fatalf("endpoints default/kubernetes: %+v", ep.Subsets)
	}
	for _, a := range ep.Subsets[0].Addresses {
		fromEP = append(fromEP, a.IP)
	}
	sobj, err := s.get(proxySliceResource, "default", "kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	sl := sobj.(*discoveryv1.EndpointSlice)
	var fromSlice []string
	for _, e := range sl.Endpoints {
		if e.Conditions.Ready == nil || !*e.Conditions.Ready || len(e.Addresses) != 1 {
			t.Errorf("slice endpoint %+v", e)
		}
		fromSlice = append(fromSlice, e.Addresses...)
	}
	if len(sl.Ports) != 1 || *sl.Ports[0].Port != port {
		t.Errorf("slice ports %+v", sl.Ports)
	}
	if !slices.Equal(fromEP, fromSlice) {
		t.Errorf("Endpoints name %v, EndpointSlice %v", fromEP, fromSlice)
	}
	return fromEP
}

// The kubernetes Service's endpoints are the servers whose identity lease is
// fresh, sorted as text (as kube-apiserver lists them): a server that stops renewing leaves them once its lease
// expires, one that stops cleanly leaves at once, and the last one stays.
func TestKubernetesEndpointsFromLeases(t *testing.T) {
	st := openShared(t)
	clk := &clock{t: time.Now()}
	start := clk.now()
	newServer := func(identity, addr string) *Server {
		t.Helper()
		s, err := New(Config{Store: st, Logger: quietLog, Version: "test", AdvertiseAddress: addr, Port: 6443, Identity: identity})
		if err != nil {
			t.Fatal(err)
		}
		s.now = clk.now
		if err := s.syncAPIEndpoints(false); err != nil {
			t.Fatal(err)
		}
		return s
	}
	at := func(d time.Duration) { clk.set(start.Add(d)) }
	b := newServer("server-b", "192.0.2.9")
	if got := apiEndpoints(t, b, 6443); fmt.Sprint(got) != "[192.0.2.9]" {
		t.Fatalf("one server: endpoints %v", got)
	}
	a := newServer("server-a", "192.0.2.10")
	steps := []struct {
		name string
		do   func() error
		want string
	}{
		{"second server joins", func() error { return nil }, "[192.0.2.10 192.0.2.9]"},
		{"both renew at 10s", func() error {
			at(10 * time.Second)
			if err := b.syncAPIEndpoints(false); err != nil {
				return err
			}
			return a.syncAPIEndpoints(false)
		}, "[192.0.2.10 192.0.2.9]"},
		{"b stops renewing; a at 24s, b's lease 14s old", func() error {
			at(24 * time.Second)
			return a.syncAPIEndpoints(false)
		}, "[192.0.2.10 192.0.2.9]"},
		{"a at 26s, b's lease expired", func() error {
			at(26 * time.Second)
			return a.syncAPIEndpoints(false)
		}, "[192.0.2.10]"},
		{"b is back", func() error { return b.syncAPIEndpoints(false) }, "[192.0.2.10 192.0.2.9]"},
		{"a stops cleanly", func() error {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return a.RunEndpointReconciler(ctx)
		}, "[192.0.2.9]"},
		{"b, the last, stops cleanly and stays", func() error {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return b.RunEndpointReconciler(ctx)
		}, "[192.0.2.9]"},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := fmt.Sprint(apiEndpoints(t, a, 6443)); got != s.want {
			t.Errorf("%s: endpoints %s, want %s", s.name, got, s.want)
		}
	}
	// Stopping deleted both leases.
	for _, id := range []string{"server-a", "server-b"} {
		if _, err := a.get(leaseResource, "kube-system", IdentityLeaseName(id)); !apierrors.IsNotFound(err) {
			t.Errorf("lease of %s after its server stopped: %v", id, err)
		}
	}
}

// The identity lease has kube-apiserver's shape, and one expired for over an
// hour is deleted by a live server, as kube-apiserver's lease GC does.
func TestIdentityLease(t *testing.T) {
	st := openShared(t)
	clk := &clock{t: time.Now()}
	start := clk.now()
	var srvs []*Server
	for _, id := range []string{"node1", "node2"} {
		s, err := New(Config{Store: st, Logger: quietLog, Version: "test", AdvertiseAddress: "fd00::" + id[4:], Port: 6443, Identity: id})
		if err != nil {
			t.Fatal(err)
		}
		s.now = clk.now
		srvs = append(srvs, s)
	}
	name := IdentityLeaseName("node1")
	if !strings.HasPrefix(name, "apiserver-") || len(name) != len("apiserver-")+26 || name != strings.ToLower(name) {
		t.Errorf("lease name %q, want apiserver-<26 lowercase base32 characters>", name)
	}
	obj, err := srvs[0].get(leaseResource, "kube-system", name)
	if err != nil {
		t.Fatal(err)
	}
	l := obj.(*coordinationv1.Lease)
	if l.Labels[IdentityLeaseLabel] != IdentityLeaseComponent || l.Labels[corev1.LabelHostname] != "node1" ||
		l.Annotations[AdvertiseAddressAnnotation] != "fd00::1" || l.Spec.HolderIdentity == nil ||
		!strings.HasPrefix(*l.Spec.HolderIdentity, name+"_") || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 15 {
		t.Errorf("lease %s: labels %v, annotations %v, spec %+v", name, l.Labels, l.Annotations, l.Spec)
	}
	if got := fmt.Sprint(apiEndpoints(t, srvs[0], 6443)); got != "[fd00::1 fd00::2]" {
		t.Errorf("IPv6 servers: endpoints %s", got)
	}
	clk.set(start.Add(2 * time.Hour))
	if err := srvs[1].syncAPIEndpoints(false); err != nil {
		t.Fatal(err)
	}
	if _, err := srvs[1].get(leaseResource, "kube-system", name); !apierrors.IsNotFound(err) {
		t.Errorf("lease of node1, expired two hours ago: %v, want deleted", err)
	}
	if got := fmt.Sprint(apiEndpoints(t, srvs[1], 6443)); got != "[fd00::2]" {
		t.Errorf("after node1 expired: endpoints %s", got)
	}
}

// A namespace left Terminating by a server that stopped mid-way is finished
// by another one, once it has been Terminating for a lease duration.
func TestNamespaceDeletionResumedByAnotherServer(t *testing.T) {
	st := openShared(t)
	s, err := New(Config{Store: st, Logger: quietLog, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	s.now = clk.now
	// What a server that crashed right after marking the namespaces wrote.
	for _, c := range []struct {
		name string
		age  time.Duration
	}{{"left", 20 * time.Second}, {"fresh", time.Second}} {
		if _, err := s.Create(nsResource, "", newNamespace(c.name)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Update(func(tx store.Tx) error {
			kv, _ := tx.Get(nsResource.key("", c.name))
			var n corev1.Namespace
			if err := decodeStored(kv.Value, &n); err != nil {
				return err
			}
			ts := metav1.NewTime(clk.now().Add(-c.age))
			n.DeletionTimestamp, n.Status.Phase = &ts, corev1.NamespaceTerminating
			return s.put(tx, nsResource, kv.Key, &n)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.resumeNamespaceDeletions(apiLeaseDuration); err != nil {
		t.Fatal(err)
	}
	a := sharedAPI(t, st, s)
	testutil.Eventually(t, waitTimeout, "namespace left deleted", a.gone("/api/v1/namespaces/left"))
	var fresh corev1.Namespace
	a.read("/api/v1/namespaces/fresh", &fresh)
	if fresh.Status.Phase != corev1.NamespaceTerminating {
		t.Errorf("namespace fresh: phase %s, want still Terminating (its server may be working on it)", fresh.Status.Phase)
	}
}

// A service account token one server issued works on another sharing the
// store and key whose clock is behind, within kube-apiserver's minute of
// leeway (a token "issued in the future" was refused).
func TestTokenFromAnotherServer(t *testing.T) {
	st := openShared(t)
	key, err := NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef0123456789abcdef"
	var apis [2]*tokenAPI
	for i := range apis {
		srv, err := New(Config{Store: st, Token: token, ServiceAccountKey: key, Logger: quietLog, Identity: fmt.Sprintf("server-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		apis[i] = &tokenAPI{t: t, srv: srv, h: srv.Handler(), token: token}
	}
	apis[0].srv.now = func() time.Time { return time.Now().Add(30 * time.Second) }
	r := apis[0].do("POST", "/api/v1/namespaces/default/serviceaccounts/default/token", token, `{"spec":{}}`)
	if r.Code != http.StatusCreated {
		t.Fatalf("token request: HTTP %d: %s", r.Code, r.Body)
	}
	var tr struct {
		Status struct{ Token string }
	}
	if err := json.Unmarshal(r.Body.Bytes(), &tr); err != nil || tr.Status.Token == "" {
		t.Fatalf("token request answer %s: %v", r.Body, err)
	}
	wantCode(t, "bind view", apis[0].do("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", token,
		`{"metadata":{"name":"view"},"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"ServiceAccount","name":"default"}]}`), http.StatusCreated, "")
	wantCode(t, "token from the other server", apis[1].do("GET", servicesPath, tr.Status.Token, ""), http.StatusOK, "")
}

// createServicesOn creates perServer Services on each server at once (every
// other one a NodePort with two ports) and fails the test for each create
// that is not 201.
func createServicesOn(t *testing.T, apis []*testAPI, perServer int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, len(apis)*perServer)
	for s, a := range apis {
		for i := range perServer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				svc := newService(fmt.Sprintf("svc-%d-%03d", s, i))
				if i%2 == 1 {
					nodePortType(svc)
					svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443})
				}
				if code, body := postStatus(a, servicesPath, svc); code != http.StatusCreated {
					errs <- fmt.Sprintf("creating %s on server %d: HTTP %d: %s", svc.Name, s, code, body)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
