// Command bench-ingress is the helper of scripts/bench-ingress.sh: it runs the
// pieces of the side-by-side benchmark of minikit's Ingress controller against
// Debian's nginx, all on loopback:
//
//	bench-ingress backend -addr 127.0.0.1:18081 -name backend-1
//	    a backend answering like nginxdemos/hello's plain-text page
//	bench-ingress proxy -addr 127.0.0.1:18090 -tls-addr 127.0.0.1:18091 ...
//	    minikit's proxy serving the cafe Ingress, endpoints given by flag
//	bench-ingress render -dir DIR -listen 127.0.0.1:18080 -tls-listen 127.0.0.1:18443 ...
//	    the nginx.conf minikit renders for the same objects, with its certificate files
//
// Both proxies get their configuration from the same API objects (the cafe
// Ingress, its Services, EndpointSlices and TLS Secret) through config.Build, so
// they route identically.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minikit/minikit/internal/ingress/config"
	"github.com/minikit/minikit/internal/ingress/httpproxy"
	"github.com/minikit/minikit/internal/ingress/nginxconf"
	"github.com/minikit/minikit/scripts/hellobackend"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: bench-ingress backend|proxy|render [flags]")
	}
	switch os.Args[1] {
	case "backend":
		hellobackend.Run(os.Args[2:], "127.0.0.1:18081")
	case "proxy":
		runProxy(os.Args[2:])
	case "render":
		render(os.Args[2:])
	default:
		log.Fatalf("unknown command %q", os.Args[1])
	}
}

// cafeFlags are the objects both proxies are configured from.
type cafeFlags struct {
	host, tea, coffee, cert, key string
	sslRedirect                  bool
}

func (c *cafeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.host, "host", "cafe.example.com", "virtual host")
	fs.StringVar(&c.tea, "tea", "127.0.0.1:18081,127.0.0.1:18082,127.0.0.1:18083", "endpoints of tea-svc")
	fs.StringVar(&c.coffee, "coffee", "127.0.0.1:18081,127.0.0.1:18082", "endpoints of coffee-svc")
	fs.StringVar(&c.cert, "cert", "", "TLS certificate (PEM) of cafe-secret")
	fs.StringVar(&c.key, "key", "", "TLS key (PEM) of cafe-secret")
	fs.BoolVar(&c.sslRedirect, "ssl-redirect", false, "keep ingress-nginx's HTTP->HTTPS redirect (off: both schemes serve /tea)")
}

func ptr[T any](v T) *T { return &v }

// objects returns the cafe: its Ingress (with TLS when a certificate is given),
// Services, one EndpointSlice per endpoint, and the Secret.
func (c *cafeFlags) objects() config.Input {
	in := config.Input{Class: config.DefaultClass, IngressClasses: []*networkingv1.IngressClass{{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec:       networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"},
	}}}
	ann := map[string]string{}
	if !c.sslRedirect {
		ann[config.AnnotationSSLRedirect] = "false"
	}
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cafe-ingress", Annotations: ann}}
	rule := networkingv1.IngressRule{Host: c.host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{}}}
	for _, svc := range []struct{ name, path, eps string }{{"tea-svc", "/tea", c.tea}, {"coffee-svc", "/coffee", c.coffee}} {
		rule.HTTP.Paths = append(rule.HTTP.Paths, networkingv1.HTTPIngressPath{Path: svc.path, PathType: ptr(networkingv1.PathTypeImplementationSpecific),
			Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc.name, Port: networkingv1.ServiceBackendPort{Number: 80}}}})
		in.Services = append(in.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc.name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}})
		for i, ep := range strings.Split(svc.eps, ",") {
			host, port, err := net.SplitHostPort(ep)
			if err != nil {
				log.Fatalf("endpoint %q: %v", ep, err)
			}
			p, _ := strconv.Atoi(port)
			in.EndpointSlices = append(in.EndpointSlices, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", svc.name, i), Labels: map[string]string{discoveryv1.LabelServiceName: svc.name}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(p))}},
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}},
			})
		}
	}
	ing.Spec.Rules = []networkingv1.IngressRule{rule}
	if c.cert != "" {
		crt, err := os.ReadFile(c.cert)
		if err != nil {
			log.Fatal(err)
		}
		key, err := os.ReadFile(c.key)
		if err != nil {
			log.Fatal(err)
		}
		in.Secrets = append(in.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cafe-secret"},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}})
		ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{c.host}, SecretName: "cafe-secret"}}
	}
	in.Ingresses = []*networkingv1.Ingress{ing}
	return in
}

func runProxy(args []string) {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18090", "HTTP listen address")
	tlsAddr := fs.String("tls-addr", "", "HTTPS listen address")
	procs := fs.Int("gomaxprocs", 0, "GOMAXPROCS (0: the runtime's default)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here until the proxy stops")
	traceFile := fs.String("trace", "", "write an execution trace here until the proxy stops")
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
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			log.Fatal(err)
		}
		trace.Start(f)
		defer trace.Stop()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := config.Build(c.objects())
	for _, p := range cfg.Problems {
		log.Printf("config problem: %s", p)
	}
	p, err := httpproxy.New(httpproxy.Config{Logger: logger, HSTS: true})
	if err != nil {
		log.Fatal(err)
	}
	p.Update(cfg)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	go func() { log.Fatal(p.Serve(ln)) }()
	if *tlsAddr != "" {
		tln, err := net.Listen("tcp", *tlsAddr)
		if err != nil {
			log.Fatal(err)
		}
		go func() { log.Fatal(p.ServeTLS(tln)) }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.Shutdown(sctx)
}

func render(args []string) {
	fs := flag.NewFlagSet("render", flag.ExitOnError)
	dir := fs.String("dir", "/tmp/peers-minikit/nginx", "nginx prefix: conf/, logs/, temp/ and certificates go here")
	listen := fs.String("listen", "127.0.0.1:18080", "HTTP listen")
	tlsListen := fs.String("tls-listen", "127.0.0.1:18443", "HTTPS listen")
	var c cafeFlags
	c.register(fs)
	fs.Parse(args)
	cfg := config.Build(c.objects())
	_, fakeCert, fakeKey, err := httpproxy.NewFakeCertificate()
	if err != nil {
		log.Fatal(err)
	}
	out, err := nginxconf.Render(cfg, nginxconf.Config{
		Listen: *listen, ListenTLS: *tlsListen, Prefix: *dir, Daemon: false,
		DefaultCertPEM: fakeCert, DefaultKeyPEM: fakeKey,
	})
	if err != nil {
		log.Fatal(err)
	}
	for name, data := range out.Files {
		path := filepath.Join(*dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(filepath.Join(*dir, nginxconf.ConfFile))
}
