// Command bench-gateway is the helper of scripts/bench-gateway.sh: it runs the
// pieces of the side-by-side benchmark of minikit's Gateway API data plane
// against Debian's nginx and haproxy, all on loopback:
//
//	bench-gateway backend -addr 127.0.0.1:18381 -name backend-1
//	    a backend answering like nginxdemos/hello's plain-text page
//	bench-gateway proxy -addr 127.0.0.1:18390 -tls-addr 127.0.0.1:18791 ...
//	    minikit's Gateway data plane serving the cafe Gateway and HTTPRoute
//	bench-gateway render -dir DIR -nginx 127.0.0.1:18380,127.0.0.1:18743 -haproxy 127.0.0.1:18385,127.0.0.1:18745 ...
//	    nginx.conf and haproxy.cfg doing the same routing to the same endpoints
//	bench-gateway load -url http://127.0.0.1:18390/tea -rate 2000 -duration 20s
//	    a fixed request rate over keep-alive connections
//	bench-gateway handshakes -addr 127.0.0.1:18791 -duration 10s
//	    full TLS handshakes, one request per connection, no session resumption
//
// minikit's side is built from API objects (a Gateway with an HTTP and an
// HTTPS listener, the HTTPRoute, Services and EndpointSlices, the TLS Secret)
// exactly as the node builds it (node.go's sync): Compute, BuildTable,
// ResolveEndpoints, then Handler and TerminateTLS on the data ports. The
// peers' configurations are written from the same endpoint lists.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minikit/minikit/internal/gateway"
	"github.com/minikit/minikit/scripts/hellobackend"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: bench-gateway backend|proxy|render|load|handshakes [flags]")
	}
	switch os.Args[1] {
	case "backend":
		hellobackend.Run(os.Args[2:], "127.0.0.1:18381")
	case "proxy":
		runProxy(os.Args[2:])
	case "render":
		render(os.Args[2:])
	case "load":
		load(os.Args[2:])
	case "handshakes":
		handshakes(os.Args[2:])
	default:
		log.Fatalf("unknown command %q", os.Args[1])
	}
}

// cafeFlags are the endpoints and certificate every proxy is configured with.
type cafeFlags struct {
	host, tea, coffee, cert, key string
}

func (c *cafeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.host, "host", "cafe.example.com", "the HTTPRoute's hostname")
	fs.StringVar(&c.tea, "tea", "127.0.0.1:18381,127.0.0.1:18382,127.0.0.1:18383", "endpoints of tea-svc")
	fs.StringVar(&c.coffee, "coffee", "127.0.0.1:18381,127.0.0.1:18382", "endpoints of coffee-svc")
	fs.StringVar(&c.cert, "cert", "", "TLS certificate (PEM) of cafe-secret")
	fs.StringVar(&c.key, "key", "", "TLS key (PEM) of cafe-secret")
}

type svcEndpoints struct {
	name, path string
	eps        []string
}

func (c *cafeFlags) services() []svcEndpoints {
	return []svcEndpoints{{"tea-svc", "/tea", strings.Split(c.tea, ",")}, {"coffee-svc", "/coffee", strings.Split(c.coffee, ",")}}
}

func ptr[T any](v T) *T { return &v }

func portOf(addr string) int32 {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		log.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		log.Fatalf("address %q: %v", addr, err)
	}
	return int32(n)
}

