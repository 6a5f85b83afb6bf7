// Package ui_test drives `minikit ui` in a real headless Chromium against a
// lab: the page must draw the lab's hosts and pods, follow a Deployment as it
// scales, draw the path of a trace exactly as `minikit trace` and
// topology.PathOf give it, and show bad input as errors.
package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/chromedp/chromedp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

var bg = context.Background()

// deploy makes Deployment and NodePort Service NAME of n serve_hostname pods.
func deploy(t testing.TB, c kubernetes.Interface, name string, n int32) *corev1.Service {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "serve", Image: "registry.k8s.io/serve_hostname",
					Ports: []corev1.ContainerPort{{ContainerPort: 9376}},
				}}},
			},
		},
	}
	if _, err := c.AppsV1().Deployments("default").Create(bg, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(9376)}}},
	}
	svc, err := c.CoreV1().Services("default").Create(bg, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func scale(t testing.TB, c kubernetes.Interface, name string, n int32) {
	t.Helper()
	if err := testenv.Scale(bg, c, "default", name, n); err != nil {
		t.Fatal(err)
	}
}

// runningPods are the Deployment's pods that have an IP, name -> IP.
func runningPods(c kubernetes.Interface, app string) (map[string]string, error) {
	pl, err := c.CoreV1().Pods("default").List(bg, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range pl.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			out[p.Name] = p.Status.PodIP
		}
	}
	return out, nil
}

// drawn says every pod of want is drawn with its IP, in the topology and in
// the Pods panel.
func drawn(ctx context.Context, want map[string]string) error {
	hs, err := pageHosts(ctx)
	if err != nil {
		return err
	}
	pods, err := pagePods(ctx)
	if err != nil {
		return err
	}
	for name, ip := range want {
		if !slices.ContainsFunc(hostsByKind(hs, "pod"), func(h domHost) bool {
			return strings.Contains(h.Text, "default/"+name) && strings.Contains(h.Text, ip)
		}) {
			return fmt.Errorf("pod default/%s (%s) is not drawn; pods drawn:\n%s", name, ip, describe(hostsByKind(hs, "pod")))
		}
		if !slices.ContainsFunc(pods, func(s string) bool { return strings.Contains(s, "default/"+name) && strings.Contains(s, ip) }) {
			return fmt.Errorf("pod default/%s (%s) is not in the Pods panel: %q", name, ip, pods)
		}
	}
	return nil
}

