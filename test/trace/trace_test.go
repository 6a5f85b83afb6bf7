// Package trace_test checks `minikit trace` against the kernel (lab tier, test/README.md): in a
// two-node lab it traces every Service shape with --live and asserts that the
// path predicted from the node's real rules is the one a real connection
// takes (conntrack entry, counters) and reaches the pod it names.
package trace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/internal/trace"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

var ctx = context.Background()

func pod(name, nodeName, image string, labels map[string]string, cmd ...string) *corev1.Pod {
	c := corev1.Container{Name: "c", Image: image, Command: cmd}
	if image == "minikit/echo" {
		c.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{c}}}
}

func service(name string, sel map[string]string, mutate func(*corev1.ServiceSpec)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: sel,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if mutate != nil {
		mutate(&s.Spec)
	}
	return s
}

type env struct {
	t   *testing.T
	l   *lab.Lab
	c   kubernetes.Interface
	ips map[string]string // pod name -> IP
}

// trace runs `minikit trace ARGS -o json` and decodes the result.
func (e *env) trace(args ...string) (*trace.Result, error) {
	argv := append([]string{"trace", "--kubeconfig", e.l.Kubeconfig(), "--lab", e.l.Name(), "-o", "json", "--timeout", "2s"}, args...)
	cmd := exec.Command(testenv.Minikit(e.t), argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("minikit %s: %v: %s", strings.Join(argv, " "), err, stderr.String())
	}
	var res trace.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("decoding: %v: %s", err, stdout.String())
	}
	return &res, nil
}

