package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The crash test's shape: per cycle, createsPerCycle concurrent creates from
// createWorkers goroutines, SIGKILL once killAfterAcks of them were acknowledged,
// restart, verify, then extraCreates more on the restarted server.
const (
	crashCycles     = 3
	createsPerCycle = 1000
	createWorkers   = 50
	killAfterAcks   = 400
	extraCreates    = 100
	probesPerKind   = 20
	nodePortMin     = 30000
	nodePortMax     = 32767
)

// serviceKinds are the Services the test creates, by name index modulo their count:
// half ClusterIP, a quarter NodePort with one port, a quarter with two.
var serviceKinds = []func(name string) *corev1.Service{
	func(name string) *corev1.Service {
		return newService(name, corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)})
	},
	func(name string) *corev1.Service {
		return newService(name, corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	},
	func(name string) *corev1.Service {
		return newService(name, corev1.ServiceTypeNodePort, corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(9376)})
	},
	func(name string) *corev1.Service {
		return newService(name, corev1.ServiceTypeNodePort,
			corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "https", Port: 443})
	},
}

func newService(name string, typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"e2e": "crash"}},
		Spec:       corev1.ServiceSpec{Type: typ, Selector: map[string]string{"app": name}, Ports: ports},
	}
}

// createResult is what one create request came back with.
type createResult struct {
	name  string
	acked *corev1.Service // the 201 body; nil when unacknowledged
	err   error           // transport error, expected once the server is killed
	code  int             // an HTTP status other than 201
	body  string
}

// createServices POSTs every service with a pool of workers, calling onAck after
// each acknowledgement (from the worker's goroutine).
func createServices(p *serverProc, svcs []*corev1.Service, workers int, onAck func(acked int64)) []createResult {
	url, token, c := p.URL+"/api/v1/namespaces/default/services", p.Token, p.Client
	results := make([]createResult, len(svcs))
	jobs := make(chan int)
	var acks atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				r := &results[i]
				r.name = svcs[i].Name
				body, err := json.Marshal(svcs[i])
				if err != nil {
					r.err = err
					continue
				}
				resp, b, err := doRequest(c, http.MethodPost, url, token, body)
				switch {
				case err != nil:
					r.err = err
				case resp.StatusCode != http.StatusCreated:
					r.code, r.body = resp.StatusCode, string(b)
				default:
					var got corev1.Service
					if err := json.Unmarshal(b, &got); err != nil {
						r.code, r.body = resp.StatusCode, "undecodable 201 body: "+string(b)
						continue
					}
					r.acked = &got
					if onAck != nil {
						onAck(acks.Add(1))
					}
				}
			}
		}()
	}
	for i := range svcs {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return results
}

// ledger is what the test knows about every Service it ever sent.
type ledger struct {
	sent  map[string]bool            // every name ever POSTed
	acked map[string]*corev1.Service // name -> the object the 201 carried
}

// checkComplete reports what is wrong with a stored Service: a ClusterIP in the
// service CIDR, mirrored in clusterIPs, and for NodePorts a nodePort on every port.
func checkComplete(svc *corev1.Service) []string {
	var probs []string
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || !serviceCIDR.Contains(ip) {
		probs = append(probs, fmt.Sprintf("clusterIP %q not in %s", svc.Spec.ClusterIP, serviceCIDR))
	}
	if !slices.Equal(svc.Spec.ClusterIPs, []string{svc.Spec.ClusterIP}) {
		probs = append(probs, fmt.Sprintf("clusterIPs %q do not match clusterIP %q", svc.Spec.ClusterIPs, svc.Spec.ClusterIP))
	}
	for i, port := range svc.Spec.Ports {
		switch {
		case svc.Spec.Type == corev1.ServiceTypeNodePort && (port.NodePort < nodePortMin || port.NodePort > nodePortMax):
			probs = append(probs, fmt.Sprintf("ports[%d].nodePort %d not in %d-%d", i, port.NodePort, nodePortMin, nodePortMax))
		case svc.Spec.Type == corev1.ServiceTypeClusterIP && port.NodePort != 0:
			probs = append(probs, fmt.Sprintf("ClusterIP service has ports[%d].nodePort %d", i, port.NodePort))
		}
	}
	if svc.UID == "" || svc.ResourceVersion == "" || svc.CreationTimestamp.IsZero() {
		probs = append(probs, fmt.Sprintf("metadata incomplete: uid %q resourceVersion %q creationTimestamp %v", svc.UID, svc.ResourceVersion, svc.CreationTimestamp))
	}
	return probs
}

func nodePorts(svc *corev1.Service) []int32 {
	var out []int32
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			out = append(out, p.NodePort)
		}
	}
	return out
}

