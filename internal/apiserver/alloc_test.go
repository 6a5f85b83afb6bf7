package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// checkAllocations asserts that the allocation records and the Services agree: every
// ClusterIP and NodePort is inside its range, owned by exactly one Service, and
// recorded as owned by it; no record is left without its Service.
func checkAllocations(t *testing.T, a *testAPI, cfg validation.Config) []corev1.Service {
	t.Helper()
	var list corev1.ServiceList
	a.read("/api/v1/services", &list)
	ips, ports := map[string]string{}, map[string]string{}
	for _, s := range list.Items {
		owner := svcResource.key(s.Namespace, s.Name)
		if s.Spec.Type == corev1.ServiceTypeExternalName {
			if s.Spec.ClusterIP != "" {
				t.Errorf("ExternalName service %s has clusterIP %s", owner, s.Spec.ClusterIP)
			}
			continue
		}
		ip, err := netip.ParseAddr(s.Spec.ClusterIP)
		if err != nil || !cfg.ServiceCIDR.Contains(ip) || ip == cfg.ServiceCIDR.Addr() {
			t.Errorf("service %s has clusterIP %q, not a host address of %s", owner, s.Spec.ClusterIP, cfg.ServiceCIDR)
		}
		if len(s.Spec.ClusterIPs) != 1 || s.Spec.ClusterIPs[0] != s.Spec.ClusterIP {
			t.Errorf("service %s has clusterIPs %v, want [%s]", owner, s.Spec.ClusterIPs, s.Spec.ClusterIP)
		}
		if prev, dup := ips[s.Spec.ClusterIP]; dup {
			t.Errorf("clusterIP %s given to both %s and %s", s.Spec.ClusterIP, prev, owner)
		}
		ips[s.Spec.ClusterIP] = owner
		for _, p := range s.Spec.Ports {
			if s.Spec.Type == corev1.ServiceTypeClusterIP && p.NodePort != 0 {
				t.Errorf("ClusterIP service %s has nodePort %d", owner, p.NodePort)
			}
			if s.Spec.Type != corev1.ServiceTypeNodePort {
				continue
			}
			if p.NodePort < cfg.NodePortMin || p.NodePort > cfg.NodePortMax {
				t.Errorf("service %s has nodePort %d outside %d-%d", owner, p.NodePort, cfg.NodePortMin, cfg.NodePortMax)
			}
			np := strconv.Itoa(int(p.NodePort))
			if prev, dup := ports[np]; dup {
				t.Errorf("nodePort %s given to both %s and %s", np, prev, owner)
			}
			ports[np] = owner
		}
	}
	for _, r := range []struct {
		prefix string
		want   map[string]string
	}{{allocIPPrefix, ips}, {allocPortPrefix, ports}} {
		kvs, _, err := a.store.List(r.prefix)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, kv := range kvs {
			got[strings.TrimPrefix(kv.Key, r.prefix)] = string(kv.Value)
		}
		for k, owner := range r.want {
			if got[k] != owner {
				t.Errorf("allocation %s%s is owned by %q, want %q", r.prefix, k, got[k], owner)
			}
		}
		for k, owner := range got {
			if _, ok := r.want[k]; !ok {
				t.Errorf("allocation %s%s owned by %q has no service", r.prefix, k, owner)
			}
		}
	}
	return list.Items
}