// world returns the cafe as Gateway API objects: the Gateway "cafe" with an
// HTTP listener (80) and an HTTPS listener (443, cafe-secret), the
// HTTPRoute (/tea to tea-svc, /coffee to coffee-svc, both PathPrefix, for
// the route's hostname), the backend Services and one EndpointSlice per
// endpoint, and the Gateway's own Service as the control plane makes it,
// whose target ports are the data ports the proxy listens on.
func (c *cafeFlags) world(httpPort, httpsPort int32) (gateway.World, []*discoveryv1.EndpointSlice) {
	const ns = "default"
	w := gateway.World{Services: map[types.NamespacedName]*corev1.Service{}, Secrets: map[types.NamespacedName]*corev1.Secret{},
		Namespaces: map[string]map[string]string{ns: {"kubernetes.io/metadata.name": ns}}}
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cafe", Generation: 1},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gateway.ClassName, Listeners: []gatewayv1.Listener{
			{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType},
		}}}
	ports := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(httpPort)}}
	if c.cert != "" {
		crt, err := os.ReadFile(c.cert)
		if err != nil {
			log.Fatal(err)
		}
		key, err := os.ReadFile(c.key)
		if err != nil {
			log.Fatal(err)
		}
		w.Secrets[types.NamespacedName{Namespace: ns, Name: "cafe-secret"}] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cafe-secret"},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}
		gw.Spec.Listeners = append(gw.Spec.Listeners, gatewayv1.Listener{Name: "https", Port: 443, Protocol: gatewayv1.HTTPSProtocolType,
			TLS: &gatewayv1.ListenerTLSConfig{Mode: ptr(gatewayv1.TLSModeTerminate),
				CertificateRefs: []gatewayv1.SecretObjectReference{{Name: "cafe-secret"}}}})
		ports = append(ports, corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(httpsPort)})
	}
	w.Gateways = []*gatewayv1.Gateway{gw}
	w.Services[types.NamespacedName{Namespace: ns, Name: gateway.ServiceName(gw.Name)}] = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gateway.ServiceName(gw.Name), Labels: map[string]string{gateway.GatewayNameLabel: gw.Name}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports}}
	rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cafe", Generation: 1},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "cafe"}}},
			Hostnames: []gatewayv1.Hostname{gatewayv1.Hostname(c.host)}}}
	var slices []*discoveryv1.EndpointSlice
	for _, svc := range c.services() {
		rt.Spec.Rules = append(rt.Spec.Rules, gatewayv1.HTTPRouteRule{
			Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchPathPrefix), Value: ptr(svc.path)}}},
			BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
				Name: gatewayv1.ObjectName(svc.name), Port: ptr(gatewayv1.PortNumber(80))}}}},
		})
		w.Services[types.NamespacedName{Namespace: ns, Name: svc.name}] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc.name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
		for i, ep := range svc.eps {
			host, port, err := net.SplitHostPort(ep)
			if err != nil {
				log.Fatalf("endpoint %q: %v", ep, err)
			}
			p, _ := strconv.Atoi(port)
			slices = append(slices, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", svc.name, i), Labels: map[string]string{discoveryv1.LabelServiceName: svc.name}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(p))}},
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}},
			})
		}
	}
	w.HTTPRoutes = []*gatewayv1.HTTPRoute{rt}
	return w, slices
}

