// Package netpol_test proves NetworkPolicy end to end in a 2-node lab, the way
// the upstream netpol e2e specs do: 3 namespaces (x, y, z) of 3 agnhost porter
// pods (a, b, c) spread over both nodes, each behind a Service, probed from every
// pod to every pod by pod IP and by ClusterIP, over TCP and UDP, with
// `/agnhost connect` run through the API server's exec (exit code = verdict).
// Each case compares the observed truth table with the expected one, polling
// until they agree or a deadline passes, and prints both tables when they do not.
package netpol_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

var ctx = context.Background()

const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"

// nsLabel is the label every namespace carries (upstream sets it; so does minikit).
const nsLabel = "kubernetes.io/metadata.name"

var (
	namespaces = []string{"x", "y", "z"}
	podNames   = []string{"a", "b", "c"}
)

// pod is one of the 9 probed pods.
type pod struct {
	ns, name, node string
	ip, svcIP      string
}

func (p *pod) String() string { return p.ns + "/" + p.name }

// probe is one kind of connection tried from every pod to every pod.
type probe struct {
	proto string // tcp or udp
	port  int
}

func (p probe) String() string { return fmt.Sprintf("%s/%d", strings.ToUpper(p.proto), p.port) }

var (
	tcp80 = probe{"tcp", 80}
	tcp81 = probe{"tcp", 81}
	udp81 = probe{"udp", 81}
)

// env is a lab with the 9 pods and their Services.
type env struct {
	l    *lab.Lab
	c    kubernetes.Interface
	rc   *rest.Config
	pods []*pod
}

// newEnv brings up a 2-node lab and the x, y, z namespaces with pods a, b, c
// (serving TCP and UDP on 80 and 81, ports named serve-PORT-PROTO as upstream),
// alternating between node1 and node2, each with a Service of its own.
func newEnv(t *testing.T) *env {
	t.Helper()
	l := testenv.NewLab(t, 2)
	rc, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 200, 400
	e := &env{l: l, c: testenv.Client(t, l), rc: rc}
	i := 0
	for _, ns := range namespaces {
		if _, err := e.c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, name := range podNames {
			p := &pod{ns: ns, name: name, node: fmt.Sprintf("node%d", i%2+1)}
			i++
			e.createPod(t, p)
			e.pods = append(e.pods, p)
		}
	}
	for _, p := range e.pods {
		p.ip = testenv.WaitPodReady(t, e.c, p.ns, p.name).Status.PodIP
	}
	// Every Service has its endpoint before any probe: a missing endpoint would
	// look like a denial.
	for _, p := range e.pods {
		testutil.Eventually(t, 30*time.Second, "Service "+p.String()+" has its endpoint", func() error {
			if n := testenv.ReadyEndpoints(e.c, p.ns, "s-"+p.name); n != 1 {
				return fmt.Errorf("%d ready endpoints", n)
			}
			return nil
		})
	}
	return e
}