func TestConcurrentServiceCreates(t *testing.T) {
	a := newTestAPI(t)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			svc := newService(fmt.Sprintf("svc-%03d", i))
			if i%2 == 1 {
				nodePortType(svc)
				svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443})
			}
			if code, body := postStatus(a, servicesPath, svc); code != http.StatusCreated {
				errs <- fmt.Sprintf("creating %s: HTTP %d: %s", svc.Name, code, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	items := checkAllocations(t, a, validation.DefaultConfig())
	if len(items) != n+1 {
		t.Errorf("%d services, want %d", len(items), n+1)
	}
}

func TestRequestedAllocations(t *testing.T) {
	a := newTestAPI(t)
	first := newService("first", nodePortType)
	first.Spec.ClusterIP = "10.96.0.50"
	first.Spec.Ports[0].NodePort = 30080
	a.create(servicesPath, first)
	if first.Spec.ClusterIP != "10.96.0.50" || first.Spec.Ports[0].NodePort != 30080 {
		t.Fatalf("requested 10.96.0.50:30080, got %s:%d", first.Spec.ClusterIP, first.Spec.Ports[0].NodePort)
	}

	cases := []struct {
		name      string
		clusterIP string
		nodePort  int32
		field     string
		message   string
	}{
		{name: "clusterIP taken", clusterIP: "10.96.0.50", field: "spec.clusterIPs",
			message: "failed to allocate IP 10.96.0.50: provided IP is already allocated"},
		{name: "nodePort taken", nodePort: 30080, field: "spec.ports[0].nodePort",
			message: "provided port is already allocated"},
		{name: "kubernetes service IP", clusterIP: "10.96.0.1", field: "spec.clusterIPs",
			message: "failed to allocate IP 10.96.0.1: provided IP is already allocated"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := a.with(t)
			svc := newService("second", nodePortType)
			svc.Spec.ClusterIP = tc.clusterIP
			svc.Spec.Ports[0].NodePort = tc.nodePort
			rev := a.store.Rev()
			st := a.post(servicesPath, svc).wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, tc.message)
			if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != tc.field {
				t.Errorf("causes %+v, want one on %s", st.Details, tc.field)
			}
			if a.store.Rev() != rev {
				t.Errorf("a refused create wrote to the store (allocations leaked?)")
			}
		})
	}
	checkAllocations(t, a, validation.DefaultConfig())

	t.Run("deleting frees both", func(t *testing.T) {
		a := a.with(t)
		a.delete(servicesPath+"/first").mustCode(t, 200, nil)
		again := newService("second", nodePortType)
		again.Spec.ClusterIP = "10.96.0.50"
		again.Spec.Ports[0].NodePort = 30080
		a.create(servicesPath, again)
		checkAllocations(t, a, validation.DefaultConfig())
	})

	t.Run("NodePort to ClusterIP releases the nodePort", func(t *testing.T) {
		a := a.with(t)
		a.patch(servicesPath+"/second", "application/merge-patch+json", `{"spec":{"type":"ClusterIP"}}`).mustCode(t, 200, nil)
		var cur corev1.Service
		a.read(servicesPath+"/second", &cur)
		if cur.Spec.Ports[0].NodePort != 0 || cur.Spec.ClusterIP != "10.96.0.50" {
			t.Errorf("after switching to ClusterIP: nodePort %d clusterIP %s, want 0 and 10.96.0.50", cur.Spec.Ports[0].NodePort, cur.Spec.ClusterIP)
		}
		third := newService("third", nodePortType)
		third.Spec.Ports[0].NodePort = 30080
		a.create(servicesPath, third)
		checkAllocations(t, a, validation.DefaultConfig())
	})

	t.Run("changing clusterIP is refused and leaks nothing", func(t *testing.T) {
		a := a.with(t)
		// clusterIP is immutable in Kubernetes; a changed one must be refused and
		// must not leak the new address.
		r := a.patch(servicesPath+"/second", "application/merge-patch+json", `{"spec":{"clusterIP":"10.96.0.51","clusterIPs":["10.96.0.51"]}}`)
		r.wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "")
		if _, err := a.store.Get(allocIPPrefix + "10.96.0.51"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("refused update left 10.96.0.51 allocated: %v", err)
		}
		checkAllocations(t, a, validation.DefaultConfig())
	})
}