// snapshot builds the data plane's Snapshot from the objects the way the
// node's sync does (internal/gateway/node.go), with the exported functions
// it uses: the status rules' attachments per listener, one Table per data
// port, the HTTPS ports' certificates, the endpoints of the tables' backends.
func snapshot(w gateway.World, all []*discoveryv1.EndpointSlice) *gateway.Snapshot {
	res := gateway.Compute(w)
	for key, ls := range res.Listeners {
		for _, l := range ls {
			for _, c := range l.Conditions {
				if c.Status != metav1.ConditionTrue && c.Type != string(gatewayv1.ListenerConditionConflicted) {
					log.Fatalf("gateway %s listener %s: %s=%s %s: %s", key, l.Name, c.Type, c.Status, c.Reason, c.Message)
				}
			}
			if l.AttachedRoutes != 1 {
				log.Fatalf("gateway %s listener %s: %d attached routes, want 1", key, l.Name, l.AttachedRoutes)
			}
		}
	}
	attached := map[int32][]gateway.Attachment{}
	s := &gateway.Snapshot{Ports: map[int32]int32{}, TLS: map[int32][]gateway.ServerCert{}, Passthrough: map[int32]bool{}, Tables: map[int32]*gateway.Table{}}
	for _, g := range w.Gateways {
		svc := w.Services[types.NamespacedName{Namespace: g.Namespace, Name: gateway.ServiceName(g.Name)}]
		for _, l := range g.Spec.Listeners {
			for _, p := range svc.Spec.Ports {
				if p.Port != int32(l.Port) {
					continue
				}
				dp := p.TargetPort.IntVal
				s.Ports[dp] = p.Port
				lk := gateway.ListenerKey{Gateway: types.NamespacedName{Namespace: g.Namespace, Name: g.Name}, Listener: l.Name}
				attached[dp] = append(attached[dp], res.Attached[lk]...)
				if l.Protocol == gatewayv1.HTTPSProtocolType {
					host := ""
					if l.Hostname != nil {
						host = string(*l.Hostname)
					}
					s.TLS[dp] = append(s.TLS[dp], gateway.ServerCert{Hostname: host, Certs: res.Certificates[lk]})
				}
			}
		}
	}
	for dp, at := range attached {
		t, errs := gateway.BuildTable(w, at)
		if err := errors.Join(errs...); err != nil {
			log.Fatalf("data port %d: %v", dp, err)
		}
		s.Tables[dp] = t
	}
	bySvc := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for _, sl := range all {
		k := types.NamespacedName{Namespace: sl.Namespace, Name: sl.Labels[discoveryv1.LabelServiceName]}
		bySvc[k] = append(bySvc[k], sl)
	}
	s.Endpoints = gateway.ResolveEndpoints(s.Tables, w.Services, bySvc)
	return s
}