func listServices(t *testing.T, p *serverProc) map[string]*corev1.Service {
	t.Helper()
	resp, body, err := p.do(http.MethodGet, "/api/v1/services", nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("listing services: %v %s", err, body)
	}
	var list corev1.ServiceList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("decoding service list: %v", err)
	}
	out := map[string]*corev1.Service{}
	for i := range list.Items {
		s := &list.Items[i]
		out[s.Namespace+"/"+s.Name] = s
	}
	return out
}

// verifyServices checks the server's Services against the ledger: acknowledged ones
// present and as acknowledged, every one complete, none unknown, no ClusterIP or
// NodePort owned twice. It returns how many unacknowledged creates were committed.
func verifyServices(t *testing.T, p *serverProc, l *ledger) (committedUnacked int) {
	t.Helper()
	all := listServices(t, p)
	for name, want := range l.acked {
		got := all["default/"+name]
		if got == nil {
			t.Errorf("acknowledged service %s is missing after restart", name)
			continue
		}
		if got.UID != want.UID || got.Spec.ClusterIP != want.Spec.ClusterIP || !slices.Equal(nodePorts(got), nodePorts(want)) {
			t.Errorf("service %s: stored uid %s clusterIP %s nodePorts %v; the 201 said uid %s clusterIP %s nodePorts %v",
				name, got.UID, got.Spec.ClusterIP, nodePorts(got), want.UID, want.Spec.ClusterIP, nodePorts(want))
		}
	}
	ipOwner, portOwner := map[string]string{}, map[int32]string{}
	for key, svc := range all {
		// The server's own Services (the API, cluster DNS, the Ingress controller)
		// are not part of the workload, but they take part in the uniqueness checks.
		name, builtin := strings.TrimPrefix(key, "default/"), !strings.HasPrefix(key, "default/") || key == "default/kubernetes"
		if !builtin && !l.sent[name] {
			t.Errorf("service %s exists but was never created", key)
		}
		if !builtin && l.acked[name] == nil {
			committedUnacked++
		}
		for _, prob := range checkComplete(svc) {
			t.Errorf("service %s is incomplete: %s", key, prob)
		}
		if prev, dup := ipOwner[svc.Spec.ClusterIP]; dup {
			t.Errorf("clusterIP %s is held by both %s and %s", svc.Spec.ClusterIP, prev, key)
		}
		ipOwner[svc.Spec.ClusterIP] = key
		for _, np := range nodePorts(svc) {
			if prev, dup := portOwner[np]; dup && prev != key {
				t.Errorf("nodePort %d is held by both %s and %s", np, prev, key)
			}
			portOwner[np] = key
		}
	}
	verifyIPAddresses(t, p, ipOwner)
	t.Logf("%d services, %d clusterIPs, %d nodePorts, %d committed without acknowledgement", len(all), len(ipOwner), len(portOwner), committedUnacked)
	return committedUnacked
}

// verifyIPAddresses checks the IPAddress objects the allocator writes with each
// ClusterIP (in the same transaction) agree with the Services: one per
// ClusterIP, naming its Service, and none left over.
func verifyIPAddresses(t *testing.T, p *serverProc, ipOwner map[string]string) {
	t.Helper()
	resp, body, err := p.do(http.MethodGet, "/apis/networking.k8s.io/v1/ipaddresses", nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("listing ipaddresses: %v %s", err, body)
	}
	var list networkingv1.IPAddressList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("decoding ipaddress list: %v", err)
	}
	seen := map[string]bool{}
	for _, ip := range list.Items {
		ref := ip.Spec.ParentRef
		owner := ipOwner[ip.Name]
		switch {
		case ref == nil || ref.Resource != "services":
			t.Errorf("IPAddress %s has parentRef %+v", ip.Name, ref)
		case owner == "":
			t.Errorf("IPAddress %s names %s/%s, which has no such ClusterIP", ip.Name, ref.Namespace, ref.Name)
		case owner != ref.Namespace+"/"+ref.Name:
			t.Errorf("IPAddress %s names %s/%s, but the ClusterIP is %s's", ip.Name, ref.Namespace, ref.Name, owner)
		}
		seen[ip.Name] = true
	}
	for ip, owner := range ipOwner {
		if !seen[ip] {
			t.Errorf("ClusterIP %s of %s has no IPAddress", ip, owner)
		}
	}
}

