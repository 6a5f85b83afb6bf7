package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/internal/trace"
	"github.com/minikit/minikit/internal/ui"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestUIDualStack: in a dual-stack lab the page's graph carries both of a
// pod's podIPs, a node's InternalIPs and pod CIDRs and a Service's cluster
// IPs; a trace to the Service's IPv6 cluster IP follows IPv6 and its hops
// end at the pod; `lab graph` draws the IPv6 addresses and `lab status`
// prints each node's pod CIDRs of both families.
func TestUIDualStack(t *testing.T) {
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, IPFamily: lab.IPFamilyDual})
	c := testenv.Client(t, l)
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: "c", Image: "minikit/echo",
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}}}}}
	if _, err := c.CoreV1().Pods("default").Create(bg, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prefer := corev1.IPFamilyPolicyPreferDualStack
	svc, err := c.CoreV1().Services("default").Create(bg, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{IPFamilyPolicy: &prefer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("clusterIPs %v", svc.Spec.ClusterIPs)
	}
	p := testenv.WaitPodReady(t, c, "default", "web")
	var podIPs []string
	for _, ip := range p.Status.PodIPs {
		podIPs = append(podIPs, ip.IP)
	}
	if len(podIPs) != 2 || !netip.MustParseAddr(podIPs[1]).Is6() {
		t.Fatalf("podIPs %v", podIPs)
	}

	st, err := lab.Load(l.Name(), l.Dir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ui.New(ui.Config{Lab: st, Client: c, Source: topology.NewCollector(st, c, nil), PathOf: topology.PathOf,
		Listen: "127.0.0.1:0", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	get := func(target string, v any) error {
		r := httptest.NewRequest("GET", target, nil)
		r.RemoteAddr, r.Host = "127.0.0.1:5555", "127.0.0.1:7080"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			return fmt.Errorf("%s: %d %s", target, w.Code, w.Body.String())
		}
		return json.Unmarshal(w.Body.Bytes(), v)
	}
	podNS := ""
	testutil.Eventually(t, 60*time.Second, "the graph shows both families", func() error {
		var g topology.Graph
		if err := get("/api/graph", &g); err != nil {
			return err
		}
		var problems []string
		seen := 0
		for _, h := range g.Hosts {
			switch {
			case h.Kind == topology.KindNode:
				seen++
				if len(h.Addresses) != 2 || len(h.PodCIDRs) != 2 || !strings.Contains(h.PodCIDRs[1], ":") {
					problems = append(problems, h.Name+" addresses "+strings.Join(h.Addresses, ",")+" podCIDRs "+strings.Join(h.PodCIDRs, ","))
				}
			case h.Name == "default/web":
				seen++
				podNS = h.ID
				if !slices.Equal(h.Addresses, podIPs) {
					problems = append(problems, "pod addresses "+strings.Join(h.Addresses, ","))
				}
			}
		}
		for _, sv := range g.Services {
			if sv.ID == "svc:default/web" {
				seen++
				if !slices.Equal(sv.ClusterIPs, svc.Spec.ClusterIPs) {
					problems = append(problems, "service clusterIPs "+strings.Join(sv.ClusterIPs, ","))
				}
			}
		}
		if seen != 4 || len(problems) > 0 {
			return fmt.Errorf("saw %d of 2 nodes, the pod and the Service: %s", seen, strings.Join(problems, "; "))
		}
		return nil
	})

	// A trace to the IPv6 cluster IP from the client host (the page's TO
	// list offers [VIP6]:80): IPv6 rules, the pod's IPv6 address, hops over
	// the graph ending at the pod.
	var a struct {
		Result *trace.Result    `json:"result"`
		Hops   [][]topology.Hop `json:"hops"`
	}
	to := "[" + svc.Spec.ClusterIPs[1] + "]:80"
	testutil.Eventually(t, 60*time.Second, "a trace to "+to, func() error {
		if err := get("/api/trace?from=node1&to="+to, &a); err != nil {
			return err
		}
		if a.Result.Family != "IPv6" || len(a.Result.Paths) != 1 || a.Result.Paths[0].Dst != "["+podIPs[1]+"]:8080" {
			b, _ := json.Marshal(a.Result)
			return fmt.Errorf("trace: %s", b)
		}
		if len(a.Hops) != 1 || !slices.ContainsFunc(a.Hops[0], func(h topology.Hop) bool { return h.Element == podNS }) {
			return fmt.Errorf("hops do not reach the pod %s: %+v", podNS, a.Hops)
		}
		return nil
	})

	out, err := exec.Command(testenv.Minikit(t), "lab", "graph", "--name", l.Name(), "--dir", l.Dir()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), podIPs[1]) || !strings.Contains(string(out), svc.Spec.ClusterIPs[1]) {
		t.Errorf("lab graph does not draw the pod's and the Service's IPv6 addresses: %v\n%.2000s", err, out)
	}
	out, err = exec.Command(testenv.Minikit(t), "lab", "status", "--name", l.Name(), "--dir", l.Dir()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pods 10.244.1.0/24 fd00:10:244:") {
		t.Errorf("lab status does not print node2's pod CIDRs of both families: %v\n%s", err, out)
	}
}
