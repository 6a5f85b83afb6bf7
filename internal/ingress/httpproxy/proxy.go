// Package httpproxy is the Ingress controller's data plane: an HTTP/1.1 and HTTP/2
// reverse proxy that serves a config.Config, proxying straight to the ready
// endpoints of each backend (round robin, keep-alive connections), terminating
// TLS with SNI, redirecting to HTTPS, and answering 404/503/502/504 as nginx does.
//
// The configuration is one immutable table swapped atomically (Update): a request
// uses the table it started with, nothing is reloaded and no connection is
// dropped when Ingresses, Services, endpoints or Secrets change.
//
// HTTP/1.x is served by a hand-written proxy loop rather than net/http: one
// goroutine per client connection parses requests in place in a reused buffer,
// writes each upstream request with one write, and relays the response through
// the upstream connection's buffer, so a keep-alive request costs no allocation
// and the fewest system calls. (net/http's server and httputil.ReverseProxy cost
// several allocations, header maps and two transport goroutines per request,
// which measured at a third of nginx's throughput on this machine.) HTTP/2 (ALPN
// "h2" over TLS) goes through net/http's server and the same upstream pools.
package httpproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minikit/minikit/internal/ingress/config"
)

// Config tunes the proxy. Zero values take ingress-nginx's defaults.
type Config struct {
	Logger *slog.Logger
	// HTTPSPort is the HTTPS port written into redirects; 443 is left out (as
	// ingress-nginx does, so a NodePort never appears in a redirect).
	HTTPSPort int
	// ClientHeaderTimeout bounds reading a request head and waiting on an idle
	// keep-alive connection (nginx client_header_timeout, keepalive_timeout).
	ClientHeaderTimeout time.Duration
	// ClientBodyTimeout bounds each read of a request body.
	ClientBodyTimeout time.Duration
	// SendTimeout bounds each write to a client.
	SendTimeout time.Duration
	// ConnectTimeout, ReadTimeout and SendUpstreamTimeout are proxy_connect_timeout
	// (5s), proxy_read_timeout (60s) and proxy_send_timeout (60s).
	ConnectTimeout      time.Duration
	ReadTimeout         time.Duration
	SendUpstreamTimeout time.Duration
	// UpstreamIdleTimeout closes idle upstream connections (upstream-keepalive-timeout).
	UpstreamIdleTimeout time.Duration
	// UpstreamMaxIdle is the number of idle connections kept per endpoint
	// (upstream-keepalive-connections). Go's http.Transport keeps 2 by default,
	// which at 64 concurrent clients means a new upstream connection per request.
	UpstreamMaxIdle int
	// UpstreamKeepAliveRequests closes an upstream connection after this many requests.
	UpstreamKeepAliveRequests int
	// KeepAliveRequests closes a client connection after this many requests.
	KeepAliveRequests int
	// MaxHeaderBytes bounds a request head (nginx large_client_header_buffers 4 8k).
	MaxHeaderBytes int
	// MaxConns bounds concurrent client connections (nginx worker_connections).
	MaxConns int
	// HSTS adds Strict-Transport-Security to HTTPS answers of TLS hosts.
	HSTS bool
	// DefaultCertificate is served for unknown SNI names; nil generates the fake one.
	DefaultCertificate *tls.Certificate
	// DialUpstream connects to an endpoint, within ConnectTimeout; nil dials
	// with a net.Dialer. (The differential test against nginx dials endpoints
	// inside the network namespace it runs everything in.)
	DialUpstream func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (o *Config) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.ClientHeaderTimeout, 60*time.Second)
	def(&o.ClientBodyTimeout, 60*time.Second)
	def(&o.SendTimeout, 60*time.Second)
	def(&o.ConnectTimeout, 5*time.Second)
	def(&o.ReadTimeout, 60*time.Second)
	def(&o.SendUpstreamTimeout, 60*time.Second)
	def(&o.UpstreamIdleTimeout, 60*time.Second)
	if o.HTTPSPort == 0 {
		o.HTTPSPort = 443
	}
	if o.UpstreamMaxIdle == 0 {
		o.UpstreamMaxIdle = 320
	}
	if o.UpstreamKeepAliveRequests == 0 {
		o.UpstreamKeepAliveRequests = 10000
	}
	if o.KeepAliveRequests == 0 {
		o.KeepAliveRequests = 1000
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = 32 << 10
	}
	if o.MaxConns == 0 {
		o.MaxConns = 16384
	}
	if o.DialUpstream == nil {
		o.DialUpstream = (&net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	} else {
		dial, timeout := o.DialUpstream, o.ConnectTimeout
		o.DialUpstream = func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return dial(ctx, network, addr)
		}
	}
}