// TestExternalNameSwitch follows the Kubernetes e2e tests "should be able to change
// the type from ExternalName to ClusterIP" and back, with client-go's get-modify-put.
func TestExternalNameSwitch(t *testing.T) {
	a := newTestAPI(t)
	ext := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "external"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "foo.example.com"},
	}
	a.create(servicesPath, ext)
	if ext.Spec.ClusterIP != "" || len(ext.Spec.ClusterIPs) != 0 {
		t.Fatalf("ExternalName service got clusterIP %q %v", ext.Spec.ClusterIP, ext.Spec.ClusterIPs)
	}
	path := servicesPath + "/external"

	steps := []struct {
		name   string
		mutate func(*corev1.Service)
		check  func(t *testing.T, s *corev1.Service)
	}{
		{"ExternalName to ClusterIP", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeClusterIP
			s.Spec.ExternalName = ""
			s.Spec.Ports = []corev1.ServicePort{{Port: 80, Name: "http", Protocol: corev1.ProtocolTCP}}
		}, func(t *testing.T, s *corev1.Service) {
			if s.Spec.ClusterIP == "" {
				t.Errorf("no clusterIP after switching to ClusterIP")
			}
		}},
		{"ClusterIP to ExternalName", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "foo.example.com"
		}, func(t *testing.T, s *corev1.Service) {
			if s.Spec.ClusterIP != "" || len(s.Spec.ClusterIPs) != 0 {
				t.Errorf("clusterIP %q %v kept after switching to ExternalName", s.Spec.ClusterIP, s.Spec.ClusterIPs)
			}
		}},
		{"ExternalName to NodePort", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ExternalName = ""
			s.Spec.Ports = []corev1.ServicePort{{Port: 80, Name: "http", Protocol: corev1.ProtocolTCP}}
		}, func(t *testing.T, s *corev1.Service) {
			if s.Spec.ClusterIP == "" || s.Spec.Ports[0].NodePort == 0 {
				t.Errorf("clusterIP %q nodePort %d after switching to NodePort", s.Spec.ClusterIP, s.Spec.Ports[0].NodePort)
			}
		}},
		{"NodePort to ExternalName", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "foo.example.com"
		}, func(t *testing.T, s *corev1.Service) {
			if s.Spec.ClusterIP != "" || s.Spec.Ports[0].NodePort != 0 {
				t.Errorf("clusterIP %q nodePort %d kept after switching to ExternalName", s.Spec.ClusterIP, s.Spec.Ports[0].NodePort)
			}
		}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			a := a.with(t)
			var cur corev1.Service
			a.read(path, &cur)
			st.mutate(&cur)
			var got corev1.Service
			a.put(path, &cur).mustCode(t, 200, &got)
			st.check(t, &got)
			checkAllocations(t, a, validation.DefaultConfig())
		})
	}
}

func TestWellKnownClusterIPs(t *testing.T) {
	a := newTestAPI(t)
	var k corev1.Service
	a.read(servicesPath+"/kubernetes", &k)
	if k.Spec.ClusterIP != "10.96.0.1" {
		t.Errorf("default/kubernetes has clusterIP %s, want 10.96.0.1", k.Spec.ClusterIP)
	}
	dns := newService("kube-dns")
	dns.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP}}
	a.create("/api/v1/namespaces/kube-system/services", dns)
	if dns.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("kube-system/kube-dns got %s, want 10.96.0.10", dns.Spec.ClusterIP)
	}
	// The same name elsewhere gets no special treatment.
	other := newService("kube-dns")
	a.create(servicesPath, other)
	if other.Spec.ClusterIP == "10.96.0.10" {
		t.Errorf("default/kube-dns got the DNS address")
	}
	checkAllocations(t, a, validation.DefaultConfig())
}

// TestAllocationsSurviveRestart fills small ranges across a restart of the store
// and server: had the restarted server forgotten the first allocations, it would
// hand them out twice instead of running out.
func TestAllocationsSurviveRestart(t *testing.T) {
	cfg := validation.Config{
		ServiceCIDR: netip.MustParsePrefix("10.96.0.0/28"), // 14 hosts, .1 is default/kubernetes
		NodePortMin: 30000, NodePortMax: 30009,
	}
	a := newTestAPIWith(t, apiOptions{vcfg: cfg})
	for i := range 6 {
		a.create(servicesPath, newService(fmt.Sprintf("before-%d", i), nodePortType))
	}
	a.close()

	b := newTestAPIWith(t, apiOptions{vcfg: cfg, dbPath: a.dbPath})
	for i := range 4 {
		b.create(servicesPath, newService(fmt.Sprintf("after-%d", i), nodePortType))
	}
	// NodePorts are full (10 of 10).
	b.post(servicesPath, newService("one-port-too-many", nodePortType)).
		wantStatus(t, http.StatusInternalServerError, metav1.StatusReasonInternalError, "range is full")
	// ClusterIPs: 11 of 14 taken; three more fit, the fourth does not.
	for i := range 3 {
		b.create(servicesPath, newService(fmt.Sprintf("ip-%d", i)))
	}
	b.post(servicesPath, newService("one-ip-too-many")).
		wantStatus(t, http.StatusInternalServerError, metav1.StatusReasonInternalError, "range is full")
	checkAllocations(t, b, cfg)
}