// runProxy serves the data ports as the node's serve does: net/http's
// server with HTTP/1.1 and h2c, Handler on each port, TerminateTLS around
// the listener.
func runProxy(args []string) {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18390", "HTTP listener's data port")
	tlsAddr := fs.String("tls-addr", "", "HTTPS listener's data port")
	procs := fs.Int("gomaxprocs", 0, "GOMAXPROCS (0: the runtime's default)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here until the proxy stops")
	var c cafeFlags
	c.register(fs)
	fs.Parse(args)
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var tlsPort int32
	if *tlsAddr != "" {
		tlsPort = portOf(*tlsAddr)
	}
	w, sl := c.world(portOf(*addr), tlsPort)
	var snap atomic.Pointer[gateway.Snapshot]
	snap.Store(snapshot(w, sl))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var srvs []*http.Server
	for _, a := range []string{*addr, *tlsAddr} {
		if a == "" {
			continue
		}
		dp := portOf(a)
		ln, err := net.Listen("tcp", a)
		if err != nil {
			log.Fatal(err)
		}
		srv := &http.Server{Handler: gateway.Handler(dp, snap.Load, nil), ReadHeaderTimeout: 60 * time.Second,
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)}
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		srvs = append(srvs, srv)
		go func() {
			if err := srv.Serve(gateway.TerminateTLS(ln, dp, snap.Load)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Fatal(err)
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	for _, srv := range srvs {
		srv.Close()
	}
}

// render writes nginx.conf and haproxy.cfg: by Host (the route's hostname;
// anything else 404) and path prefix (/tea and /tea/..., as PathPrefix
// matches, not /teapot) to the same endpoints, round robin, over keep-alive
// upstream connections, TLS with the same certificate. Access logs are off
// on both, as minikit's data plane writes none.
func render(args []string) {
	fs := flag.NewFlagSet("render", flag.ExitOnError)
	dir := fs.String("dir", "/tmp/peers-minikit", "nginx/ and haproxy/ are written here")
	ngx := fs.String("nginx", "127.0.0.1:18380,127.0.0.1:18743", "nginx's HTTP,HTTPS listen addresses")
	hap := fs.String("haproxy", "127.0.0.1:18385,127.0.0.1:18745", "haproxy's HTTP,HTTPS listen addresses")
	var c cafeFlags
	c.register(fs)
	fs.Parse(args)
	crt, err := os.ReadFile(c.cert)
	if err != nil {
		log.Fatal(err)
	}
	key, err := os.ReadFile(c.key)
	if err != nil {
		log.Fatal(err)
	}
	nl, hl := strings.Split(*ngx, ","), strings.Split(*hap, ",")
	if len(nl) != 2 || len(hl) != 2 {
		log.Fatal("-nginx and -haproxy take HTTP,HTTPS")
	}
	nd, hd := filepath.Join(*dir, "nginx"), filepath.Join(*dir, "haproxy")
	for _, d := range []string{filepath.Join(nd, "logs"), filepath.Join(nd, "temp"), hd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	pem := filepath.Join(hd, "cafe.pem")
	if err := os.WriteFile(pem, append(append(slices.Clone(crt), '\n'), key...), 0o600); err != nil {
		log.Fatal(err)
	}

	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	p("# written by scripts/bench-gateway: the cafe HTTPRoute's routing")
	p("worker_processes auto;\ndaemon off;\npid %s/nginx.pid;\nerror_log %s/logs/error.log warn;", nd, nd)
	p("events { worker_connections 16384; multi_accept on; }")
	p("http {")
	p("  access_log off;\n  keepalive_timeout 75s;\n  keepalive_requests 1000;")
	p("  client_body_temp_path %[1]s/temp/body; proxy_temp_path %[1]s/temp/proxy; fastcgi_temp_path %[1]s/temp/fastcgi; uwsgi_temp_path %[1]s/temp/uwsgi; scgi_temp_path %[1]s/temp/scgi;", nd)
	p("  ssl_protocols TLSv1.2 TLSv1.3;\n  ssl_session_cache off;\n  ssl_session_tickets off;")
	for _, s := range c.services() {
		p("  upstream %s {", s.name)
		for _, ep := range s.eps {
			p("    server %s max_fails=0;", ep)
		}
		p("    keepalive 320;\n    keepalive_timeout 60s;\n    keepalive_requests 10000;\n  }")
	}
	p("  server {\n    listen %s default_server;\n    listen %s ssl default_server;", nl[0], nl[1])
	p("    ssl_certificate %s;\n    ssl_certificate_key %s;", c.cert, c.key)
	p("    return 404;\n  }")
	p("  server {\n    listen %s;\n    listen %s ssl;\n    server_name %s;", nl[0], nl[1], c.host)
	p("    ssl_certificate %s;\n    ssl_certificate_key %s;", c.cert, c.key)
	p("    proxy_http_version 1.1;\n    proxy_set_header Connection \"\";\n    proxy_set_header Host $host;")
	p("    proxy_buffering on;\n    location / { return 404; }")
	for _, s := range c.services() {
		p("    location = %s { proxy_pass http://%s; }", s.path, s.name)
		p("    location %s/ { proxy_pass http://%s; }", s.path, s.name)
	}
	p("  }\n}")
	if err := os.WriteFile(filepath.Join(nd, "nginx.conf"), []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}

	b.Reset()
	p("# written by scripts/bench-gateway: the cafe HTTPRoute's routing")
	p("global\n  maxconn 4096\n  pidfile %s/haproxy.pid\n  tune.ssl.default-dh-param 2048\n  ssl-default-bind-options no-tls-tickets", hd)
	p("defaults\n  mode http\n  timeout connect 5s\n  timeout client 75s\n  timeout server 60s\n  timeout http-keep-alive 75s\n  option http-keep-alive\n  http-reuse always")
	p("frontend cafe\n  bind %s\n  bind %s ssl crt %s alpn http/1.1", hl[0], hl[1], pem)
	p("  acl cafe req.hdr(host),field(1,:) -i %s", c.host)
	for _, s := range c.services() {
		p("  acl %[1]s path %[2]s\n  acl %[1]s path_beg %[2]s/", strings.TrimSuffix(s.name, "-svc"), s.path)
		p("  use_backend %s if cafe %s", s.name, strings.TrimSuffix(s.name, "-svc"))
	}
	p("  default_backend notfound\nbackend notfound\n  http-request return status 404")
	for _, s := range c.services() {
		p("backend %s\n  balance roundrobin", s.name)
		for i, ep := range s.eps {
			p("  server e%d %s", i, ep)
		}
	}
	if err := os.WriteFile(filepath.Join(hd, "haproxy.cfg"), []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Println(filepath.Join(nd, "nginx.conf"))
	fmt.Println(filepath.Join(hd, "haproxy.cfg"))
}

// load sends requests at a fixed total rate from conns keep-alive
// connections, each on its own schedule (conns/rate apart, from a common
// start; a late request is sent at once, not skipped, so the count is the
// rate times the duration). It prints: sent ok errors achieved_rps p50_ms p99_ms max_late_ms.
func load(args []string) {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	url := fs.String("url", "http://127.0.0.1:18390/tea", "URL")
	host := fs.String("host", "cafe.example.com", "Host header")
	rate := fs.Float64("rate", 2000, "requests per second, all connections together")
	dur := fs.Duration("duration", 20*time.Second, "how long")
	conns := fs.Int("conns", 16, "keep-alive connections")
	fs.Parse(args)
	interval := time.Duration(float64(*conns) / *rate * float64(time.Second))
	n := int(*rate * dur.Seconds() / float64(*conns))
	var ok, failed atomic.Int64
	lat := make([][]time.Duration, *conns)
	late := make([]time.Duration, *conns)
	start := time.Now().Add(50 * time.Millisecond)
	var wg sync.WaitGroup
	for c := range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true,
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: *host}}}
			// Spread the connections' schedules over one interval.
			first := start.Add(time.Duration(c) * interval / time.Duration(*conns))
			for i := range n {
				at := first.Add(time.Duration(i) * interval)
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
				} else if -d > late[c] {
					late[c] = -d
				}
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodGet, *url, nil)
				req.Host = *host
				resp, err := cl.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					continue
				}
				ok.Add(1)
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(f float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(f*float64(len(all))))]) / 1e6
	}
	fmt.Printf("%d %d %d %.0f %.3f %.3f %.1f\n", ok.Load()+failed.Load(), ok.Load(), failed.Load(),
		float64(ok.Load()+failed.Load())/elapsed.Seconds(), q(0.5), q(0.99), float64(slices.Max(late))/1e6)
}

