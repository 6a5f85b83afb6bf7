package loadbalancer

import (
	"context"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// runController runs a controller with pool until the test ends or the
// returned stop is called.
func runController(t *testing.T, c kubernetes.Interface, pool string) (stop func()) {
	t.Helper()
	p, err := ParsePool(pool)
	if err != nil {
		t.Fatal(err)
	}
	ctrl := NewController(ControllerConfig{Client: c, Pool: p, Logger: testutil.Logger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	select {
	case <-ctrl.Ready():
	case err := <-done:
		t.Fatalf("controller stopped before ready: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("controller not ready")
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("controller: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestControllerAssignsFromPool(t *testing.T) {
	c := newAPI(t)
	runController(t, c, "192.168.56.240-192.168.56.242")
	createSvc(t, c, lbService("web"))
	waitIP(t, c, "web", "192.168.56.240")
	svc := getSvc(t, c, "web")
	ing := svc.Status.LoadBalancer.Ingress[0]
	if ing.IPMode == nil || *ing.IPMode != corev1.LoadBalancerIPModeVIP {
		t.Errorf("ipMode = %v, want VIP", ing.IPMode)
	}
	for _, p := range svc.Spec.Ports {
		if p.NodePort == 0 {
			t.Errorf("port %d has no nodePort; allocateLoadBalancerNodePorts defaults to true", p.Port)
		}
	}
	waitEvent(t, c, "web", "Normal EnsuredLoadBalancer: Ensured load balancer")
	evs := events(t, c, "web")
	want := []string{
		"Normal EnsuringLoadBalancer: Ensuring load balancer",
		`Normal IPAllocated: Assigned IP ["192.168.56.240"]`,
		"Normal EnsuredLoadBalancer: Ensured load balancer",
	}
	if strings.Join(evs, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(evs, "\n"), strings.Join(want, "\n"))
	}

	t.Run("allocateLoadBalancerNodePorts false: an address and no node ports", func(t *testing.T) {
		no := false
		createSvc(t, c, lbService("nonp", func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = &no }))
		waitIP(t, c, "nonp", "192.168.56.241")
		if np := getSvc(t, c, "nonp").Spec.Ports[0].NodePort; np != 0 {
			t.Errorf("nodePort %d allocated", np)
		}
	})
}

func TestControllerRequestedIP(t *testing.T) {
	c := newAPI(t)
	runController(t, c, "192.168.56.240/29") // .241-.246
	for _, tc := range []struct {
		name   string
		svc    string
		mod    func(*corev1.Service)
		wantIP string
		event  []string
	}{
		{"spec.loadBalancerIP in the pool", "inpool", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.168.56.245" }, "192.168.56.245", nil},
		{"metallb annotation", "annotated", func(s *corev1.Service) {
			s.Annotations = map[string]string{"metallb.universe.tf/loadBalancerIPs": "192.168.56.243"}
		}, "192.168.56.243", nil},
		{"annotation wins over spec.loadBalancerIP", "both", func(s *corev1.Service) {
			s.Annotations = map[string]string{"metallb.io/loadBalancerIPs": "192.168.56.244"}
			s.Spec.LoadBalancerIP = "192.168.56.246"
		}, "192.168.56.244", nil},
		{"outside the pool", "outside", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.1.2.3" }, "<pending>",
			[]string{"Warning AllocationFailed", "requested IP 10.1.2.3 (spec.loadBalancerIP) is not in the address pool 192.168.56.240/29"}},
		{"network address of the CIDR", "network", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.168.56.240" }, "<pending>",
			[]string{"Warning AllocationFailed", "not in the address pool"}},
		{"taken", "taken", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.168.56.245" }, "<pending>",
			[]string{"Warning AllocationFailed", "requested IP 192.168.56.245 (spec.loadBalancerIP) is already in use by Service default/"}},
		{"not an address", "notip", func(s *corev1.Service) {
			s.Annotations = map[string]string{"metallb.universe.tf/loadBalancerIPs": "web.example.com"}
		}, "<pending>", []string{"Warning AllocationFailed", `invalid annotation metallb.universe.tf/loadBalancerIPs: "web.example.com" is not an IP address`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.svc
			createSvc(t, c, lbService(name, tc.mod))
			if tc.event != nil {
				waitEvent(t, c, name, tc.event...)
			}
			waitIP(t, c, name, tc.wantIP)
		})
	}
	t.Run("pending for a taken IP gets it once the holder goes", func(t *testing.T) {
		if err := c.CoreV1().Services("default").Delete(context.Background(), "inpool", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitIP(t, c, "taken", "192.168.56.245")
	})
}

func TestControllerPoolExhaustion(t *testing.T) {
	c := newAPI(t)
	runController(t, c, "192.168.56.240-192.168.56.241")
	createSvc(t, c, lbService("a"))
	waitIP(t, c, "a", "192.168.56.240")
	createSvc(t, c, lbService("b"))
	waitIP(t, c, "b", "192.168.56.241")
	createSvc(t, c, lbService("c"))
	waitEvent(t, c, "c", "Warning AllocationFailed",
		`Failed to allocate IP for "default/c": no available IPs: all 2 addresses of the pool 192.168.56.240-192.168.56.241 are in use`)
	if ip := externalIP(getSvc(t, c, "c")); ip != "<pending>" {
		t.Fatalf("c got %s from an exhausted pool", ip)
	}

	t.Run("deleting another LoadBalancer Service frees its address", func(t *testing.T) {
		if err := c.CoreV1().Services("default").Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitIP(t, c, "c", "192.168.56.240")
		waitEvent(t, c, "c", "Normal EnsuredLoadBalancer")
	})

	t.Run("changing the type away from LoadBalancer frees the address", func(t *testing.T) {
		createSvc(t, c, lbService("d"))
		waitEvent(t, c, "d", "Warning AllocationFailed", "no available IPs")
		b := getSvc(t, c, "b")
		b.Spec.Type = corev1.ServiceTypeClusterIP
		if _, err := c.CoreV1().Services("default").Update(context.Background(), b, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitIP(t, c, "d", "192.168.56.241")
		waitEvent(t, c, "b", "Normal DeletedLoadBalancer")
		if got := externalIP(getSvc(t, c, "b")); got != "<pending>" {
			t.Errorf("ClusterIP Service b still shows %s", got)
		}
	})

	t.Run("and back to LoadBalancer: pending again, visibly", func(t *testing.T) {
		b := getSvc(t, c, "b")
		b.Spec.Type = corev1.ServiceTypeLoadBalancer
		if _, err := c.CoreV1().Services("default").Update(context.Background(), b, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, c, "b", "Warning AllocationFailed", "no available IPs")
	})
}

func TestControllerNoPool(t *testing.T) {
	c := newAPI(t)
	runController(t, c, "")
	createSvc(t, c, lbService("web"))
	waitEvent(t, c, "web", "Warning AllocationFailed", "no address pool is configured", "--lb-pool")
	if ip := externalIP(getSvc(t, c, "web")); ip != "<pending>" {
		t.Fatalf("got %s with no pool", ip)
	}
}

func TestControllerLeavesOtherClassesAlone(t *testing.T) {
	c := newAPI(t)
	runController(t, c, "192.168.56.240-192.168.56.241")
	other := "example.com/other-lb"
	createSvc(t, c, lbService("theirs", func(s *corev1.Service) { s.Spec.LoadBalancerClass = &other }))
	mine := Class
	createSvc(t, c, lbService("mine", func(s *corev1.Service) { s.Spec.LoadBalancerClass = &mine }))
	waitIP(t, c, "mine", "192.168.56.240")
	if got := externalIP(getSvc(t, c, "theirs")); got != "<pending>" {
		t.Errorf("Service of class %s got %s", other, got)
	}
	if evs := events(t, c, "theirs"); len(evs) != 0 {
		t.Errorf("events about another class's Service: %q", evs)
	}
}

// Allocations live in Service statuses only: a restarted controller keeps
// them, never gives one out twice, and settles a duplicate in favour of the
// older Service.
func TestControllerRestart(t *testing.T) {
	c := newAPI(t)
	const pool = "192.168.56.240-192.168.56.243"
	stop := runController(t, c, pool)
	createSvc(t, c, lbService("a"))
	waitIP(t, c, "a", "192.168.56.240")
	createSvc(t, c, lbService("b", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.168.56.242" }))
	waitIP(t, c, "b", "192.168.56.242")
	stop()

	// While no controller runs: a new Service, and a status written by hand
	// that duplicates a's address.
	createSvc(t, c, lbService("c"))
	time.Sleep(10 * time.Millisecond) // creation timestamps have second resolution; order by name breaks ties
	dup := createSvc(t, c, lbService("dup"))
	dup.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.56.240"}}
	if _, err := c.CoreV1().Services("default").UpdateStatus(context.Background(), dup, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	runController(t, c, pool)
	waitIP(t, c, "a", "192.168.56.240")
	waitIP(t, c, "b", "192.168.56.242")
	testutil.Eventually(t, waitTimeout, "c and dup get the two free addresses", func() error {
		got := map[string]bool{externalIP(getSvc(t, c, "c")): true, externalIP(getSvc(t, c, "dup")): true}
		if !got["192.168.56.241"] || !got["192.168.56.243"] {
			return errorf("c %s, dup %s", externalIP(getSvc(t, c, "c")), externalIP(getSvc(t, c, "dup")))
		}
		return nil
	})
	waitEvent(t, c, "dup", "IP 192.168.56.240 is also held by Service default/a, which had it first")
}

func TestParsePool(t *testing.T) {
	for _, tc := range []struct {
		in      string
		size    int
		in1     []string
		out     []string
		wantErr string
	}{
		{in: "192.168.56.240-192.168.56.250", size: 11, in1: []string{"192.168.56.240", "192.168.56.250"}, out: []string{"192.168.56.239", "192.168.56.251"}},
		{in: "192.168.56.240/28", size: 14, in1: []string{"192.168.56.241", "192.168.56.254"}, out: []string{"192.168.56.240", "192.168.56.255"}},
		{in: "10.0.0.1/32", size: 1, in1: []string{"10.0.0.1"}},
		{in: "10.0.0.0/31", size: 2, in1: []string{"10.0.0.0", "10.0.0.1"}},
		{in: "10.0.0.5-10.0.0.5, 10.0.1.0/30", size: 3, in1: []string{"10.0.0.5", "10.0.1.1", "10.0.1.2"}, out: []string{"10.0.1.0", "10.0.1.3"}},
		{in: "10.0.0.255-10.0.1.1", size: 3, in1: []string{"10.0.1.0"}},
		{in: "", size: 0, out: []string{"10.0.0.1"}},
		{in: "10.0.0.9-10.0.0.1", wantErr: "range ends before it starts"},
		// IPv6: a CIDR leaves out its first address (Subnet-Router anycast).
		{in: "fd00::/120", size: 255, in1: []string{"fd00::1", "fd00::ff"}, out: []string{"fd00::", "fd00::100", "10.0.0.1"}},
		{in: "fd00::/127", size: 2, in1: []string{"fd00::", "fd00::1"}},
		{in: "fd00:56::240-fd00:56::250", size: 17, in1: []string{"fd00:56::240", "fd00:56::24a", "fd00:56::250"}, out: []string{"fd00:56::251"}},
		{in: "fd00::/64", size: math.MaxInt, in1: []string{"fd00::ffff:ffff:ffff:ffff"}, out: []string{"fd00:0:0:1::"}},
		{in: "192.168.56.240-192.168.56.241, fd00:56::240/126", size: 5,
			in1: []string{"192.168.56.241", "fd00:56::241", "fd00:56::243"}, out: []string{"fd00:56::240", "192.168.56.242"}},
		{in: "0.0.0.0/30,::/126", size: 5}, // the same numbers in two families do not overlap
		{in: "10.0.0.1-fd00::1", wantErr: "range mixes IPv4 and IPv6"},
		{in: "::ffff:10.0.0.0/120", wantErr: "IPv4-mapped IPv6 address: write the IPv4 address 10.0.0.0"},
		{in: "fe80::1%eth1-fe80::9%eth1", wantErr: "has a zone"},
		{in: "fd00::/64,fd00::1-fd00::2", wantErr: "overlaps"},
		{in: "10.0.0.0/24,10.0.0.128/25", wantErr: "overlaps"},
		{in: "nonsense", wantErr: "want a CIDR or FIRST-LAST"},
	} {
		p, err := ParsePool(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParsePool(%q) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParsePool(%q): %v", tc.in, err)
			continue
		}
		if p.Size() != tc.size {
			t.Errorf("ParsePool(%q).Size() = %d, want %d", tc.in, p.Size(), tc.size)
		}
		for _, a := range tc.in1 {
			if !p.Contains(netip.MustParseAddr(a)) {
				t.Errorf("pool %q does not contain %s", tc.in, a)
			}
		}
		for _, a := range tc.out {
			if p.Contains(netip.MustParseAddr(a)) {
				t.Errorf("pool %q contains %s", tc.in, a)
			}
		}
	}
}
