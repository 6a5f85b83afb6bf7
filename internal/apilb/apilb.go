// Package apilb is the client-side failover for a cluster of several API
// servers, the way k3s's agents reach theirs: a TCP listener on loopback that
// splices every connection to the first server that accepts it, starting with
// the one that answered last. Clients (client-go, kubectl) keep one URL
// (https://127.0.0.1:PORT) and the servers' certificates name 127.0.0.1, so
// TLS is end to end and the proxy never sees a byte in the clear.
//
// It is hand-written because the only maintained implementations live inside
// k3s and RKE2 (pkg/agent/loadbalancer), not in a library; what it needs is
// a loop over net.Dial and two io.Copy calls. A server that is down refuses
// the connection (or times out after DialTimeout) and the next is tried; a
// connection already spliced to a server that dies ends, and the client's
// reconnect (client-go retries, informers re-watch) lands on the next one.
package apilb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DialTimeout bounds one attempt to reach a server before the next is tried.
const DialTimeout = 2 * time.Second

// DialFunc dials one server address ("host:port").
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Balancer chooses a server for each connection.
type Balancer struct {
	servers []string
	dial    DialFunc
	log     *slog.Logger
	current atomic.Int64 // index of the server that answered last
}

// New returns a balancer over servers ("host:port", in order of preference).
// dial nil dials from this process's network namespace.
func New(servers []string, dial DialFunc, log *slog.Logger) (*Balancer, error) {
	if len(servers) == 0 {
		return nil, errors.New("no API server address to balance")
	}
	for _, s := range servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("server address %q: %w", s, err)
		}
	}
	if dial == nil {
		d := &net.Dialer{}
		dial = d.DialContext
	}
	if log == nil {
		log = slog.Default()
	}
	return &Balancer{servers: append([]string(nil), servers...), dial: dial, log: log}, nil
}

// Servers are the addresses the balancer picks from.
func (b *Balancer) Servers() []string { return append([]string(nil), b.servers...) }

// Current is the server the next connection tries first.
func (b *Balancer) Current() string { return b.servers[b.current.Load()] }

// Dial connects to the first server that accepts, starting with the one that
// answered last, and returns the connection and the server's address.
func (b *Balancer) Dial(ctx context.Context) (net.Conn, string, error) {
	start := int(b.current.Load())
	var errs []error
	for i := range b.servers {
		idx := (start + i) % len(b.servers)
		addr := b.servers[idx]
		dctx, cancel := context.WithTimeout(ctx, DialTimeout)
		c, err := b.dial(dctx, "tcp", addr)
		cancel()
		if err == nil {
			if idx != start {
				b.log.Warn("API server failover", "from", b.servers[start], "to", addr)
				b.current.Store(int64(idx))
			}
			return c, addr, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", fmt.Errorf("no API server answers: %w", errors.Join(errs...))
}

// Serve accepts connections on ln and splices each to a server until ctx
// ends; it closes ln.
func (b *Balancer) Serve(ctx context.Context, ln net.Listener) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			u, _, err := b.Dial(ctx)
			if err != nil {
				b.log.Warn("forwarding an API connection", "err", err)
				return
			}
			defer u.Close()
			Splice(ctx, c, u)
		}()
	}
}

// Splice copies both ways between a and b until both directions end or ctx
// does, half-closing each direction as it finishes.
func Splice(ctx context.Context, a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			a.Close()
			b.Close()
		case <-done:
		}
	}()
	defer close(done)
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		}
	}
	go pipe(a, b)
	go pipe(b, a)
	wg.Wait()
}