func TestUIInChromium(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	root := testenv.RootSnapshot(t, func(string) bool { return false })
	defer func() {
		if after := testenv.RootSnapshot(t, func(string) bool { return false }); after != root {
			t.Errorf("the root network namespace changed:\n--- before\n%s\n--- after\n%s", root, after)
		}
	}()
	svc := deploy(t, c, "web", 2)
	testutil.Eventually(t, 90*time.Second, "2 web pods with IPs", func() error {
		if ps, err := runningPods(c, "web"); err != nil || len(ps) != 2 {
			return fmt.Errorf("pods %v: %v", ps, err)
		}
		return nil
	})

	url := startUI(t, l)
	ctx := newBrowser(t)
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/")); err != nil {
		t.Fatalf("opening %s: %v", url, err)
	}

	// The lab's hosts, each with its name and address.
	testutil.Eventually(t, 30*time.Second, "the lab's hosts drawn", func() error {
		hs, err := pageHosts(ctx)
		if err != nil {
			return err
		}
		for _, h := range []struct{ kind, name string }{{"node", "node1"}, {"node", "node2"}, {"client", lab.Client}, {"external", lab.External}} {
			id, addr := lab.NS(l.Name(), h.name), l.Addr(h.name).String()
			if !slices.ContainsFunc(hs, func(d domHost) bool {
				return d.ID == id && d.Class == "host host-"+h.kind && strings.Contains(d.Text, h.name) && strings.Contains(d.Text, addr)
			}) {
				return fmt.Errorf("no host %s (class host host-%s, text with %s and %s) drawn:\n%s", id, h.kind, h.name, addr, describe(hs))
			}
		}
		if len(hostsByKind(hs, "underlay")) != 1 {
			return fmt.Errorf("no underlay drawn:\n%s", describe(hs))
		}
		return nil
	})
	t.Logf("first render: the lab's hosts drawn %v after the page was opened", time.Since(start).Round(time.Millisecond))

	// Every pod of the lab with its IP (the lab's own, kube-system's and
	// ingress', as well as the Deployment's).
	testutil.Eventually(t, 30*time.Second, "every pod drawn with its IP", func() error {
		pl, err := c.CoreV1().Pods("").List(bg, metav1.ListOptions{})
		if err != nil {
			return err
		}
		hs, err := pageHosts(ctx)
		if err != nil {
			return err
		}
		pods, err := pagePods(ctx)
		if err != nil {
			return err
		}
		n := 0
		for _, p := range pl.Items {
			if p.Spec.HostNetwork || p.Status.PodIP == "" {
				continue
			}
			n++
			key := p.Namespace + "/" + p.Name
			if !slices.ContainsFunc(hostsByKind(hs, "pod"), func(h domHost) bool {
				return strings.Contains(h.Text, key) && strings.Contains(h.Text, p.Status.PodIP)
			}) {
				return fmt.Errorf("pod %s (%s) is not drawn; pods drawn:\n%s", key, p.Status.PodIP, describe(hostsByKind(hs, "pod")))
			}
			if !slices.ContainsFunc(pods, func(s string) bool { return strings.Contains(s, key) && strings.Contains(s, p.Status.PodIP) }) {
				return fmt.Errorf("pod %s (%s) is not in the Pods panel: %q", key, p.Status.PodIP, pods)
			}
		}
		if n < 2 {
			return fmt.Errorf("only %d pods with an IP", n)
		}
		return nil
	})

	// Scaling to 5 adds the pods on the page; the latency is logged, not
	// asserted.
	scaled := time.Now()
	scale(t, c, "web", 5)
	var inAPI time.Duration
	testutil.Eventually(t, 90*time.Second, "5 web pods drawn", func() error {
		want, err := runningPods(c, "web")
		if err != nil {
			return err
		}
		if len(want) != 5 {
			return fmt.Errorf("%d web pods have an IP", len(want))
		}
		if inAPI == 0 {
			inAPI = time.Since(scaled)
		}
		return drawn(ctx, want)
	})
	t.Logf("update: scaled to 5 -> all 5 pods had an IP in the API after %v, were drawn on the page after %v",
		inAPI.Round(time.Millisecond), time.Since(scaled).Round(time.Millisecond))

	// A trace from the client to node1's NodePort highlights exactly the
	// hops of `minikit trace -o json`'s first path through topology.PathOf.
	testutil.Eventually(t, 60*time.Second, "5 ready endpoints", func() error {
		if n := testenv.ReadyEndpoints(c, "default", "web"); n != 5 {
			return fmt.Errorf("%d ready endpoints", n)
		}
		return nil
	})
	// The API's 5 ready endpoints are not yet the proxy's: trace until node1's
	// rules have all 5 (the proxy has synced the scale), so that the CLI's
	// trace and the page's read the same rules.
	to := fmt.Sprintf("node1:%d", svc.Spec.Ports[0].NodePort)
	var res trace.Result
	var out []byte
	testutil.Eventually(t, 60*time.Second, "node1's rules DNAT to all 5 endpoints", func() error {
		var err error
		out, err = exec.Command(testenv.Minikit(t), "trace", "--lab", l.Name(), "client", to, "-o", "json").CombinedOutput()
		if err != nil {
			return fmt.Errorf("minikit trace client %s: %v\n%s", to, err, out)
		}
		res = trace.Result{}
		if err := json.Unmarshal(out, &res); err != nil {
			return fmt.Errorf("minikit trace -o json: %v\n%s", err, out)
		}
		if eps := res.Endpoints(); len(eps) != 5 {
			return fmt.Errorf("the trace reaches %d endpoints: %v", len(eps), eps)
		}
		return nil
	})
	var cliPaths []string
	for _, p := range res.Paths {
		cliPaths = append(cliPaths, p.Verdict+" "+p.Dst)
	}
	hops := topology.PathOf(graphOf(t, url), &res, 0)
	if len(hops) == 0 {
		t.Fatalf("PathOf gave no hops for %s", out)
	}
	var want []string
	for _, h := range hops {
		if !slices.Contains(want, h.Element) {
			want = append(want, h.Element)
		}
	}
	slices.Sort(want)
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#trace-from"), "client"),
		chromedp.SetValue(chromedp.CSS("#trace-to"), to),
		chromedp.Click(chromedp.CSS("#trace-run")),
	); err != nil {
		t.Fatal(err)
	}
	// The page lists every branch of the probability hop in the CLI's order
	// (most probable first, then the KUBE-SEP rules' order) and highlights
	// the first, as the CLI prints it.
	testutil.Eventually(t, 30*time.Second, "the trace's paths listed and hops highlighted", func() error {
		paths, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#trace-result .path")].map(e => e.dataset.verdict + " " + e.dataset.dst)`))
		if err != nil {
			return err
		}
		if !slices.Equal(paths, cliPaths) {
			return fmt.Errorf("paths on the page:\n  %s\nwant (minikit trace -o json):\n  %s", strings.Join(paths, "\n  "), strings.Join(cliPaths, "\n  "))
		}
		got, err := pageHops(ctx)
		if err != nil {
			return err
		}
		slices.Sort(got)
		got = slices.Compact(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("hops on the page:\n  %s\nwant (minikit trace -o json through PathOf):\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		return nil
	})
	steps, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#trace-result .steps tr").length - 1`))
	if err != nil || steps != len(res.Paths[0].Steps) {
		t.Errorf("the trace panel lists %d steps (%v), minikit trace %d", steps, err, len(res.Paths[0].Steps))
	}
	screenshot(t, ctx, "ui-trace-client-nodeport.png")

	// With the live probe: one real connection from the client, and what
	// the kernel says about it beside the prediction.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#trace-live")),
		chromedp.Click(chromedp.CSS("#trace-run")),
	); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the live probe's result", func() error {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(e => e ? e.textContent : "")(document.querySelector("#trace-result .live"))`))
		if err != nil {
			return err
		}
		if !strings.Contains(text, "live probe tcp "+l.Addr(lab.Client).String()+":") || !strings.Contains(text, ": connected") {
			return fmt.Errorf("live probe shown as %q", text)
		}
		return nil
	})
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#trace-live"))); err != nil {
		t.Fatal(err)
	}

	// The Service's chain tree with counters.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#services li[data-svc="default/web"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the chain tree of default/web", func() error {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("chains").textContent`))
		if err != nil {
			return err
		}
		for _, w := range []string{"default/web on node1 (iptables)", "KUBE-SERVICES", "KUBE-SVC-", "KUBE-SEP-", "DNAT", "KUBE-NODEPORTS", "pkts"} {
			if !strings.Contains(text, w) {
				return fmt.Errorf("no %q in %q", w, text)
			}
		}
		return nil
	})

	// An Ingress is listed with its rules; its backend's chain tree is a
	// click away.
	pt := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
		Host: "web.example",
		IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
			Path: "/", PathType: &pt,
			Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}},
		}}}},
	}}}}
	if _, err := c.NetworkingV1().Ingresses("default").Create(bg, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the Ingress listed", func() error {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("ingresses").textContent`))
		if err != nil {
			return err
		}
		if !strings.Contains(text, "ingress default/web") || !strings.Contains(text, "web.example/ → default/web:80") {
			return fmt.Errorf("Ingresses panel: %q", text)
		}
		return nil
	})

	// A Gateway is listed beside it, with its listener and the HTTPRoute
	// attached to it, Accepted, with its rule and backend.
	rc, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gwclient.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	gwo := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: gatewayv1.GatewaySpec{GatewayClassName: "minikit",
		Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(bg, gwo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gwPort := gatewayv1.PortNumber(80)
	hr := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "web"}}},
			Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "web", Port: &gwPort}}}}}}}}
	if _, err := gw.GatewayV1().HTTPRoutes("default").Create(bg, hr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the Gateway and its route listed", func() error {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("gateways").textContent`))
		if err != nil {
			return err
		}
		for _, want := range []string{"gateway default/web minikit", "listener http HTTP/80 (1 routes)", "HTTPRoute default/web", "/ → default/web:80"} {
			if !strings.Contains(text, want) {
				return fmt.Errorf("Gateways panel lacks %q: %q", want, text)
			}
		}
		if strings.Contains(text, "no status") || strings.Contains(text, "not Accepted") {
			return fmt.Errorf("the route is not Accepted yet: %q", text)
		}
		return nil
	})
	// A trace to the Gateway's address shows the Gateway's part: the
	// route and the backend's pods, picked per request.
	var gwAddr string
	testutil.Eventually(t, 120*time.Second, "Gateway web has an address", func() error {
		g, err := gw.GatewayV1().Gateways("default").Get(bg, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(g.Status.Addresses) == 0 {
			return fmt.Errorf("no address: %+v", g.Status.Conditions)
		}
		gwAddr = g.Status.Addresses[0].Value
		return nil
	})
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#trace-from"), "client"),
		chromedp.SetValue(chromedp.CSS("#trace-to"), gwAddr+":80"),
		chromedp.Click(chromedp.CSS("#trace-run")),
	); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the trace to the Gateway shows its route and backend pods", func() error {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(e => e ? e.textContent : "")(document.querySelector("#trace-result .gateway-hop"))`))
		if err != nil {
			return err
		}
		if !strings.Contains(text, "gateway default/web") || !strings.Contains(text, "HTTPRoute default/web") || !strings.Contains(text, "picked per request") {
			return fmt.Errorf("trace result's gateway part: %q", text)
		}
		ps, err := runningPods(c, "web")
		if err != nil {
			return err
		}
		for name := range ps {
			if !strings.Contains(text, "default/"+name) {
				return fmt.Errorf("trace result's gateway part lacks pod %s: %q", name, text)
			}
		}
		return nil
	})

	// Bad input: the trace's own error on the page, 400 from the API.
	for _, tc := range []struct{ from, to, err string }{
		{"nosuchpod", to, `FROM "nosuchpod" is not a node, a lab host or an IP`},
		{"client", "svc/nosuchsvc", `services "nosuchsvc" not found`},
	} {
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS("#trace-from"), tc.from),
			chromedp.SetValue(chromedp.CSS("#trace-to"), tc.to),
			chromedp.Click(chromedp.CSS("#trace-run")),
		); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "the error of trace "+tc.from+" "+tc.to, func() error {
			shown, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(e => e.hidden ? "" : e.textContent)(document.getElementById("trace-error"))`))
			if err != nil {
				return err
			}
			if !strings.Contains(shown, tc.err) {
				return fmt.Errorf("trace error shown %q, want %q", shown, tc.err)
			}
			if hops, _ := pageHops(ctx); len(hops) != 0 {
				return fmt.Errorf("hops still highlighted: %v", hops)
			}
			return nil
		})
		code, body, err := httpGet(url+"/api/trace?from="+tc.from+"&to="+tc.to, nil)
		var e struct{ Error string }
		json.Unmarshal([]byte(body), &e)
		if err != nil || code != http.StatusBadRequest || !strings.Contains(e.Error, tc.err) {
			t.Errorf("GET /api/trace %s %s: %d %q %v, want 400 with %q", tc.from, tc.to, code, body, err, tc.err)
		}
	}
	screenshot(t, ctx, "ui-bad-input.png")

	// The page is read-only.
	req, _ := http.NewRequest("DELETE", url+"/api/graph", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /api/graph: %v %v, want 405", resp, err)
	}

	// The DNS panel: a lookup from a web pod with its search path.
	webPods, err := runningPods(c, "web")
	if err != nil {
		t.Fatal(err)
	}
	var from string
	for name := range webPods {
		from = "default/" + name
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#dns-panel summary")),
		chromedp.SetValue(chromedp.CSS("#dns-pod"), from),
		chromedp.SetValue(chromedp.CSS("#dns-name"), "web"),
		chromedp.Click(chromedp.CSS("#dns-run")),
	); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the DNS answer for web", func() error {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("dns-result").textContent + document.getElementById("dns-error").textContent`))
		if err != nil {
			return err
		}
		if !strings.Contains(text, "web.default.svc.cluster.local.") || !strings.Contains(text, svc.Spec.ClusterIP) || !strings.Contains(text, "NOERROR") {
			return fmt.Errorf("DNS panel: %q", text)
		}
		return nil
	})
}

