// Package topology_test checks `minikit lab graph` against a real lab: what
// it reports for every namespace of the lab and of its pods must be what
// iproute2 reports there, and the path it draws for a trace must be the
// one `minikit trace` gives.
package topology_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/internal/trace"
	"github.com/minikit/minikit/test/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

func TestLabGraph(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	ctx := context.Background()
	root := testenv.RootSnapshot(t, func(string) bool { return false })
	pods := deploy(t, c)
	np := nodePortService(t, c)
	// The cluster's own DNS pods are in the lab too, as in kubectl get pods -A.
	dnsPods := testenv.ClusterDNSPods(t, c)

	st, err := lab.Load(l.Name(), l.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var g topology.Graph
	out := minikit(t, "lab", "graph", "--name", l.Name(), "-o", "json")
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("lab graph -o json: %v\n%s", err, out)
	}

	t.Run("every namespace as ip -j shows it", func(t *testing.T) {
		want := slices.Clone(st.Namespaces)
		for _, p := range pods {
			want = append(want, testenv.SandboxName(t, c, p))
		}
		for _, p := range dnsPods {
			want = append(want, testenv.SandboxName(t, c, &p))
		}
		compareHosts(t, g, want)
	})

	t.Run("pods and nodes from the API", func(t *testing.T) {
		byID := map[string]topology.Host{}
		for _, h := range g.Hosts {
			byID[h.ID] = h
		}
		for _, p := range pods {
			h := byID[testenv.SandboxName(t, c, p)]
			if h.Kind != topology.KindPod || h.Name != "default/"+p.Name || h.Node != p.Spec.NodeName || h.Address != p.Status.PodIP ||
				h.Labels["app"] != "hostnames" || !strings.HasPrefix(h.Owner, "ReplicaSet/hostnames-") {
				t.Errorf("pod %s drawn as %+v", p.Name, h)
			}
		}
		for i, n := range []string{"node1", "node2"} {
			h := byID[lab.NS(l.Name(), n)]
			if h.Kind != topology.KindNode || h.Address != l.Addr(n).String() || h.PodCIDR != fmt.Sprintf("10.244.%d.0/24", i) {
				t.Errorf("%s drawn as %+v", n, h)
			}
		}
		svc := findService(g, "default", "hostnames")
		if svc == nil {
			t.Fatal("Service default/hostnames not in the graph")
		}
		var eps []string
		for _, p := range pods {
			eps = append(eps, testenv.SandboxName(t, c, p))
		}
		sort.Strings(eps)
		if !slices.Equal(svc.Endpoints, eps) || svc.Ports[0].NodePort != np || svc.Type != "NodePort" {
			t.Errorf("Service drawn as %+v, want endpoints %v, nodePort %d", svc, eps, np)
		}
	})

	t.Run("trace drawn as minikit trace gives it", func(t *testing.T) {
		to := fmt.Sprintf("node1:%d", np)
		var res trace.Result
		path := -1
		// The proxies write the NodePort's rules soon after its endpoints.
		testutil.Eventually(t, 30*time.Second, "a path of client -> "+to+" reaching node2", func() error {
			res = trace.Result{}
			if err := json.Unmarshal([]byte(minikit(t, "trace", "--lab", l.Name(), "client", to, "-o", "json")), &res); err != nil {
				return err
			}
			for i, p := range res.Paths {
				if p.Endpoint != nil && p.Endpoint.Node == "node2" {
					path = i
					return nil
				}
			}
			return fmt.Errorf("paths to %v", res.Endpoints())
		})
		var drawn struct {
			topology.Graph
			Hops []topology.Hop `json:"hops"`
		}
		args := []string{"lab", "graph", "--name", l.Name(), "--trace", "client", to, "--path", strconv.Itoa(path)}
		if err := json.Unmarshal([]byte(minikit(t, append(args, "-o", "json")...)), &drawn); err != nil {
			t.Fatal(err)
		}
		want := topology.PathOf(&drawn.Graph, &res, path)
		if !slices.Equal(drawn.Hops, want) {
			t.Fatalf("lab graph --trace drew\n%s\nPathOf of minikit trace -o json gives\n%s", hopsText(drawn.Hops), hopsText(want))
		}
		// The contract's shape: client, underlay, node1's rules, node1's
		// eth1, underlay, node2, its bridge, the veth, the pod.
		ns := func(h string) string { return lab.NS(l.Name(), h) }
		var hosts []string
		for _, h := range drawn.Hops {
			if h.Kind == "host" && (len(hosts) == 0 || hosts[len(hosts)-1] != h.Element) {
				hosts = append(hosts, h.Element)
			}
		}
		var endpoint string
		for _, p := range pods {
			if p.Name == res.Paths[path].Endpoint.Name {
				endpoint = testenv.SandboxName(t, c, p)
			}
		}
		if w := []string{ns("client"), ns("net"), ns("node1"), ns("net"), ns("node2"), endpoint}; !slices.Equal(hosts, w) {
			t.Errorf("hosts on the path %v, want %v", hosts, w)
		}
		labels := strings.Join(labelsAt(drawn.Hops, ns("node1")), "\n")
		for _, w := range []string{"DNAT to " + res.Paths[path].Dst, "MASQUERADE", "mark 0x4000"} {
			if !strings.Contains(labels, w) {
				t.Errorf("node1's hops lack %q:\n%s", w, labels)
			}
		}
		if n := len(drawn.Hops); drawn.Hops[n-3].Element != ns("node2")+"/cni0" || drawn.Hops[n-2].Kind != "link" {
			t.Errorf("the path does not end through node2's cni0 and the veth: %s", hopsText(drawn.Hops[n-3:]))
		}

		// The SVG highlights exactly those elements.
		svg := minikit(t, append(args, "-o", "svg")...)
		hop := hopClasses(t, svg)
		for _, h := range drawn.Hops {
			if !hop[h.Element] {
				t.Errorf("hop %s (%s) is not highlighted in the SVG", h.Element, h.Kind)
			}
		}
		for id := range hop {
			if labelsAt(drawn.Hops, id) == nil {
				t.Errorf("%s is highlighted but no hop", id)
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"lab", "graph", "--name", "mkt-graph-nosuch"}, `no lab "mkt-graph-nosuch" on this machine; labs: `},
			{[]string{"lab", "graph", "--name", l.Name(), "-o", "png"}, `invalid value "png" for -o/--output: allowed values are svg, dot, mermaid, json`},
			{[]string{"lab", "graph", "--name", l.Name(), "--trace", "pod/nosuch", "node1:" + strconv.Itoa(int(np))}, `pods "nosuch" not found`},
			{[]string{"lab", "graph", "--name", l.Name(), "--trace", "client", "svc/nosuch"}, `services "nosuch" not found`},
			{[]string{"lab", "graph", "--name", l.Name(), "--trace", "client"}, "--trace FROM TO takes TO as the one argument"},
		} {
			out, err := exec.Command(testenv.Minikit(t), tc.args...).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "panic") {
				t.Errorf("minikit %s: %v\n%s\nwant exit 1 and %q", strings.Join(tc.args, " "), err, out, tc.want)
			}
		}
		if !strings.Contains(mustFail(t, "lab", "graph", "--name", "mkt-graph-nosuch"), l.Name()) {
			t.Errorf("the error for a lab that does not exist does not list lab %s", l.Name())
		}
	})

	t.Run("ReadHost and a namespace that goes away", func(t *testing.T) {
		col := topology.NewCollector(st, c, nil)
		id := testenv.SandboxName(t, c, pods[0])
		h, links, err := col.ReadHost(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		compareHost(t, h)
		var eth0 string
		for _, i := range h.Interfaces {
			if i.Name == "eth0" {
				eth0 = i.ID
			}
		}
		if len(links) != 1 || links[0].Kind != "veth" || (links[0].A != eth0 && links[0].B != eth0) {
			t.Errorf("links of %s: %+v", id, links)
		}
		if _, _, err := col.ReadHost(ctx, "mkt-graph-nosuch"); err == nil || !strings.Contains(err.Error(), `no host "mkt-graph-nosuch"`) {
			t.Errorf("ReadHost of no host: %v", err)
		}
		// The pod's namespace disappears while the API still lists the pod
		// (as when a pod is being deleted): Collect leaves it out.
		gone := testenv.SandboxName(t, c, pods[len(pods)-1])
		if err := netns.DeleteNamed(gone); err != nil {
			t.Fatal(err)
		}
		g2, err := col.Collect(ctx)
		if err != nil {
			t.Fatalf("Collect with a pod's namespace gone: %v", err)
		}
		for _, h := range g2.Hosts {
			if h.ID == gone {
				t.Errorf("host %s is in the graph after its namespace went away", gone)
			}
		}
		if len(g2.Hosts) != len(g.Hosts)-1 {
			t.Errorf("%d hosts, want %d", len(g2.Hosts), len(g.Hosts)-1)
		}
		if _, _, err := col.ReadHost(ctx, gone); !errors.Is(err, topology.ErrGone) {
			t.Errorf("ReadHost of a namespace that went away: %v, want ErrGone", err)
		}
	})

	if after := testenv.RootSnapshot(t, func(string) bool { return false }); after != root {
		t.Errorf("the root network namespace changed:\n--- before\n%s\n--- after\n%s", root, after)
	}
}

