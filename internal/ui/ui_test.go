package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables/iptsim"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/internal/trace"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// fakeSource is a lab whose hosts are set by the test; ReadHost of a host
// it does not hold fails as the collector's does for a pod gone.
type fakeSource struct {
	mu    sync.Mutex
	g     topology.Graph
	reads []string
	// gate, when set, holds Collect after it has read the lab (a slow
	// read of a big lab) until the test closes it; collecting is told
	// when it is held.
	gate       chan struct{}
	collecting chan struct{}
}

func (f *fakeSource) Collect(context.Context) (*topology.Graph, error) {
	f.mu.Lock()
	g := f.g
	g.Hosts = append([]topology.Host(nil), f.g.Hosts...)
	g.Links = append([]topology.Link(nil), f.g.Links...)
	gate, collecting := f.gate, f.collecting
	f.mu.Unlock()
	if gate != nil {
		collecting <- struct{}{}
		<-gate
	}
	return &g, nil
}

func (f *fakeSource) ReadHost(_ context.Context, id string) (topology.Host, []topology.Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads = append(f.reads, id)
	for _, h := range f.g.Hosts {
		if h.ID == id {
			var ls []topology.Link
			for _, l := range f.g.Links {
				if hostOf(l.A) == id || hostOf(l.B) == id {
					ls = append(ls, l)
				}
			}
			return h, ls, nil
		}
	}
	return topology.Host{}, nil, fmt.Errorf("reading %s: %w", id, topology.ErrGone)
}

func (f *fakeSource) put(h topology.Host, ls ...topology.Link) {
	f.mu.Lock()
	defer f.mu.Unlock()
	putHost(&f.g, h, ls)
}

func (f *fakeSource) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	removeHost(&f.g, id)
}

const prefix = "mk-abc123-"

func labGraph() topology.Graph {
	return topology.Graph{Lab: "gu", Hosts: []topology.Host{
		{ID: "gu-net", Kind: topology.KindUnderlay, Name: "net", Interfaces: []topology.Interface{{ID: "gu-net/br0", Name: "br0", Kind: "bridge"}, {ID: "gu-net/v1", Name: "v1", Kind: "veth", Master: "br0", PeerID: "gu-node1/eth1"}}},
		{ID: "gu-node1", Kind: topology.KindNode, Name: "node1", Address: "192.168.56.11", Interfaces: []topology.Interface{{ID: "gu-node1/eth1", Name: "eth1", Kind: "veth", PeerID: "gu-net/v1"}, {ID: "gu-node1/cni0", Name: "cni0", Kind: "bridge"}}},
	}, Links: []topology.Link{
		{ID: "gu-net/v1--gu-node1/eth1", Kind: "veth", A: "gu-net/v1", B: "gu-node1/eth1"},
		{ID: "gu-net/v1--gu-net/br0", Kind: "bridge", A: "gu-net/v1", B: "gu-net/br0"},
	}}
}

func podHost(uid types.UID, name, ip string) (topology.Host, topology.Link) {
	id, _ := kubelet.PodSandboxName(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{kubelet.AnnotationNetNSPrefix: prefix}}}, uid)
	return topology.Host{ID: id, Kind: topology.KindPod, Name: "default/" + name, Node: "node1", Address: ip,
			Interfaces: []topology.Interface{{ID: id + "/eth0", Name: "eth0", Kind: "veth", PeerID: "gu-node1/veth" + name}}},
		topology.Link{ID: id + "/eth0--gu-node1/veth" + name, Kind: "veth", A: id + "/eth0", B: "gu-node1/veth" + name}
}

func fakePathOf(g *topology.Graph, r *trace.Result, path int) []topology.Hop {
	return []topology.Hop{{Element: "gu-node1", Kind: "host", Label: fmt.Sprintf("path %d of %d hosts", path, len(g.Hosts))}}
}

func newTestServer(t *testing.T, src Source, cfg Config) (*Server, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{kubelet.AnnotationNetNSPrefix: prefix}}})
	cfg.Lab = lab.State{Name: "gu", Dir: t.TempDir()}
	cfg.Client, cfg.Source = client, src
	cfg.PathOf = fakePathOf
	cfg.Debounce = time.Millisecond
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return s, client
}