// probeAllocations asks for some in-use ClusterIPs and NodePorts explicitly: the
// allocation records must have survived with the objects, so each claim is refused.
func probeAllocations(t *testing.T, p *serverProc, cycle int, svcs []*corev1.Service) {
	t.Helper()
	var ips, nps int
	for i, owner := range svcs {
		if ips < probesPerKind {
			ips++
			probe := newService(fmt.Sprintf("probe-c%d-ip-%d", cycle, i), corev1.ServiceTypeClusterIP, corev1.ServicePort{Port: 80})
			probe.Spec.ClusterIP = owner.Spec.ClusterIP
			expectAllocationConflict(t, p, probe, "provided IP is already allocated", "clusterIP "+owner.Spec.ClusterIP+" of "+owner.Name)
		}
		if np := nodePorts(owner); len(np) > 0 && nps < probesPerKind {
			nps++
			probe := newService(fmt.Sprintf("probe-c%d-np-%d", cycle, i), corev1.ServiceTypeNodePort, corev1.ServicePort{Port: 80, NodePort: np[len(np)-1]})
			expectAllocationConflict(t, p, probe, "provided port is already allocated", fmt.Sprintf("nodePort %d of %s", np[len(np)-1], owner.Name))
		}
	}
	if ips < probesPerKind || nps < probesPerKind {
		t.Errorf("probed only %d clusterIPs and %d nodePorts; the cycle acknowledged too few services", ips, nps)
	}
}

func expectAllocationConflict(t *testing.T, p *serverProc, probe *corev1.Service, want, what string) {
	t.Helper()
	body, _ := json.Marshal(probe)
	resp, b, err := p.do(http.MethodPost, "/api/v1/namespaces/default/services", body)
	if err != nil {
		t.Fatalf("claiming %s: %v", what, err)
	}
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(b), want) {
		t.Errorf("claiming %s after restart: %s %s, want 422 %q", what, resp.Status, b, want)
	}
}

// TestKill9DuringConcurrentCreates kills the server with SIGKILL in the middle of a
// burst of concurrent Service creates and checks, after each restart, that every
// acknowledged create survived as acknowledged, nothing is half-written, and no
// ClusterIP or NodePort is handed out twice, then or after.
func TestKill9DuringConcurrentCreates(t *testing.T) {
	srv := startServer(t, t.TempDir())
	l := &ledger{sent: map[string]bool{}, acked: map[string]*corev1.Service{}}

	for cycle := range crashCycles {
		var svcs []*corev1.Service
		for i := range createsPerCycle {
			name := fmt.Sprintf("c%d-svc-%04d", cycle, i)
			svcs = append(svcs, serviceKinds[i%len(serviceKinds)](name))
			l.sent[name] = true
		}
		var killOnce sync.Once
		var killErr error
		start := time.Now()
		var killedAt time.Duration
		results := createServices(srv, svcs, createWorkers, func(acked int64) {
			if acked >= killAfterAcks {
				killOnce.Do(func() { killErr, killedAt = srv.sigkill(), time.Since(start) })
			}
		})
		if killErr != nil {
			t.Fatalf("cycle %d: SIGKILL: %v", cycle, killErr)
		}
		srv.waitKilled()

		var ackedNow, failed int
		var ackedSvcs []*corev1.Service
		for _, r := range results {
			switch {
			case r.acked != nil:
				ackedNow++
				l.acked[r.name] = r.acked
				ackedSvcs = append(ackedSvcs, r.acked)
				for _, prob := range checkComplete(r.acked) {
					t.Errorf("cycle %d: the 201 for %s carried an incomplete service: %s", cycle, r.name, prob)
				}
			case r.err != nil:
				failed++
			default:
				t.Errorf("cycle %d: create %s: HTTP %d %s", cycle, r.name, r.code, r.body)
			}
		}
		t.Logf("cycle %d: %d acknowledged, %d cut off; SIGKILL after %v", cycle, ackedNow, failed, killedAt.Round(time.Millisecond))
		if ackedNow < killAfterAcks || failed == 0 {
			t.Fatalf("cycle %d: %d acknowledged and %d cut off: the kill did not land partway through the burst", cycle, ackedNow, failed)
		}

		restartStart := time.Now()
		srv.restart()
		t.Logf("cycle %d: restarted in %v", cycle, time.Since(restartStart).Round(time.Millisecond))
		verifyServices(t, srv, l)
		sort.Slice(ackedSvcs, func(i, j int) bool { return ackedSvcs[i].Name < ackedSvcs[j].Name })
		probeAllocations(t, srv, cycle, ackedSvcs)

		// The restarted allocator must hand out only free values.
		var more []*corev1.Service
		for i := range extraCreates {
			name := fmt.Sprintf("c%d-after-%03d", cycle, i)
			more = append(more, serviceKinds[i%len(serviceKinds)](name))
			l.sent[name] = true
		}
		for _, r := range createServices(srv, more, 10, nil) {
			if r.acked == nil {
				t.Errorf("cycle %d: create %s after restart: err %v, HTTP %d %s", cycle, r.name, r.err, r.code, r.body)
				continue
			}
			l.acked[r.name] = r.acked
		}
		verifyServices(t, srv, l)
		if t.Failed() {
			t.FailNow()
		}
	}
}