func minikit(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(testenv.Minikit(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("minikit %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func mustFail(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(testenv.Minikit(t), args...).CombinedOutput()
	if err == nil {
		t.Errorf("minikit %s succeeded", strings.Join(args, " "))
	}
	return string(out)
}

// deploy runs a Deployment of 3 hostnames pods and returns them, Ready.
func deploy(t *testing.T, c kubernetes.Interface) []*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	three := int32(3)
	sel := map[string]string{"app": "hostnames"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hostnames"}, Spec: appsv1.DeploymentSpec{
		Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: sel},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "hostnames", Image: "registry.k8s.io/serve_hostname",
				Ports: []corev1.ContainerPort{{ContainerPort: 9376}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(9376)}},
					PeriodSeconds: 1}}}}}}}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	testutil.Eventually(t, 90*time.Second, "3 hostnames pods Ready on both nodes", func() error {
		pl, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hostnames"})
		if err != nil {
			return err
		}
		pods = nil
		nodes := map[string]bool{}
		for i := range pl.Items {
			p := &pl.Items[i]
			ready := false
			for _, cd := range p.Status.Conditions {
				ready = ready || (cd.Type == corev1.PodReady && cd.Status == corev1.ConditionTrue)
			}
			if !ready || p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s not ready", p.Name)
			}
			pods = append(pods, p)
			nodes[p.Spec.NodeName] = true
		}
		if len(pods) != 3 || len(nodes) != 2 {
			return fmt.Errorf("%d pods ready on %d nodes", len(pods), len(nodes))
		}
		return nil
	})
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods
}