// TestUIRefusals: an unknown lab is a clear error listing the labs; off
// loopback, a request without the lab's token gets 401, with it the page;
// a server off loopback without a token does not start.
func TestUIRefusals(t *testing.T) {
	l := testenv.NewLab(t, 1)
	out, err := exec.Command(testenv.Minikit(t), "ui", "--lab", "nosuchlab", "--listen", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `no lab "nosuchlab" on this machine`) || !strings.Contains(string(out), l.Name()) {
		t.Errorf("minikit ui --lab nosuchlab: %v: %s; want an error listing the labs (with %s)", err, out, l.Name())
	}
	empty := filepath.Join(t.TempDir(), "token")
	os.WriteFile(empty, nil, 0o600)
	out, err = exec.Command(testenv.Minikit(t), "ui", "--lab", l.Name(), "--listen", "0.0.0.0:0", "--token-file", empty).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is empty") {
		t.Errorf("minikit ui with an empty --token-file: %v: %s", err, out)
	}

	st, err := lab.Load(l.Name(), l.Dir())
	if err != nil {
		t.Fatal(err)
	}
	c := testenv.Client(t, l)
	cfg := ui.Config{Lab: st, Client: c, Source: topology.NewCollector(st, c, nil), PathOf: topology.PathOf,
		Listen: "0.0.0.0:7080", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := ui.New(cfg); err == nil || !strings.Contains(err.Error(), "needs the lab's API token") {
		t.Errorf("ui.New off loopback without a token: %v", err)
	}
	kc, err := clientcmd.LoadFromFile(l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	var token string
	for _, a := range kc.AuthInfos {
		token = a.Token
	}
	if token == "" {
		t.Fatal("the lab's kubeconfig has no token")
	}
	cfg.Token = token
	s, err := ui.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for _, tc := range []struct {
		name, auth string
		code       int
		body       string
	}{
		{"no token", "", http.StatusUnauthorized, "this request came without the lab's API token"},
		{"another token", "Bearer not-the-token", http.StatusUnauthorized, "not the lab's API token"},
		{"the lab's token", "Bearer " + token, http.StatusOK, `"id":"` + lab.NS(l.Name(), "node1") + `"`},
	} {
		r := httptest.NewRequest("GET", "/api/graph", nil)
		r.RemoteAddr = l.Addr(lab.Client).String() + ":40000"
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, w.Code, w.Body.String(), tc.code, tc.body)
		}
	}
}