// Proxy serves the current table on any number of listeners.
type Proxy struct {
	opts     Config
	log      *slog.Logger
	table    atomic.Pointer[table]
	fakeCert *tls.Certificate
	tlsConf  *tls.Config
	h2       *http.Server
	h2conns  chan net.Conn
	grpcOnce [2]sync.Once
	grpcTr   [2]*http.Transport

	mu        sync.Mutex
	pools     map[poolKey]*pool
	listeners map[net.Listener]struct{}
	conns     map[*clientConn]struct{}
	closing   bool
	closed    atomic.Bool // closing, readable without the lock
	nconns    atomic.Int64
	wg        sync.WaitGroup
}

// New returns a proxy serving an empty configuration (everything 404).
func New(opts Config) (*Proxy, error) {
	opts.defaults()
	p := &Proxy{opts: opts, log: opts.Logger, pools: map[poolKey]*pool{},
		listeners: map[net.Listener]struct{}{}, conns: map[*clientConn]struct{}{}, h2conns: make(chan net.Conn)}
	if opts.DefaultCertificate != nil {
		p.fakeCert = opts.DefaultCertificate
	} else {
		c, _, _, err := NewFakeCertificate()
		if err != nil {
			return nil, err
		}
		p.fakeCert = &c
	}
	p.tlsConf = &tls.Config{
		GetCertificate: p.getCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
		MinVersion:     tls.VersionTLS12,
	}
	p.h2 = &http.Server{
		Handler:           http.HandlerFunc(p.serveH2),
		ReadHeaderTimeout: opts.ClientHeaderTimeout,
		IdleTimeout:       opts.ClientHeaderTimeout,
		MaxHeaderBytes:    opts.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	go p.h2.Serve(&chanListener{ch: p.h2conns, done: make(chan struct{})})
	p.table.Store(p.compile(config.Empty()))
	return p, nil
}

// Update swaps in a new configuration. Requests in flight finish on the table they
// started with; idle upstream connections to endpoints that are gone are closed.
func (p *Proxy) Update(cfg *config.Config) {
	t := p.compile(cfg)
	p.table.Store(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pl := range p.pools {
		if !t.uses[k] {
			pl.close()
			delete(p.pools, k)
		}
	}
}

// Config is the configuration being served.
func (p *Proxy) Config() *config.Config { return p.table.Load().cfg }

// Serve accepts plain HTTP connections on ln until Shutdown.
func (p *Proxy) Serve(ln net.Listener) error { return p.serve(ln, false) }

// ServeTLS accepts HTTPS connections on ln until Shutdown.
func (p *Proxy) ServeTLS(ln net.Listener) error { return p.serve(ln, true) }

var errClosed = errors.New("proxy: closed")

func (p *Proxy) serve(ln net.Listener, useTLS bool) error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return errClosed
	}
	p.listeners[ln] = struct{}{}
	p.mu.Unlock()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			p.mu.Lock()
			closing := p.closing
			p.mu.Unlock()
			if closing {
				return errClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if p.nconns.Add(1) > int64(p.opts.MaxConns) {
			p.nconns.Add(-1)
			c.Close()
			continue
		}
		go p.handle(c, useTLS)
	}
}

func (p *Proxy) handle(c net.Conn, useTLS bool) {
	defer p.nconns.Add(-1)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if useTLS {
		tc := tls.Server(c, p.tlsConf)
		c.SetDeadline(time.Now().Add(p.opts.ClientHeaderTimeout))
		if err := tc.Handshake(); err != nil {
			p.log.Debug("TLS handshake failed", "client", c.RemoteAddr(), "err", err)
			c.Close()
			return
		}
		c.SetDeadline(time.Time{})
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			// net/http's HTTP/2 server takes the connection from here.
			select {
			case p.h2conns <- tc:
			case <-time.After(time.Second):
				c.Close()
			}
			return
		}
		c = tc
	}
	cc := newClientConn(p, c, useTLS)
	if !p.track(cc, true) {
		c.Close()
		return
	}
	cc.serve()
	p.track(cc, false)
}

func (p *Proxy) track(cc *clientConn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closing {
			return false
		}
		p.conns[cc] = struct{}{}
		p.wg.Add(1)
		return true
	}
	delete(p.conns, cc)
	p.wg.Done()
	return true
}

// Shutdown stops accepting, closes idle client connections and waits (until ctx
// ends) for requests in flight; then it closes everything.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	p.closed.Store(true)
	for ln := range p.listeners {
		ln.Close()
	}
	for cc := range p.conns {
		cc.closeIfIdle()
	}
	p.mu.Unlock()
	h2err := p.h2.Shutdown(ctx)
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		p.mu.Lock()
		for cc := range p.conns {
			cc.c.Close()
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	for k, pl := range p.pools {
		pl.close()
		delete(p.pools, k)
	}
	p.mu.Unlock()
	return errors.Join(err, h2err)
}

// chanListener hands already accepted (and TLS-handshaken) connections to
// net/http's server.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{} }
