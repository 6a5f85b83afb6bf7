package images

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// kubeadmCorefile is kubeadm's default Corefile, with a stub domain and an
// upstream as the "Customizing DNS Service" page adds them, on port 0.
const kubeadmCorefile = `.:0 {
    errors
    health 127.0.0.1:0 {
       lameduck 10ms
    }
    ready 127.0.0.1:0
    rewrite name exact alias.example. kubernetes.default.svc.cluster.local.
    hosts {
       10.9.9.9 pinned.example
       fallthrough
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus 127.0.0.1:0
    forward . 172.16.0.1 {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
consul.local:0 {
    errors
    cache 30
    hosts {
       10.150.0.7 web.consul.local
    }
}
`

// fakeClusterDNS stands in for the dns package's server: it records what the
// image asked for and answers kubernetes.default.svc.cluster.local itself,
// after giving the Corefile's other plugins their turn (Before).
type fakeClusterDNS struct {
	got    chan ClusterDNSServer
	synced chan struct{}
}

func (f *fakeClusterDNS) serve(ctx context.Context, s ClusterDNSServer) error {
	f.got <- s
	pc, err := net.ListenPacket("udp", net.JoinHostPort(s.Host, "0"))
	if err != nil {
		return err
	}
	s.OnListen("udp", pc.LocalAddr())
	go func() {
		<-f.synced
		s.Synced()
	}()
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		client := netip.MustParseAddrPort(w.RemoteAddr().String()).Addr()
		m, after := s.Before(ctx, r, client)
		if m == nil {
			m = new(dns.Msg)
			m.SetReply(r)
			if strings.EqualFold(r.Question[0].Name, "kubernetes.default.svc.cluster.local.") {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(10, 96, 0, 1)})
			} else {
				m.Rcode = dns.RcodeNameError
			}
			if after != nil {
				after(m)
			}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { <-ctx.Done(); _ = srv.Shutdown() }()
	return srv.ActivateAndServe()
}