// postStatus posts obj without failing the test, for use from other goroutines.
func postStatus(a *testAPI, path string, obj any) (int, string) {
	r, err := a.try(http.MethodPost, path, "", obj)
	if err != nil {
		return 0, err.Error()
	}
	return r.code, string(r.body)
}

// TestNodePortStaticBand: as in Kubernetes (KEP-3668), allocated NodePorts come
// from above the low band of the range while it has room, so a port a user
// picks there (the docs' 30007) is free; once the rest is full, the band is used.
func TestNodePortStaticBand(t *testing.T) {
	cfg := validation.DefaultConfig()
	cfg.NodePortMin, cfg.NodePortMax = 30000, 30099 // 100 ports: a band of 16
	a := newTestAPIWith(t, apiOptions{vcfg: cfg})
	for i := range 84 {
		svc := newService(fmt.Sprintf("dyn-%d", i), nodePortType)
		a.create(servicesPath, svc)
		if p := svc.Spec.Ports[0].NodePort; p < 30016 {
			t.Fatalf("service %d got nodePort %d, inside the static band 30000-30015", i, p)
		}
	}
	static := newService("static", nodePortType)
	static.Spec.Ports[0].NodePort = 30007
	a.create(servicesPath, static)
	svc := newService("overflow", nodePortType)
	a.create(servicesPath, svc)
	if p := svc.Spec.Ports[0].NodePort; p < 30000 || p >= 30016 || p == 30007 {
		t.Fatalf("with the dynamic part full, got nodePort %d; want a free one of the band", p)
	}
	checkAllocations(t, a, cfg)
}

// A LoadBalancer moving from externalTrafficPolicy Local to Cluster loses
// its healthCheckNodePort, which is released: the update that moves it back
// to Local may ask for the same port (the e2e "NodePort and
// HealthCheckNodePort ... when ExternalTrafficPolicy changes" spec does).
func TestHealthCheckNodePortFollowsTrafficPolicy(t *testing.T) {
	a := newTestAPI(t)
	svc := newService("lb", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	a.create(servicesPath, svc)
	hc := svc.Spec.HealthCheckNodePort
	if hc == 0 {
		t.Fatal("no healthCheckNodePort allocated for a Local LoadBalancer")
	}
	path := servicesPath + "/lb"

	// Decoded into a new value each time: fields the server cleared are
	// omitted from its answer.
	put := func(in *corev1.Service) *corev1.Service {
		t.Helper()
		out := &corev1.Service{}
		a.put(path, in).mustCode(t, http.StatusOK, out)
		return out
	}
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	svc = put(svc)
	if svc.Spec.HealthCheckNodePort != 0 {
		t.Fatalf("healthCheckNodePort %d kept with externalTrafficPolicy Cluster", svc.Spec.HealthCheckNodePort)
	}

	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	svc.Spec.HealthCheckNodePort = hc
	svc = put(svc)
	if svc.Spec.HealthCheckNodePort != hc {
		t.Errorf("healthCheckNodePort %d, want the requested %d", svc.Spec.HealthCheckNodePort, hc)
	}

	// Changing it while Cluster is still refused, naming the field.
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	svc.Spec.HealthCheckNodePort = hc + 1
	r := a.put(path, svc)
	if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "spec.healthCheckNodePort") {
		t.Errorf("setting healthCheckNodePort with Cluster policy: %d %s", r.code, r.body)
	}
}