func (e *env) createPod(t *testing.T, p *pod) {
	t.Helper()
	var ports []corev1.ContainerPort
	var svcPorts []corev1.ServicePort
	env := []corev1.EnvVar{}
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		for _, port := range []int32{80, 81} {
			name := fmt.Sprintf("serve-%d-%s", port, strings.ToLower(string(proto)))
			ports = append(ports, corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: proto})
			svcPorts = append(svcPorts, corev1.ServicePort{Name: fmt.Sprintf("%s-%d", strings.ToLower(string(proto)), port),
				Port: port, Protocol: proto, TargetPort: intstr.FromString(name)})
			key := fmt.Sprintf("SERVE_PORT_%d", port)
			if proto == corev1.ProtocolUDP {
				key = fmt.Sprintf("SERVE_UDP_PORT_%d", port)
			}
			env = append(env, corev1.EnvVar{Name: key, Value: "foo"})
		}
	}
	labels := map[string]string{"pod": p.name}
	po := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: labels}, Spec: corev1.PodSpec{
		NodeName: p.node, TerminationGracePeriodSeconds: new(int64),
		Containers: []corev1.Container{{Name: "c", Image: agnhost, Args: []string{"porter"}, Env: env, Ports: ports}}}}
	if _, err := e.c.CoreV1().Pods(p.ns).Create(ctx, po, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s-" + p.name},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: svcPorts}}
	s, err := e.c.CoreV1().Services(p.ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.svcIP = s.Spec.ClusterIP
}

// exec runs argv in a pod's container through the API server, as kubectl exec
// does, and returns its exit code (-1 with an error when the exec itself failed).
func (e *env) exec(ctx context.Context, p *pod, argv ...string) (int, string, error) {
	req := e.c.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.ns).Name(p.name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "c", Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(e.rc, http.MethodPost, req.URL())
	if err != nil {
		return -1, "", err
	}
	var out testenv.Buffer // stdout and stderr are copied concurrently
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
	if ee, ok := err.(utilexec.ExitError); ok {
		return ee.ExitStatus(), out.String(), nil
	}
	if err != nil {
		return -1, out.String(), err
	}
	return 0, out.String(), nil
}

// verdict of one probe: allowed, denied, or not known (the exec failed).
type verdict byte

const (
	allowed verdict = '.'
	denied  verdict = 'X'
	unknown verdict = '?'
	ignored verdict = '-'
)

// connect tries one connection from a pod to addr with agnhost connect.
func (e *env) connect(from *pod, pr probe, addr string) (verdict, string) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	code, out, err := e.exec(cctx, from, "/agnhost", "connect", fmt.Sprintf("%s:%d", addr, pr.port), "--timeout=1s", "--protocol="+pr.proto)
	switch {
	case err != nil:
		return unknown, err.Error()
	case code == 0:
		return allowed, out
	default:
		return denied, out
	}
}

// via says how a probe addresses its target.
type via string

const (
	byPodIP     via = "pod IP"
	byClusterIP via = "ClusterIP"
)

// table is a truth table: from pod × to pod.
type table map[[2]*pod]verdict

// expectation says whether a connection is allowed.
type expectation func(from, to *pod, pr probe) bool

// expected is the table an expectation draws. A pod reaching itself by its own
// IP never leaves its namespace (always allowed); reaching itself through its
// Service is hairpin traffic whose fate Kubernetes leaves to the implementation.
func (e *env) expected(allow expectation, pr probe, v via) table {
	t := table{}
	for _, from := range e.pods {
		for _, to := range e.pods {
			switch {
			case from == to && v == byClusterIP:
				t[[2]*pod{from, to}] = ignored
			case from == to || allow(from, to, pr):
				t[[2]*pod{from, to}] = allowed
			default:
				t[[2]*pod{from, to}] = denied
			}
		}
	}
	return t
}