func TestCoreDNSKubeadmCorefile(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/coredns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/coredns/Corefile"), []byte(kubeadmCorefile), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fakeClusterDNS{got: make(chan ClusterDNSServer, 1), synced: make(chan struct{})}
	r := startWith(t, "registry.k8s.io/coredns/coredns:v1.12.0", []string{"-conf", "/etc/coredns/Corefile"},
		map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
		func(c *container) { c.root = root; c.clusterDNS = f.serve })
	s := <-f.got
	k := s.Plugin
	if strings.Join(k.Zones, " ") != "cluster.local. in-addr.arpa. ip6.arpa." || k.Pods != "insecure" || k.TTL != 30 ||
		strings.Join(k.Fallthrough, " ") != "in-addr.arpa. ip6.arpa." {
		t.Errorf("kubernetes plugin = %+v", k)
	}
	if len(s.Upstreams) != 1 || s.Upstreams[0].String() != "172.16.0.1:53" || s.CacheMaxTTL != 30*time.Second {
		t.Errorf("upstreams %v cache %v, want 172.16.0.1:53 and 30s", s.Upstreams, s.CacheMaxTTL)
	}
	// The pod's service account, as client-go's in-cluster configuration.
	if s.REST.Host != "https://10.96.0.1:443" || s.REST.BearerTokenFile != filepath.Join(root, "var/run/secrets/kubernetes.io/serviceaccount/token") {
		t.Errorf("REST config %s %s", s.REST.Host, s.REST.BearerTokenFile)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		n := len(r.addrs["udp"])
		r.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.mu.Lock()
	var udp []string
	for _, a := range r.addrs["udp"] {
		udp = append(udp, a.String())
	}
	var tcp []string
	for _, a := range r.addrs["tcp"] {
		tcp = append(tcp, a.String())
	}
	r.mu.Unlock()
	// Both blocks are on the same port: the stub domain is answered through
	// Before on the cluster server's socket.
	if len(udp) != 1 {
		t.Fatalf("udp listeners %v, want the cluster server's only", udp)
	}
	addr := udp[0]
	for _, c := range []struct {
		name  string
		rcode int
		want  string
	}{
		{"kubernetes.default.svc.cluster.local.", dns.RcodeSuccess, "kubernetes.default.svc.cluster.local.\t30\tIN\tA\t10.96.0.1"},
		{"alias.example.", dns.RcodeSuccess, "alias.example.\t30\tIN\tA\t10.96.0.1"},
		{"pinned.example.", dns.RcodeSuccess, "pinned.example.\t3600\tIN\tA\t10.9.9.9"},
		{"web.consul.local.", dns.RcodeSuccess, "web.consul.local.\t3600\tIN\tA\t10.150.0.7"},
		{"other.consul.local.", dns.RcodeServerFailure, ""},
		{"nope.default.svc.cluster.local.", dns.RcodeNameError, ""},
	} {
		resp := query(t, addr, c.name, dns.TypeA)
		var got []string
		for _, rr := range resp.Answer {
			got = append(got, rr.String())
		}
		if resp.Rcode != c.rcode || strings.Join(got, "\n") != c.want || resp.Question[0].Name != c.name {
			t.Errorf("A %s = %s %q (question %s), want %s %q", c.name, dns.RcodeToString[resp.Rcode], got, resp.Question[0].Name,
				dns.RcodeToString[c.rcode], c.want)
		}
	}
	// ready says 503 until the kubernetes plugin has synced; prometheus
	// lists the plugins.
	get := func(addr, path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if len(tcp) != 3 {
		t.Fatalf("tcp listeners %v, want health's, ready's and prometheus's", tcp)
	}
	var readyAddr, metricsAddr string
	for _, a := range tcp {
		if code, _ := get(a, "/ready"); code != http.StatusNotFound {
			readyAddr = a
		}
		if code, _ := get(a, "/metrics"); code != http.StatusNotFound {
			metricsAddr = a
		}
		if code, body := get(a, "/health"); code == http.StatusOK && body != "OK" {
			t.Errorf("/health = %q", body)
		}
	}
	if code, body := get(readyAddr, "/ready"); code != http.StatusServiceUnavailable || body != "kubernetes" {
		t.Errorf("/ready before sync = %d %q, want 503 kubernetes", code, body)
	}
	close(f.synced)
	deadline = time.Now().Add(10 * time.Second)
	for code, _ := get(readyAddr, "/ready"); code != http.StatusOK; code, _ = get(readyAddr, "/ready") {
		if time.Now().After(deadline) {
			t.Fatalf("/ready = %d after sync", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, body := get(metricsAddr, "/metrics"); !strings.Contains(body, `coredns_plugin_enabled{name="kubernetes",server="dns://:0",view="",zone="."} 1`) {
		t.Errorf("/metrics:\n%s", body)
	}
}

// reload: a changed Corefile is loaded anew; one that does not parse is
// logged and the running one stays.
func TestCoreDNSReload(t *testing.T) {
	root := t.TempDir()
	write := func(text string) {
		if err := os.WriteFile(filepath.Join(root, "Corefile.tmp"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(root, "Corefile.tmp"), filepath.Join(root, "Corefile")); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.LocalAddr().(*net.UDPAddr).Port
	l.Close()
	block := func(ip string) string {
		return ".:" + strconv.Itoa(port) + " {\n\treload 2s\n\thosts {\n\t\t" + ip + " a.example\n\t}\n}\n"
	}
	write(block("10.0.0.1"))
	r := startWith(t, "registry.k8s.io/coredns/coredns", []string{"-conf", "/Corefile"}, nil, func(c *container) { c.root = root })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	answer := func() string {
		m := new(dns.Msg)
		m.SetQuestion("a.example.", dns.TypeA)
		resp, _, err := new(dns.Client).Exchange(m, addr)
		if err != nil || len(resp.Answer) != 1 {
			return ""
		}
		return resp.Answer[0].(*dns.A).A.String()
	}
	if got := answer(); got != "10.0.0.1" {
		t.Fatalf("a.example = %q, want 10.0.0.1", got)
	}
	write(block("10.0.0.2"))
	deadline := time.Now().Add(20 * time.Second)
	for answer() != "10.0.0.2" {
		if time.Now().After(deadline) {
			t.Fatalf("a.example not reloaded: %s", r.stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(r.stdout.String(), "[INFO] Reloading complete") {
		t.Errorf("log:\n%s", r.stdout.String())
	}
}

// The Corefile of the coredns pod on the node's network (a loopback-only
// API): bind takes the downward API's address from the environment, and the
// kubernetes plugin reaches the API at its endpoint without credentials.
func TestCoreDNSHostNetworkCorefile(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/coredns"), 0o755); err != nil {
		t.Fatal(err)
	}
	corefile := ".:0 {\n    bind {$POD_IP}\n    ready 127.0.0.1:0\n    kubernetes cluster.local {\n       endpoint http://127.0.0.1:6443\n    }\n}\n"
	if err := os.WriteFile(filepath.Join(root, "etc/coredns/Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fakeClusterDNS{got: make(chan ClusterDNSServer, 1), synced: make(chan struct{})}
	startWith(t, "registry.k8s.io/coredns/coredns:v1.12.0", []string{"-conf", "/etc/coredns/Corefile"},
		map[string]string{"POD_IP": "127.0.0.2", "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
		func(c *container) { c.root = root; c.clusterDNS = f.serve })
	s := <-f.got
	close(f.synced)
	if s.Host != "127.0.0.2" {
		t.Errorf("the kubernetes block listens on %q, want the pod's address 127.0.0.2", s.Host)
	}
	if s.REST.Host != "http://127.0.0.1:6443" || s.REST.BearerToken != "" || s.REST.BearerTokenFile != "" {
		t.Errorf("REST config host %q token %q file %q, want the endpoint without credentials", s.REST.Host, s.REST.BearerToken, s.REST.BearerTokenFile)
	}
}

func TestExpandCorefileEnv(t *testing.T) {
	env := map[string]string{"POD_IP": "192.168.1.5", "EMPTY": ""}
	for _, c := range []struct{ in, want string }{
		{"bind {$POD_IP}", "bind 192.168.1.5"},
		{"bind {$UNSET}", "bind "},
		{"bind {$UNSET:127.0.0.1}", "bind 127.0.0.1"},
		{"bind {$EMPTY:::1}", "bind ::1"},
		{".:53 {\n    bind {$POD_IP}\n}", ".:53 {\n    bind 192.168.1.5\n}"},
		{"health {\n lameduck 5s\n}", "health {\n lameduck 5s\n}"},
		{"broken {$POD_IP", "broken {$POD_IP"},
	} {
		if got := expandCorefileEnv(c.in, env); got != c.want {
			t.Errorf("expandCorefileEnv(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