// nodePortService exposes the pods and waits for its 3 endpoints.
func nodePortService(t *testing.T, c kubernetes.Interface) int32 {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hostnames"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "hostnames"},
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(9376), Protocol: corev1.ProtocolTCP}}}}
	created, err := c.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "3 endpoints of hostnames", func() error {
		if n := testenv.ReadyEndpoints(c, "default", "hostnames"); n != 3 {
			return fmt.Errorf("%d endpoints", n)
		}
		return nil
	})
	return created.Spec.Ports[0].NodePort
}

func findService(g topology.Graph, ns, name string) *topology.Service {
	for i := range g.Services {
		if g.Services[i].Namespace == ns && g.Services[i].Name == name {
			return &g.Services[i]
		}
	}
	return nil
}

func labelsAt(hops []topology.Hop, id string) []string {
	var out []string
	for _, h := range hops {
		if h.Element == id {
			out = append(out, h.Label)
		}
	}
	return out
}

func hopsText(hops []topology.Hop) string {
	var b strings.Builder
	for i, h := range hops {
		fmt.Fprintf(&b, "%2d %-9s %s  %s %s\n", i+1, h.Kind, h.Element, h.Label, h.Verdict)
	}
	return b.String()
}

// hopClasses is the data-id of every element of an SVG whose class marks
// it as a hop (links and interfaces "hop", hosts "hop-host").
func hopClasses(t *testing.T, svg string) map[string]bool {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	out := map[string]bool{}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		var id, cls string
		for _, a := range se.Attr {
			switch a.Name.Local {
			case "data-id":
				id = a.Value
			case "class":
				cls = a.Value
			}
		}
		if id == "" {
			continue
		}
		for _, c := range strings.Fields(cls) {
			if c == "hop" || c == "hop-host" {
				out[id] = true
			}
		}
	}
}
