package httpproxy

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minikit/minikit/internal/ingress/config"
)

// table is a compiled config: the config itself for routing, and for each
// upstream the runtime state (round-robin position, connection pools).
type table struct {
	cfg      *config.Config
	backends map[backendKey]*backend
	byName   map[string]*backend // upstream name (+ "/tls"), to find a backend in a newer table
	uses     map[poolKey]bool
}

type backendKey struct {
	up  *config.Upstream
	tls bool
}

// backend is an upstream's endpoints, each with its connection pool.
type backend struct {
	name string // the upstream's name, with "/tls" for HTTPS backends
	eps  []*pool
	next atomic.Uint32
}

// start is a request's position in the round robin.
func (b *backend) start() uint32 { return b.next.Add(1) - 1 }

func (b *backend) at(start uint32, attempt int) *pool {
	return b.eps[(int(start)+attempt)%len(b.eps)]
}

// pick returns the endpoint for the next attempt: the next in round-robin
// order from start that has not been tried yet (fresh), or, all tried, the
// next one again.
func (b *backend) pick(start uint32, tried []*pool) (pl *pool, fresh bool) {
	for i := range b.eps {
		pl := b.at(start, i)
		if !slices.Contains(tried, pl) {
			return pl, true
		}
	}
	return b.at(start, len(tried)), false
}

// current returns the newest version of backend b: a retry uses the endpoints
// of the table in force now, not of the one its request started with, so it
// does not retry endpoints that were removed meanwhile (terminating pods).
func (p *Proxy) current(b *backend) *backend {
	if nb := p.table.Load().byName[b.name]; nb != nil && len(nb.eps) > 0 {
		return nb
	}
	return b
}

// compile builds the runtime table for cfg, reusing the pools (and their idle
// connections) of endpoints that stay.
func (p *Proxy) compile(cfg *config.Config) *table {
	t := &table{cfg: cfg, backends: map[backendKey]*backend{}, byName: map[string]*backend{}, uses: map[poolKey]bool{}}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range cfg.Servers {
		for _, l := range append(s.Locations, s.Root) {
			if l.Upstream == nil {
				continue
			}
			k := backendKey{l.Upstream, l.BackendProtocol == "HTTPS"}
			if _, ok := t.backends[k]; ok {
				continue
			}
			b := &backend{name: l.Upstream.Name}
			if k.tls {
				b.name += "/tls"
			}
			for _, ep := range l.Upstream.Endpoints {
				pk := poolKey{addr: ep, tls: k.tls}
				pl := p.pools[pk]
				if pl == nil {
					pl = p.newPool(pk)
					p.pools[pk] = pl
				}
				t.uses[pk] = true
				b.eps = append(b.eps, pl)
			}
			t.backends[k] = b
			t.byName[b.name] = b
		}
	}
	return t
}

func (t *table) backend(l *config.Location) *backend {
	return t.backends[backendKey{l.Upstream, l.BackendProtocol == "HTTPS"}]
}

type poolKey struct {
	addr string
	tls  bool
}

// pool keeps the idle keep-alive connections to one endpoint, most recently used
// first (the warmest ones are reused; the oldest expire).
type pool struct {
	key    poolKey
	opts   *Config
	tlsCfg *tls.Config
	// ctx ends when the endpoint leaves the configuration: dials to it in
	// progress are abandoned (a pod whose network is gone never answers a SYN)
	// and the request moves on to another endpoint.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	idle   []*upConn
	closed bool
}

func (p *Proxy) newPool(k poolKey) *pool {
	pl := &pool{key: k, opts: &p.opts}
	pl.ctx, pl.cancel = context.WithCancel(context.Background())
	if k.tls {
		// As nginx's proxy_ssl_verify off: backends inside the cluster commonly use
		// self-signed certificates.
		pl.tlsCfg = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
	}
	return pl
}

// get returns an idle connection (reused=true) or dials a new one.
func (pl *pool) get(ctx context.Context) (*upConn, bool, error) {
	now := time.Now()
	pl.mu.Lock()
	for n := len(pl.idle); n > 0; n = len(pl.idle) {
		uc := pl.idle[n-1]
		pl.idle[n-1] = nil
		pl.idle = pl.idle[:n-1]
		if now.Sub(uc.idleSince) < pl.opts.UpstreamIdleTimeout {
			pl.mu.Unlock()
			return uc, true, nil
		}
		uc.nc.Close()
	}
	pl.mu.Unlock()
	if ctx.Done() == nil {
		ctx = pl.ctx
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(pl.ctx, cancel)()
	}
	nc, err := pl.opts.DialUpstream(ctx, "tcp", pl.key.addr)
	if err != nil {
		return nil, false, &upstreamError{op: "connecting to", addr: pl.key.addr, err: err}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if pl.tlsCfg != nil {
		host, _, _ := net.SplitHostPort(pl.key.addr)
		cfg := pl.tlsCfg.Clone()
		if net.ParseIP(host) == nil {
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		nc.SetDeadline(now.Add(pl.opts.ConnectTimeout))
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, false, &upstreamError{op: "connecting to", addr: pl.key.addr, err: err}
		}
		nc.SetDeadline(time.Time{})
		nc = tc
	}
	return &upConn{nc: nc, pool: pl, rd: reader{buf: make([]byte, 16<<10)}}, false, nil
}

// put returns a connection whose last exchange completed cleanly.
func (pl *pool) put(uc *upConn) {
	uc.requests++
	if uc.requests >= pl.opts.UpstreamKeepAliveRequests || uc.rd.buffered() > 0 {
		uc.nc.Close()
		return
	}
	uc.rd.r, uc.rd.w = 0, 0
	uc.idleSince = time.Now()
	pl.mu.Lock()
	if pl.closed || len(pl.idle) >= pl.opts.UpstreamMaxIdle {
		pl.mu.Unlock()
		uc.nc.Close()
		return
	}
	pl.idle = append(pl.idle, uc)
	pl.mu.Unlock()
}

// dropIdle closes the idle connections, keeping the pool open.
func (pl *pool) dropIdle() {
	pl.mu.Lock()
	idle := pl.idle
	pl.idle = nil
	pl.mu.Unlock()
	for _, uc := range idle {
		uc.nc.Close()
	}
}

func (pl *pool) close() {
	pl.cancel()
	pl.mu.Lock()
	idle := pl.idle
	pl.idle, pl.closed = nil, true
	pl.mu.Unlock()
	for _, uc := range idle {
		uc.nc.Close()
	}
}

// upConn is one connection to an endpoint.
type upConn struct {
	nc        net.Conn
	pool      *pool
	rd        reader
	requests  int
	headLen   int // length of the response head being relayed
	idleSince time.Time
	dl        deadlines
	hs        []header
}

// deadlines sets a connection's deadlines lazily: an absolute deadline of now+d
// is pushed out only once less than half of d remains, so a busy keep-alive
// connection touches its timers every d/2, not on every request. A timeout thus
// fires after between d/2 and d without progress.
type deadlines struct {
	read, write time.Time
}

func (d *deadlines) setRead(c net.Conn, now time.Time, timeout time.Duration) {
	if d.read.Sub(now) < timeout/2 {
		d.read = now.Add(timeout)
		c.SetReadDeadline(d.read)
	}
}

func (d *deadlines) setWrite(c net.Conn, now time.Time, timeout time.Duration) {
	if d.write.Sub(now) < timeout/2 {
		d.write = now.Add(timeout)
		c.SetWriteDeadline(d.write)
	}
}