// text runs `minikit trace ARGS` for its tree or dot output.
func (e *env) text(args ...string) (string, error) {
	argv := append([]string{"trace", "--kubeconfig", e.l.Kubeconfig(), "--lab", e.l.Name()}, args...)
	out, err := exec.Command(testenv.Minikit(e.t), argv...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("minikit %s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}

// until traces (live) until check accepts the result: the proxy and the
// endpoints controller converge a little after objects are created.
func (e *env) until(what string, check func(*trace.Result) error, args ...string) *trace.Result {
	e.t.Helper()
	var res *trace.Result
	testutil.Eventually(e.t, 60*time.Second, what, func() error {
		var err error
		if res, err = e.trace(args...); err != nil {
			return err
		}
		return check(res)
	})
	return res
}

func endpoints(res *trace.Result) string { return fmt.Sprint(res.Endpoints()) }

func (e *env) eps(pods ...string) string {
	var out []string
	for _, p := range pods {
		out = append(out, e.ips[p]+":8080")
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}

// taken is the path the live probe took, after checking that the kernel
// confirmed it.
func taken(res *trace.Result) (*trace.Path, error) {
	l := res.Live
	if l == nil {
		return nil, fmt.Errorf("no live section")
	}
	if !l.Confirmed || l.Path < 0 {
		return nil, fmt.Errorf("live probe not confirmed: path %d, notes %v, probe %s, error %q", l.Path, l.Notes, l.Probe, l.Error)
	}
	return &res.Paths[l.Path], nil
}

// accepted checks a confirmed ACCEPT: the probe reached the pod the path
// names (the echo server says pod=NAME), masqueraded as predicted.
func accepted(res *trace.Result, masq bool) (*trace.Path, error) {
	p, err := taken(res)
	if err != nil {
		return nil, err
	}
	if p.Verdict != "ACCEPT" || p.Endpoint == nil {
		return nil, fmt.Errorf("took %s to %s, endpoint %v", p.Verdict, p.Dst, p.Endpoint)
	}
	if !strings.Contains(res.Live.Reply, "pod="+p.Endpoint.Name+"\n") {
		return nil, fmt.Errorf("path names pod %s, the reply came from elsewhere: %q", p.Endpoint.Name, res.Live.Reply)
	}
	if p.Masquerade != masq || res.Live.Conntrack == nil || res.Live.Conntrack.SNAT() != masq {
		return nil, fmt.Errorf("masquerade: predicted %v, conntrack %v", p.Masquerade, res.Live.Conntrack)
	}
	if masq {
		// SNAT comes from mark 0x4000 (KUBE-MARK-MASQ) and KUBE-POSTROUTING's MASQUERADE.
		var marked, masqueraded bool
		for _, s := range p.Steps {
			marked = marked || (s.Chain == "KUBE-MARK-MASQ" && s.Mark == "0x4000")
			masqueraded = masqueraded || (s.Chain == "KUBE-POSTROUTING" && s.Masquerade)
		}
		if !marked || !masqueraded {
			return nil, fmt.Errorf("masqueraded path without mark 0x4000 (%v) or KUBE-POSTROUTING MASQUERADE (%v)", marked, masqueraded)
		}
	}
	return p, nil
}

// chains is the nat chains the packet went through before the routing
// decision, KUBE- prefix and hash dropped: "SERVICES>SVC>SEP".
func chains(p *trace.Path) string {
	var cs []string
	for _, s := range p.Steps {
		if s.Table != "nat" {
			break
		}
		if s.Rule > 0 && strings.HasPrefix(s.Chain, "KUBE-") {
			cs = append(cs, strings.SplitN(s.Chain, "-", 3)[1])
		}
	}
	return strings.Join(cs, ">")
}

func TestTraceServiceShapes(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	e := &env{t: t, l: l, c: c, ips: map[string]string{}}
	// Tracing only reads; the probes run in lab namespaces. The machine's
	// own network must be as it was (lab namespaces excluded).
	root := testenv.RootSnapshot(t, func(string) bool { return false })
	defer func() {
		if after := testenv.RootSnapshot(t, func(string) bool { return false }); after != root {
			t.Errorf("the root network namespace changed:\n--- before\n%s\n--- after\n%s", root, after)
		}
	}()
	node1, node2 := l.Addr("node1").String(), l.Addr("node2").String()
	client := l.Addr(lab.Client).String()

	for _, p := range []*corev1.Pod{
		pod("echo-a", "node1", "minikit/echo", map[string]string{"app": "echo", "where": "node1"}),
		pod("echo-b", "node2", "minikit/echo", map[string]string{"app": "echo", "where": "node2"}),
		pod("probe", "node1", "busybox", nil, "sleep", "infinity"),
	} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	one := map[string]string{"where": "node1"}
	both := map[string]string{"app": "echo"}
	svcs := []*corev1.Service{
		service("web", both, nil),
		service("self", one, nil),
		service("np", one, func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeNodePort }),
		service("npl", one, func(s *corev1.ServiceSpec) {
			s.Type, s.ExternalTrafficPolicy = corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal
		}),
		service("ext", one, func(s *corev1.ServiceSpec) { s.ExternalIPs, s.Ports[0].Port = []string{node2}, 8081 }),
		service("lb", both, func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeLoadBalancer }),
		service("lbsr", both, func(s *corev1.ServiceSpec) {
			s.Type, s.LoadBalancerSourceRanges = corev1.ServiceTypeLoadBalancer, []string{l.Addr(lab.External).String() + "/32"}
		}),
		service("aff", both, func(s *corev1.ServiceSpec) { s.SessionAffinity = corev1.ServiceAffinityClientIP }),
		service("none", map[string]string{"app": "nothing"}, nil),
		service("udp", one, func(s *corev1.ServiceSpec) {
			s.Ports[0].Name, s.Ports[0].Protocol, s.Ports[0].Port = "dns", corev1.ProtocolUDP, 53
		}),
	}
	for _, s := range svcs {
		if _, err := c.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"echo-a", "echo-b", "probe"} {
		e.ips[name] = testenv.WaitPodReady(t, c, "default", name).Status.PodIP
	}
	want := map[string]int{"web": 2, "self": 1, "np": 1, "npl": 1, "ext": 1, "lb": 2, "lbsr": 2, "aff": 2, "udp": 1}
	testutil.Eventually(t, 60*time.Second, "endpoints of every service", func() error {
		for s, n := range want {
			if got := testenv.ReadyEndpoints(c, "default", s); got != n {
				return fmt.Errorf("%s has %d ready endpoints, want %d", s, got, n)
			}
		}
		return nil
	})
	nodePort := func(name string) string {
		s, err := c.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(s.Spec.Ports[0].NodePort)
	}
	lbIP := func(name string) string {
		var ip string
		testutil.Eventually(t, 30*time.Second, "LoadBalancer IP of "+name, func() error {
			s, err := c.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
				return fmt.Errorf("no ingress IP yet (%v)", err)
			}
			ip = s.Status.LoadBalancer.Ingress[0].IP
			return nil
		})
		return ip
	}

	t.Run("ClusterIP from a pod: both endpoints, no SNAT", func(t *testing.T) {
		e.t = t
		e.until("traced and confirmed", func(r *trace.Result) error {
			if r.Node != "node1" || r.Hook != "PREROUTING" || endpoints(r) != e.eps("echo-a", "echo-b") {
				return fmt.Errorf("node %s hook %s endpoints %s", r.Node, r.Hook, endpoints(r))
			}
			for _, p := range r.Paths {
				if p.Probability != 0.5 || p.Masquerade || chains(&p) != "SERVICES>SVC>SEP" {
					return fmt.Errorf("path %s p=%v masq=%v chains %s", p.Dst, p.Probability, p.Masquerade, chains(&p))
				}
			}
			p, err := accepted(r, false)
			if err != nil {
				return err
			}
			// The route out: the local endpoint over the bridge, the other via node2.
			if (p.Endpoint.Node == "node1") != (p.Route != nil && p.Route.Kind == "bridge" && p.Route.Veth != "") ||
				(p.Endpoint.Node == "node2") != (p.Route != nil && p.Route.Kind == "node" && p.Route.Node == "node2") {
				return fmt.Errorf("route %+v for endpoint on %s", p.Route, p.Endpoint.Node)
			}
			return nil
		}, "pod/probe", "svc/web", "--live")
	})

	t.Run("ClusterIP from a node: OUTPUT, masqueraded (not from the pod CIDR)", func(t *testing.T) {
		e.t = t
		e.until("traced and confirmed", func(r *trace.Result) error {
			if r.Hook != "OUTPUT" || endpoints(r) != e.eps("echo-a", "echo-b") {
				return fmt.Errorf("hook %s endpoints %s", r.Hook, endpoints(r))
			}
			_, err := accepted(r, true)
			return err
		}, "node1", "svc/web", "--live")
	})

	t.Run("hairpin: a pod through its own Service is masqueraded", func(t *testing.T) {
		e.t = t
		e.until("traced and confirmed", func(r *trace.Result) error {
			p, err := accepted(r, true)
			if err != nil {
				return err
			}
			if p.Endpoint.Name != "echo-a" || chains(p) != "SERVICES>SVC>SEP>MARK>SEP" {
				return fmt.Errorf("reached %s via %s", p.Endpoint.Name, chains(p))
			}
			return nil
		}, "echo-a", "svc/self", "--live")
	})

	t.Run("NodePort, Cluster, via a node without the endpoint: SNAT and on to node1", func(t *testing.T) {
		e.t = t
		e.until("traced and confirmed", func(r *trace.Result) error {
			if r.Node != "node2" || r.To.Kind != "NodePort" {
				return fmt.Errorf("node %s kind %s", r.Node, r.To.Kind)
			}
			p, err := accepted(r, true)
			if err != nil {
				return err
			}
			if p.Route == nil || p.Route.Kind != "node" || p.Route.Node != "node1" || !strings.Contains(r.Live.Reply, "client_address="+node2+":") ||
				!strings.Contains(chains(p), "NODEPORTS>EXT>MARK>EXT>SVC>SEP") {
				return fmt.Errorf("route %+v, chains %s, reply %q", p.Route, chains(p), r.Live.Reply)
			}
			return nil
		}, "client", "node2:"+nodePort("np"), "--live")
	})

	npl := nodePort("npl")
	t.Run("NodePort, Local, on the endpoint's node: client address kept", func(t *testing.T) {
		e.t = t
		e.until("traced and confirmed", func(r *trace.Result) error {
			p, err := accepted(r, false)
			if err != nil {
				return err
			}
			if !strings.Contains(chains(p), "EXT>SVL>SEP") || !strings.Contains(r.Live.Reply, "client_address="+client+":") {
				return fmt.Errorf("chains %s reply %q", chains(p), r.Live.Reply)
			}
			return nil
		}, "client", node1+":"+npl, "--live")
	})

	t.Run("NodePort, Local, on a node without an endpoint: DROP, and why", func(t *testing.T) {
		e.t = t
		e.until("traced and confirmed", func(r *trace.Result) error {
			if len(r.Paths) != 1 {
				return fmt.Errorf("%d paths", len(r.Paths))
			}
			p, err := taken(r)
			if err != nil {
				return err
			}
			last := p.Steps[len(p.Steps)-1]
			if p.Verdict != "DROP" || last.Chain != "KUBE-EXTERNAL-SERVICES" || !strings.HasSuffix(last.Comment, "has no local endpoints") ||
				!strings.Contains(p.Why, "externalTrafficPolicy Local") || r.Live.Conntrack != nil || r.Live.Connected {
				return fmt.Errorf("verdict %s by %s (%q), why %q, conntrack %v", p.Verdict, last.Chain, last.Comment, p.Why, r.Live.Conntrack)
			}
			return nil
		}, "client", node2+":"+npl, "--live")
		tree, err := e.text("client", node2+":"+npl)
		if err != nil || !strings.Contains(tree, "=> DROP (100.0%): externalTrafficPolicy Local: node node2 has no ready endpoint of default/npl:http") {
			t.Errorf("tree (%v):\n%s", err, tree)
		}
		dot, err := e.text("client", node2+":"+npl, "-o", "dot")
		if err != nil || !strings.HasPrefix(dot, "digraph trace {") || !strings.Contains(dot, "fillcolor=salmon") {
			t.Errorf("dot (%v):\n%s", err, dot)
		}
	})

	t.Run("externalIPs: masqueraded to the endpoint", func(t *testing.T) {
		e.t = t
		e.until("traced and confirmed", func(r *trace.Result) error {
			if r.To.Kind != "external IP" || r.Node != "node2" {
				return fmt.Errorf("kind %s node %s", r.To.Kind, r.Node)
			}
			_, err := accepted(r, true)
			return err
		}, "client", node2+":8081", "--live")
	})

	t.Run("LoadBalancer IP from the client: the announcing node, SNAT", func(t *testing.T) {
		e.t = t
		ip := lbIP("lb")
		e.until("traced and confirmed", func(r *trace.Result) error {
			if r.To.Kind != "loadbalancer IP" || endpoints(r) != e.eps("echo-a", "echo-b") {
				return fmt.Errorf("kind %s endpoints %s", r.To.Kind, endpoints(r))
			}
			_, err := accepted(r, true)
			return err
		}, "client", ip+":80", "--live")
	})

	t.Run("LoadBalancer with source ranges: outside DROPped by KUBE-PROXY-FIREWALL, inside accepted", func(t *testing.T) {
		e.t = t
		ip := lbIP("lbsr")
		e.until("client dropped", func(r *trace.Result) error {
			p, err := taken(r)
			if err != nil {
				return err
			}
			if p.Verdict != "DROP" || p.Steps[len(p.Steps)-1].Chain != "KUBE-PROXY-FIREWALL" || r.Live.Connected {
				return fmt.Errorf("verdict %s by %s", p.Verdict, p.Steps[len(p.Steps)-1].Chain)
			}
			return nil
		}, "client", ip+":80", "--live")
		e.until("external accepted", func(r *trace.Result) error {
			p, err := accepted(r, true)
			if err != nil {
				return err
			}
			if !strings.Contains(chains(p), "FW>EXT") {
				return fmt.Errorf("chains %s", chains(p))
			}
			return nil
		}, "external", ip+":80", "--live")
	})

	t.Run("sessionAffinity ClientIP: the second trace predicts the remembered endpoint", func(t *testing.T) {
		e.t = t
		first := e.until("first probe", func(r *trace.Result) error {
			_, err := accepted(r, false)
			return err
		}, "probe", "svc/aff", "--live")
		reached := first.Live.Reached
		e.until("second probe", func(r *trace.Result) error {
			if len(r.Paths) != 1 || r.Paths[0].Dst != reached || r.Paths[0].Probability != 1 {
				return fmt.Errorf("paths %v, want only %s", r.Endpoints(), reached)
			}
			p, err := accepted(r, false)
			if err != nil {
				return err
			}
			if !strings.Contains(p.Steps[2].Text, "--rcheck") {
				return fmt.Errorf("third step %q is not the affinity check", p.Steps[2].Text)
			}
			return nil
		}, "probe", "svc/aff", "--live")
	})

	t.Run("no endpoints: REJECT, connection refused", func(t *testing.T) {
		e.t = t
		e.until("traced and confirmed", func(r *trace.Result) error {
			p, err := taken(r)
			if err != nil {
				return err
			}
			if p.Verdict != "REJECT" || !strings.Contains(r.Live.Error, "refused") || !strings.Contains(p.Why, "has no endpoints") {
				return fmt.Errorf("verdict %s, probe error %q, why %q", p.Verdict, r.Live.Error, p.Why)
			}
			return nil
		}, "pod/probe", "svc/none", "--live")
	})

	t.Run("UDP ClusterIP from a pod", func(t *testing.T) {
		e.t = t
		e.until("traced and confirmed", func(r *trace.Result) error {
			if r.Proto != "udp" {
				return fmt.Errorf("proto %s", r.Proto)
			}
			_, err := accepted(r, false)
			return err
		}, "pod/probe", "svc/udp", "--live")
	})

	// Last: it breaks the self Service on node1.
	t.Run("rules changed by hand: the trace reports the kernel, not the intent", func(t *testing.T) {
		e.t = t
		r, err := e.trace("pod/probe", "svc/self")
		if err != nil {
			t.Fatal(err)
		}
		svc := ""
		for _, s := range r.Paths[0].Steps {
			if strings.HasPrefix(s.Chain, "KUBE-SVC-") {
				svc = s.Chain
			}
		}
		if svc == "" {
			t.Fatalf("no KUBE-SVC chain on the path: %+v", r.Paths[0])
		}
		testutil.Eventually(t, 60*time.Second, "un-DNATed path through the flushed chain", func() error {
			// Flushed on every try: the proxy may repair it meanwhile.
			if out, err := testenv.Run(l, "node1", "iptables", "-t", "nat", "-F", svc); err != nil {
				return fmt.Errorf("flush: %v: %s", err, out)
			}
			r, err := e.trace("pod/probe", "svc/self", "--live")
			if err != nil {
				return err
			}
			p, err := taken(r)
			if err != nil {
				return err
			}
			if len(r.Paths) != 1 || p.DNAT || p.Dst != r.To.Addr.String() || !strings.Contains(p.Why, svc) || r.Live.Reached != r.To.Addr.String() {
				return fmt.Errorf("%d paths, DNAT %v to %s, why %q, reached %q", len(r.Paths), p.DNAT, p.Dst, p.Why, r.Live.Reached)
			}
			return nil
		})
	})
}