func TestGuard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page") })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	onLoopback := guard(ok, guardConfig{token: "s3cret", loopbackListen: true, listen: "127.0.0.1:7080", log: log})
	offLoopback := guard(ok, guardConfig{token: "s3cret", loopbackListen: false, listen: "0.0.0.0:7080", log: log})
	for _, tc := range []struct {
		name    string
		h       http.Handler
		method  string
		remote  string
		host    string
		target  string
		header  map[string]string
		code    int
		body    string
		cookie  bool
		locates string
	}{
		{name: "loopback", h: onLoopback, remote: "127.0.0.1:5555", host: "127.0.0.1:7080", code: 200, body: "page"},
		{name: "localhost", h: onLoopback, remote: "[::1]:5555", host: "localhost:7080", code: 200, body: "page"},
		{name: "off loopback without token", h: onLoopback, remote: "10.1.2.3:5555", host: "10.0.0.1:7080", code: 401, body: "this request came without the lab's API token"},
		{name: "off loopback with a wrong token", h: onLoopback, remote: "10.1.2.3:5555", header: map[string]string{"Authorization": "Bearer nope"}, code: 401, body: "with a token that is not the lab's API token"},
		{name: "off loopback with the token", h: onLoopback, remote: "10.1.2.3:5555", header: map[string]string{"Authorization": "Bearer s3cret"}, code: 200, body: "page"},
		{name: "token in the query sets a cookie", h: offLoopback, remote: "10.1.2.3:5555", target: "/?token=s3cret&x=1", code: 303, cookie: true, locates: "/?x=1"},
		{name: "token cookie", h: offLoopback, remote: "10.1.2.3:5555", header: map[string]string{"Cookie": tokenCookie + "=s3cret"}, code: 200, body: "page"},
		{name: "listening off loopback asks loopback peers too", h: offLoopback, remote: "127.0.0.1:5555", host: "127.0.0.1:7080", code: 401, body: "401 Unauthorized"},
		{name: "read-only", h: onLoopback, method: "POST", remote: "127.0.0.1:5555", host: "127.0.0.1:7080", code: 405, body: "read-only"},
		{name: "DNS rebinding", h: onLoopback, remote: "127.0.0.1:5555", host: "evil.example:7080", code: 403, body: "not a loopback address"},
		{name: "cross-site", h: onLoopback, remote: "127.0.0.1:5555", host: "127.0.0.1:7080", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, code: 403, body: "cross-site"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, target := tc.method, tc.target
			if method == "" {
				method = "GET"
			}
			if target == "" {
				target = "/"
			}
			r := httptest.NewRequest(method, target, nil)
			r.RemoteAddr = tc.remote
			if tc.host != "" {
				r.Host = tc.host
			}
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			tc.h.ServeHTTP(w, r)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
				t.Fatalf("got %d %q, want %d containing %q", w.Code, w.Body.String(), tc.code, tc.body)
			}
			if tc.cookie {
				c := w.Result().Cookies()
				if len(c) != 1 || c[0].Name != tokenCookie || c[0].Value != "s3cret" || !c[0].HttpOnly {
					t.Fatalf("cookies %v", c)
				}
				if loc := w.Header().Get("Location"); loc != tc.locates {
					t.Fatalf("Location %q, want %q", loc, tc.locates)
				}
			}
		})
	}
}

func TestNewRefusesOffLoopbackWithoutToken(t *testing.T) {
	base := Config{Lab: lab.State{Name: "gu"}, Client: fake.NewClientset(), Source: &fakeSource{}, PathOf: fakePathOf}
	for _, tc := range []struct {
		listen, token, err string
	}{
		{listen: "0.0.0.0:7080", err: "off loopback, needs the lab's API token"},
		{listen: "192.168.56.1:7080", err: "off loopback, needs the lab's API token"},
		{listen: ":7080", err: "off loopback"},
		{listen: "example.com:7080", err: "must be an IP address or localhost"},
		{listen: "0.0.0.0:7080", token: "t"},
		{listen: "127.0.0.1:0"},
		{listen: "localhost:7080"},
	} {
		cfg := base
		cfg.Listen, cfg.Token = tc.listen, tc.token
		_, err := New(cfg)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.listen, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.listen, err, tc.err)
		}
	}
}