// handshakes opens a new TCP connection per request for the duration, from
// conns workers: a full TLS handshake (no session cache, so no resumption;
// X25519 key exchange, which every side offers, so a side's choice of a
// costlier group does not count), then GET with Connection: close, and a
// 200 read to the end. It prints: handshakes errors per_second.
func handshakes(args []string) {
	fs := flag.NewFlagSet("handshakes", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18791", "HTTPS address")
	host := fs.String("host", "cafe.example.com", "server name and Host header")
	path := fs.String("path", "/tea", "request path")
	dur := fs.Duration("duration", 10*time.Second, "how long")
	conns := fs.Int("conns", 16, "concurrent connections")
	fs.Parse(args)
	cfg := &tls.Config{InsecureSkipVerify: true, ServerName: *host, CurvePreferences: []tls.CurveID{tls.X25519},
		NextProtos: []string{"http/1.1"}, SessionTicketsDisabled: true}
	req := []byte("GET " + *path + " HTTP/1.1\r\nHost: " + *host + "\r\nConnection: close\r\n\r\n")
	var done, failed atomic.Int64
	var lastErr atomic.Value
	deadline := time.Now().Add(*dur)
	start := time.Now()
	var wg sync.WaitGroup
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &net.Dialer{Timeout: 5 * time.Second}
			for time.Now().Before(deadline) {
				if err := oneTLS(d, *addr, cfg, req); err != nil {
					failed.Add(1)
					lastErr.Store(err.Error())
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if e, _ := lastErr.Load().(string); e != "" {
		fmt.Fprintln(os.Stderr, "last error:", e)
	}
	fmt.Printf("%d %d %.0f\n", done.Load(), failed.Load(), float64(done.Load())/time.Since(start).Seconds())
}

func oneTLS(d *net.Dialer, addr string, cfg *tls.Config, req []byte) error {
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if c.ConnectionState().DidResume {
		return errors.New("session resumed")
	}
	if _, err := c.Write(req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