// observe probes every pair in parallel.
func (e *env) observe(pr probe, v via, skip table) (table, map[[2]*pod]string) {
	t, why := table{}, map[[2]*pod]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, from := range e.pods {
		for _, to := range e.pods {
			k := [2]*pod{from, to}
			if skip[k] == ignored {
				mu.Lock()
				t[k] = ignored
				mu.Unlock()
				continue
			}
			addr := to.ip
			if v == byClusterIP {
				addr = to.svcIP
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				r, out := e.connect(from, pr, addr)
				<-sem
				mu.Lock()
				t[k], why[k] = r, strings.TrimSpace(out)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return t, why
}

// render prints a table as upstream's netpol tests do: rows are the sources,
// columns the destinations, '.' allowed, 'X' denied.
func (e *env) render(t table) string {
	var b strings.Builder
	b.WriteString("from\\to")
	for _, to := range e.pods {
		fmt.Fprintf(&b, " %s", to)
	}
	b.WriteString("\n")
	for _, from := range e.pods {
		fmt.Fprintf(&b, "%-7s", from)
		for _, to := range e.pods {
			fmt.Fprintf(&b, "  %c ", t[[2]*pod{from, to}])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// diff returns the pairs where two tables disagree.
func diff(want, got table) [][2]*pod {
	var d [][2]*pod
	for k, w := range want {
		if w != ignored && got[k] != w {
			d = append(d, k)
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i][0].String()+d[i][1].String() < d[j][0].String()+d[j][1].String() })
	return d
}

// expect polls until every probe's observed tables (by pod IP and by ClusterIP)
// equal the expected ones, and fails the test with both tables otherwise.
func (e *env) expect(t *testing.T, what string, allow expectation, probes ...probe) {
	t.Helper()
	if len(probes) == 0 {
		probes = []probe{tcp80, udp81}
	}
	deadline := time.Now().Add(45 * time.Second)
	start := time.Now()
	for attempt := 1; ; attempt++ {
		var report strings.Builder
		for _, pr := range probes {
			for _, v := range []via{byPodIP, byClusterIP} {
				want := e.expected(allow, pr, v)
				got, why := e.observe(pr, v, want)
				if d := diff(want, got); len(d) > 0 {
					fmt.Fprintf(&report, "\n%s by %s: %d of %d cells differ\nexpected:\n%sobserved:\n%s", pr, v, len(d), len(want), e.render(want), e.render(got))
					for _, k := range d[:min(len(d), 5)] {
						fmt.Fprintf(&report, "  %s -> %s: %c, agnhost said %q\n", k[0], k[1], got[k], why[k])
					}
				}
			}
		}
		if report.Len() == 0 {
			t.Logf("%s: %d probe kinds × 2 matched after %d round(s), %v", what, len(probes), attempt, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: the truth tables do not match after %d rounds (%v):%s", what, attempt, time.Since(start).Round(time.Second), report.String())
			return
		}
	}
}

// allowAll is the expectation without any policy.
func allowAll(from, to *pod, pr probe) bool { return true }

// apply creates a NetworkPolicy, or updates it if it exists.
func (e *env) apply(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	cur, err := e.c.NetworkingV1().NetworkPolicies(np.Namespace).Get(ctx, np.Name, metav1.GetOptions{})
	if err == nil {
		np.ResourceVersion = cur.ResourceVersion
		_, err = e.c.NetworkingV1().NetworkPolicies(np.Namespace).Update(ctx, np, metav1.UpdateOptions{})
	} else {
		_, err = e.c.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("applying NetworkPolicy %s/%s: %v", np.Namespace, np.Name, err)
	}
}

// clear deletes every NetworkPolicy of the test's namespaces.
func (e *env) clear(t *testing.T) {
	t.Helper()
	for _, ns := range namespaces {
		if err := e.c.NetworkingV1().NetworkPolicies(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatalf("deleting the NetworkPolicies of %s: %v", ns, err)
		}
	}
}

// label sets (or with value "" removes) a label on a pod.
func (e *env) label(t *testing.T, p *pod, key, value string) {
	t.Helper()
	v := "null"
	if value != "" {
		v = `"` + value + `"`
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
	if _, err := e.c.CoreV1().Pods(p.ns).Patch(ctx, p.name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("labelling %s: %v", p, err)
	}
}

func (e *env) pod(ns, name string) *pod {
	for _, p := range e.pods {
		if p.ns == ns && p.name == name {
			return p
		}
	}
	panic("no pod " + ns + "/" + name)
}

// Policy builders, in the spirit of upstream's netpol helpers.

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func policy(ns, name string, podSelector *metav1.LabelSelector, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *podSelector, PolicyTypes: types}}
}

func ingress(np *networkingv1.NetworkPolicy, ports []networkingv1.NetworkPolicyPort, from ...networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
	np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: from, Ports: ports})
	return np
}

func egress(np *networkingv1.NetworkPolicy, ports []networkingv1.NetworkPolicyPort, to ...networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
	np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: to, Ports: ports})
	return np
}

func nsPeer(ns string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: sel(nsLabel, ns)}
}

func podPeer(kv ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: sel(kv...)}
}

func port(proto corev1.Protocol, p intstr.IntOrString, end int32) networkingv1.NetworkPolicyPort {
	np := networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &p}
	if end != 0 {
		np.EndPort = &end
	}
	return np
}