// events reads a Server-Sent Events stream.
type events struct {
	sc *bufio.Scanner
}

func (e *events) next(t *testing.T) (string, []byte) {
	t.Helper()
	var name string
	for e.sc.Scan() {
		l := e.sc.Text()
		switch {
		case strings.HasPrefix(l, "event: "):
			name = l[len("event: "):]
		case strings.HasPrefix(l, "data: "):
			return name, []byte(l[len("data: "):])
		}
	}
	t.Fatalf("event stream ended: %v", e.sc.Err())
	return "", nil
}

func TestLiveFeedFollowsPods(t *testing.T) {
	src := &fakeSource{g: labGraph()}
	s, client := newTestServer(t, src, Config{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ev := &events{sc: bufio.NewScanner(resp.Body)}
	ev.sc.Buffer(nil, 1<<20)
	name, data := ev.next(t)
	var first struct {
		Graph topology.Graph `json:"graph"`
	}
	if err := json.Unmarshal(data, &first); name != "graph" || err != nil || len(first.Graph.Hosts) != 2 {
		t.Fatalf("first event %s %s: %v", name, data, err)
	}

	// A pod appears: its namespace (and its node's) is read again, and the
	// page gets only the difference.
	uid := types.UID("0123456789abcdef")
	h, l := podHost(uid, "web-1", "10.244.0.7")
	src.put(h, l)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", UID: uid}, Spec: corev1.PodSpec{NodeName: "node1"}}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name, data = ev.next(t)
	var p patch
	if err := json.Unmarshal(data, &p); name != "patch" || err != nil {
		t.Fatalf("event %s %s: %v", name, data, err)
	}
	if len(p.Hosts) != 1 || p.Hosts[0].ID != h.ID || p.Hosts[0].Address != "10.244.0.7" || len(p.Links) != 1 || p.Links[0].ID != l.ID || len(p.RemoveHosts) != 0 || p.Services != nil {
		t.Fatalf("patch %s", data)
	}
	src.mu.Lock()
	reads := strings.Join(src.reads, " ")
	src.mu.Unlock()
	if reads != h.ID {
		t.Fatalf("ReadHost calls %q: want the pod's only", reads)
	}

	// It goes away.
	src.remove(h.ID)
	if err := client.CoreV1().Pods("default").Delete(context.Background(), "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	name, data = ev.next(t)
	p = patch{}
	json.Unmarshal(data, &p)
	if name != "patch" || len(p.RemoveHosts) != 1 || p.RemoveHosts[0] != h.ID || len(p.RemoveLinks) != 1 || p.RemoveLinks[0] != l.ID {
		t.Fatalf("event %s %s", name, data)
	}

	// A Service: the lab is read whole, Services come with the patch.
	src.mu.Lock()
	src.g.Services = []topology.Service{{ID: "svc:default/web", Namespace: "default", Name: "web", Type: "NodePort"}}
	src.mu.Unlock()
	if _, err := client.CoreV1().Services("default").Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name, data = ev.next(t)
	p = patch{}
	json.Unmarshal(data, &p)
	if name != "patch" || p.Services == nil || len(*p.Services) != 1 || len(p.Hosts) != 0 {
		t.Fatalf("event %s %s", name, data)
	}
}

func getJSON(t *testing.T, h http.Handler, target string, v any) int {
	t.Helper()
	r := httptest.NewRequest("GET", target, nil)
	r.RemoteAddr = "127.0.0.1:5555"
	r.Host = "127.0.0.1:7080"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
		t.Fatalf("%s: %d %q: %v", target, w.Code, w.Body.String(), err)
	}
	return w.Code
}

func TestTraceAnswersAndBadInput(t *testing.T) {
	var got trace.Config
	tr := func(_ context.Context, o trace.Config) (*trace.Result, error) {
		got = o
		if o.To == "svc/nope" {
			return nil, errors.New(`TO "svc/nope": services "nope" not found`)
		}
		if o.Family == "ipv6" {
			// The IPv6 proxier's rules: counters come from ip6tables-save.
			return &trace.Result{Mode: trace.ModeIPTables, Family: "IPv6", Netns: "gu-node1", Paths: []trace.Path{{Verdict: "ACCEPT", Steps: []trace.Step{
				{Table: "nat", Chain: "KUBE-SERVICES", Rule: 1, Text: `-A KUBE-SERVICES -m comment --comment "default/hostnames:p80 cluster IP" -m tcp -p tcp -d fd00:10:96::20 --dport 80 -j KUBE-SVC-26OUV5WZ4S3VFRGA`},
			}}}}, nil
		}
		return &trace.Result{Mode: trace.ModeIPTables, Netns: "gu-node1", Paths: []trace.Path{{Verdict: "ACCEPT", Steps: []trace.Step{
			{Table: "nat", Chain: "KUBE-NODEPORTS", Rule: 4, Text: `-A KUBE-NODEPORTS -p tcp -m comment --comment "default/local:http" -m tcp --dport 30080 -j KUBE-EXT-3ENVKKDUT2EZ6WIE`},
			{Table: "nat", Chain: "KUBE-EXT-3ENVKKDUT2EZ6WIE", Rule: 0, Text: "end of chain"},
		}}}}, nil
	}
	s, _ := newTestServer(t, &fakeSource{g: labGraph()}, Config{Trace: tr, Rules: fixtureRules{}})
	h := s.Handler()

	var a traceAnswer
	if code := getJSON(t, h, "/api/trace?from=client&to=node1:30080&live=1", &a); code != 200 {
		t.Fatalf("status %d", code)
	}
	if got.From != "client" || got.To != "node1:30080" || !got.Live || got.Lab != "gu" {
		t.Fatalf("trace options %+v", got)
	}
	if len(a.Hops) != 1 || a.Hops[0][0].Label != "path 0 of 2 hosts" {
		t.Fatalf("hops %+v", a.Hops)
	}
	if len(a.Counters) != 1 || a.Counters[0][0] == nil || a.Counters[0][0].Packets != 4 || a.Counters[0][1] != nil {
		t.Fatalf("counters %+v", a.Counters)
	}

	a = traceAnswer{}
	if code := getJSON(t, h, "/api/trace?from=client&to=svc/web&family=ipv6", &a); code != 200 || got.Family != "ipv6" {
		t.Fatalf("status %d, family %q", code, got.Family)
	}
	if len(a.Counters) != 1 || a.Counters[0][0] == nil {
		t.Fatalf("an IPv6 trace's counters were not read from the IPv6 rules: %+v %q", a.Counters, a.CountersError)
	}

	for target, want := range map[string]string{
		"/api/trace?from=client&to=svc/nope":    `trace client svc/nope: TO "svc/nope": services "nope" not found`,
		"/api/trace?to=svc/web":                 "both FROM and TO are required",
		"/api/trace?from=a&to=b&live=maybe":     `live="maybe" is not a boolean`,
		"/api/chains?service=default":           "service=NAMESPACE/NAME is required",
		"/api/chains?service=default/nope":      "the lab has no Service default/nope",
		"/api/dns?pod=default/nope&name=web":    `the lab has no pod "default/nope"`,
		"/api/dns?pod=default/x&name=a..b":      "is not a domain name",
		"/api/dns?pod=default/x&name=a&type=MX": "want A, AAAA, SRV, PTR or TXT",
	} {
		var e struct{ Error string }
		if code := getJSON(t, h, target, &e); code != 400 || !strings.Contains(e.Error, want) {
			t.Errorf("%s: %d %q, want 400 with %q", target, code, e.Error, want)
		}
	}
}

// fixtureRules are the rules of iptables/iptsim's and nftsim's fixtures.
type fixtureRules struct{ mode string }

func (f fixtureRules) Mode(string) (string, error) {
	if f.mode == "" {
		return trace.ModeIPTables, nil
	}
	return f.mode, nil
}

func (fixtureRules) IPTables(string) (*iptsim.Rules, error) {
	b, err := os.ReadFile("../iptables/iptsim/testdata/node2.save")
	if err != nil {
		return nil, err
	}
	return iptsim.Parse(string(b))
}

func (fixtureRules) IPTablesIPv6(string) (*iptsim.Rules, error) {
	b, err := os.ReadFile("../iptables/iptsim/testdata/v6-clusterip.save")
	if err != nil {
		return nil, err
	}
	return iptsim.Parse(string(b))
}

func (fixtureRules) NFT(string) ([]byte, error) {
	return os.ReadFile("../nft/nftsim/testdata/overall.json")
}

// flat renders a tree as "indent chain #rule [packets] target" lines.
func flat(ns []*ChainNode, depth int, out *[]string) {
	for _, n := range ns {
		ctr := ""
		if n.Packets != nil {
			ctr = fmt.Sprintf(" [%d]", *n.Packets)
		}
		*out = append(*out, fmt.Sprintf("%s%s #%d%s -> %s", strings.Repeat("  ", depth), n.Chain, n.Rule, ctr, n.Target))
		flat(n.Children, depth+1, out)
	}
}

func TestChainTrees(t *testing.T) {
	for _, tc := range []struct {
		mode, svc, node string
		want            []string
	}{
		{mode: trace.ModeIPTables, svc: "default/local", want: []string{
			"KUBE-SERVICES #7 [0] -> KUBE-SVC-3ENVKKDUT2EZ6WIE",
			"  KUBE-SVC-3ENVKKDUT2EZ6WIE #1 [0] -> KUBE-MARK-MASQ",
			"  KUBE-SVC-3ENVKKDUT2EZ6WIE #2 [0] -> KUBE-SEP-7YRAKCXUNBAUS6CD",
			"    KUBE-SEP-7YRAKCXUNBAUS6CD #1 [0] -> KUBE-MARK-MASQ",
			"    KUBE-SEP-7YRAKCXUNBAUS6CD #2 [0] -> DNAT",
			"KUBE-NODEPORTS #4 [4] -> KUBE-EXT-3ENVKKDUT2EZ6WIE",
			"  KUBE-EXT-3ENVKKDUT2EZ6WIE #1 [0] -> KUBE-SVC-3ENVKKDUT2EZ6WIE",
			"    KUBE-SVC-3ENVKKDUT2EZ6WIE #1 [0] -> KUBE-MARK-MASQ",
			"    KUBE-SVC-3ENVKKDUT2EZ6WIE #2 [0] -> KUBE-SEP-7YRAKCXUNBAUS6CD",
			"      KUBE-SEP-7YRAKCXUNBAUS6CD #1 [0] -> KUBE-MARK-MASQ",
			"      KUBE-SEP-7YRAKCXUNBAUS6CD #2 [0] -> DNAT",
			"  KUBE-EXT-3ENVKKDUT2EZ6WIE #2 [0] -> KUBE-MARK-MASQ",
			"  KUBE-EXT-3ENVKKDUT2EZ6WIE #3 [0] -> KUBE-SVC-3ENVKKDUT2EZ6WIE",
			"    KUBE-SVC-3ENVKKDUT2EZ6WIE #1 [0] -> KUBE-MARK-MASQ",
			"    KUBE-SVC-3ENVKKDUT2EZ6WIE #2 [0] -> KUBE-SEP-7YRAKCXUNBAUS6CD",
			"      KUBE-SEP-7YRAKCXUNBAUS6CD #1 [0] -> KUBE-MARK-MASQ",
			"      KUBE-SEP-7YRAKCXUNBAUS6CD #2 [0] -> DNAT",
		}},
		{mode: trace.ModeNFTables, svc: "ns5/svc5", want: nil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			src := &fakeSource{g: labGraph()}
			ns, name, _ := strings.Cut(tc.svc, "/")
			src.g.Services = []topology.Service{{Namespace: ns, Name: name}}
			s, _ := newTestServer(t, src, Config{Rules: fixtureRules{mode: tc.mode}})
			var ct ChainTree
			if code := getJSON(t, s.Handler(), "/api/chains?service="+tc.svc, &ct); code != 200 {
				t.Fatalf("status %d", code)
			}
			if ct.Node != "node1" || ct.Mode != tc.mode {
				t.Fatalf("tree %+v", ct)
			}
			var got []string
			flat(ct.Roots, 0, &got)
			if tc.mode == trace.ModeNFTables {
				// Every root is a map element going to one of svc5's
				// chains; under them, the chains down to a DNAT.
				all := strings.Join(got, "\n")
				if len(ct.Roots) < 2 || !strings.Contains(all, "@service-ips #0 -> external-HVFWP5L3-ns5/svc5/tcp/p80") ||
					!strings.Contains(all, "@service-nodeports #0 -> external-HVFWP5L3-ns5/svc5/tcp/p80") ||
					!strings.Contains(all, "endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.244.0.3/80 #") {
					t.Fatalf("nft tree:\n%s", all)
				}
				if !strings.Contains(ct.Roots[0].Text, " : goto ") {
					t.Fatalf("map element text %q", ct.Roots[0].Text)
				}
				return
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestSearchNames(t *testing.T) {
	search := []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"}
	for _, tc := range []struct {
		name  string
		ndots int
		want  string
	}{
		{"web", 5, "web.default.svc.cluster.local. web.svc.cluster.local. web.cluster.local. web."},
		{"web.default", 5, "web.default.default.svc.cluster.local. web.default.svc.cluster.local. web.default.cluster.local. web.default."},
		{"example.com", 1, "example.com. example.com.default.svc.cluster.local. example.com.svc.cluster.local. example.com.cluster.local."},
		{"example.com.", 5, "example.com."},
	} {
		if got := strings.Join(searchNames(tc.name, search, tc.ndots), " "); got != tc.want {
			t.Errorf("%s ndots %d: %s, want %s", tc.name, tc.ndots, got, tc.want)
		}
	}
	if n := ndots([]byte("nameserver 10.96.0.10\noptions ndots:5 timeout:1\n")); n != 5 {
		t.Errorf("ndots %d", n)
	}
	if n := ndots([]byte("nameserver 1.1.1.1\n")); n != 1 {
		t.Errorf("default ndots %d", n)
	}
}

func TestDNSFromAPod(t *testing.T) {
	uid := types.UID("0123456789abcdef")
	h, l := podHost(uid, "client", "10.244.0.9")
	src := &fakeSource{g: labGraph()}
	src.put(h, l)
	type query struct {
		netns  string
		server netip.AddrPort
		name   string
	}
	var asked []query
	ex := func(_ context.Context, netns string, server netip.AddrPort, m *mdns.Msg) (*mdns.Msg, time.Duration, error) {
		asked = append(asked, query{netns, server, m.Question[0].Name})
		r := new(mdns.Msg)
		r.SetReply(m)
		if m.Question[0].Name == "web.svc.cluster.local." {
			r.Answer = append(r.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: m.Question[0].Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 5}, A: []byte{10, 96, 0, 20}})
		} else {
			r.Rcode = mdns.RcodeNameError
		}
		return r, time.Millisecond, nil
	}
	s, client := newTestServer(t, src, Config{Exchange: ex})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "client", UID: uid}, Spec: corev1.PodSpec{NodeName: "node1"}}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.cfg.Lab.Dir, "node1", "agent", "pods", string(uid))
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver 10.96.0.10\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"), 0o644)

	var got DNSLookup
	if code := getJSON(t, s.Handler(), "/api/dns?pod=default/client&name=web", &got); code != 200 {
		t.Fatalf("status %d %+v", code, got)
	}
	if got.Answer != 1 || len(got.Tries) != 2 || got.Tries[0].Rcode != "NXDOMAIN" || got.Tries[1].Rcode != "NOERROR" ||
		len(got.Tries[1].Answers) != 1 || !strings.Contains(got.Tries[1].Answers[0], "10.96.0.20") || got.Nameserver != "10.96.0.10:53" || got.Ndots != 5 {
		t.Fatalf("lookup %+v", got)
	}
	for _, q := range asked {
		if q.netns != h.ID || q.server.String() != "10.96.0.10:53" {
			t.Fatalf("query %+v: want it sent from the pod's namespace %s to the cluster DNS", q, h.ID)
		}
	}
	if _, _, err := netnsExchange(context.Background(), "", netip.MustParseAddrPort("10.96.0.10:53"), new(mdns.Msg)); err == nil {
		t.Fatal("netnsExchange sent a query from the root namespace")
	}
}

func TestPageIsEmbedded(t *testing.T) {
	s, _ := newTestServer(t, &fakeSource{g: labGraph()}, Config{})
	h := s.Handler()
	for path, want := range map[string]string{
		"/":                        `<script src="vendor/dagre.min.js"></script>`,
		"/app.js":                  "class=\"host host-${esc(h.kind)}\"",
		"/vendor/dagre.min.js":     "var dagre=",
		"/vendor/LICENSE.dagre":    "Permission is hereby granted",
		"/vendor/LICENSE.graphlib": "Permission is hereby granted",
		"/style.css":               ".hop",
		"/api/graph":               `"id":"gu-node1"`,
	} {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr, r.Host = "127.0.0.1:1", "127.0.0.1:7080"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 || !strings.Contains(w.Body.String(), want) {
			t.Errorf("%s: %d, want it to contain %q", path, w.Code, want)
		}
	}
}

// TestPodsAreDrawnWhileTheLabIsRead: a pod that appears while the whole lab
// is being read (slowly) is sent at once, and the read that began before it
// does not take it away again.
func TestPodsAreDrawnWhileTheLabIsRead(t *testing.T) {
	src := &fakeSource{g: labGraph()}
	s, client := newTestServer(t, src, Config{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ev := &events{sc: bufio.NewScanner(resp.Body)}
	ev.sc.Buffer(nil, 1<<20)
	if name, _ := ev.next(t); name != "graph" {
		t.Fatalf("first event %s", name)
	}

	gate := make(chan struct{})
	src.mu.Lock()
	src.gate, src.collecting = gate, make(chan struct{}, 1)
	src.mu.Unlock()
	// A Service: the whole lab is read, and that read is slow.
	if _, err := client.CoreV1().Services("default").Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-src.collecting

	uid := types.UID("fedcba9876543210")
	h, l := podHost(uid, "web-2", "10.244.0.8")
	src.put(h, l)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-2", UID: uid}, Spec: corev1.PodSpec{NodeName: "node1"}}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name, data := ev.next(t)
	var p patch
	json.Unmarshal(data, &p)
	if name != "patch" || len(p.Hosts) != 1 || p.Hosts[0].ID != h.ID {
		t.Fatalf("while the lab is read: event %s %s, want the new pod", name, data)
	}

	src.mu.Lock()
	src.gate = nil
	src.mu.Unlock()
	close(gate) // the old read ends, without the pod; then the next one, with it
	// A last change marks the end: no event before it may take the pod away.
	src.mu.Lock()
	src.g.Services = []topology.Service{{ID: "svc:default/last", Namespace: "default", Name: "last"}}
	src.mu.Unlock()
	if _, err := client.CoreV1().Services("default").Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "last"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		name, data := ev.next(t)
		var p patch
		json.Unmarshal(data, &p)
		if name != "patch" || slices.Contains(p.RemoveHosts, h.ID) {
			t.Fatalf("event %s %s: a read of the lab that began before the pod took it away", name, data)
		}
		if p.Services != nil {
			break
		}
	}
	var g topology.Graph
	getJSON(t, s.Handler(), "/api/graph", &g)
	if !slices.ContainsFunc(g.Hosts, func(x topology.Host) bool { return x.ID == h.ID }) {
		t.Fatalf("the pod is gone: %+v", g.Hosts)
	}
}
