package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TLS listeners (tls.mode Passthrough) and TLSRoutes: the data port never
// terminates TLS. It reads the client's first flight up to the end of the
// ClientHello, takes the server name (SNI) from it, picks the TLSRoute
// backend that name routes to, replays the bytes it read to a ready endpoint
// and splices the two connections until both sides are done. The backend
// holds the certificate and does the handshake; the Gateway sees only the
// ClientHello.
//
// A TLSRoute goes through the rules as the HTTPRoute that says the same
// (tlsAsHTTP): its hostnames, one rule matching everything, its backendRefs.
// So attachment, hostname intersection, ReferenceGrants (which must name
// TLSRoute) and ResolvedRefs are the HTTPRoute's, and the routing Table of a
// passthrough port is the HTTP one asked with the server name as the host and
// path "/": an exact hostname first, then the longest wildcard, then a route
// without hostnames; among equals the older route. A connection no route
// takes (no server name, a name no hostname covers, no valid backend or
// ready endpoint) is closed without a byte written: the client sees the
// handshake end (EOF), as from a server that refuses the name.

const kindTLS = "TLSRoute"

// tlsMode is a listener's tls.mode with the API's default (Terminate).
func tlsMode(l gatewayv1.Listener) gatewayv1.TLSModeType {
	if l.TLS == nil {
		return gatewayv1.TLSModeTerminate
	}
	return deref(l.TLS.Mode, gatewayv1.TLSModeTerminate)
}

// tlsAsHTTP is the HTTPRoute that routes what a TLSRoute does.
func tlsAsHTTP(t *gatewayv1.TLSRoute) *gatewayv1.HTTPRoute {
	rt := routeAsHTTP(kindTLS, t.ObjectMeta, t.Spec.CommonRouteSpec, t.Spec.Hostnames)
	for _, r := range t.Spec.Rules {
		rt.Spec.Rules = append(rt.Spec.Rules, l4Rule(r.Name, r.BackendRefs))
	}
	return rt
}

// Limits on what is read before a connection is routed.
const (
	maxHelloBytes   = 1 << 16 // a ClientHello larger than this is refused
	maxRecordLength = 1<<14 + 256
	helloTimeout    = 10 * time.Second
	dialTimeout     = 10 * time.Second
)

// Record and handshake types of TLS (RFC 8446 5.1, 4).
const (
	recordHandshake    = 22
	handshakeHello     = 1
	extensionSNI       = 0
	serverNameHostName = 0
)

// ReadClientHello reads TLS records from r until they hold a whole
// ClientHello, which may be split over several records (a fragmented
// handshake), and returns every byte it read (to replay to the backend) and
// the server name the hello asks for ("" when it carries no server_name
// extension). It reads nothing past the record that ends the ClientHello.
func ReadClientHello(r io.Reader) (raw []byte, serverName string, err error) {
	var hs []byte
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return raw, "", fmt.Errorf("reading a TLS record header: %w", err)
		}
		raw = append(raw, hdr[:]...)
		if hdr[0] != recordHandshake {
			return raw, "", fmt.Errorf("record type %d is not a handshake: not a TLS ClientHello", hdr[0])
		}
		n := int(binary.BigEndian.Uint16(hdr[3:5]))
		if n == 0 || n > maxRecordLength {
			return raw, "", fmt.Errorf("TLS record length %d is out of range", n)
		}
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw, "", fmt.Errorf("reading a TLS record of %d bytes: %w", n, err)
		}
		hs = append(hs, raw[start:]...)
		if len(hs) < 4 {
			continue
		}
		if hs[0] != handshakeHello {
			return raw, "", fmt.Errorf("handshake message type %d is not a ClientHello", hs[0])
		}
		size := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if size > maxHelloBytes {
			return raw, "", fmt.Errorf("ClientHello of %d bytes is too large", size)
		}
		if len(hs) < 4+size {
			continue
		}
		name, err := helloServerName(hs[4 : 4+size])
		return raw, name, err
	}
}

// helloServerName parses a ClientHello's body for its host_name server name.
func helloServerName(b []byte) (string, error) {
	p := parser{b: b}
	p.skip(2 + 32) // legacy_version, random
	p.skip(p.u8()) // legacy_session_id
	p.skip(p.u16())
	p.skip(p.u8()) // legacy_compression_methods
	if p.err == nil && len(p.b) == 0 {
		return "", nil // no extensions at all
	}
	exts := parser{b: p.bytes(p.u16())}
	if p.err != nil {
		return "", p.err
	}
	for len(exts.b) > 0 && exts.err == nil {
		typ, data := exts.u16(), exts.bytes(exts.u16())
		if typ != extensionSNI || exts.err != nil {
			continue
		}
		list := parser{b: data}
		names := parser{b: list.bytes(list.u16())}
		for len(names.b) > 0 && names.err == nil && list.err == nil {
			kind, name := names.u8(), names.bytes(names.u16())
			if names.err == nil && kind == serverNameHostName {
				if len(name) == 0 {
					return "", errors.New("ClientHello: empty server name")
				}
				return string(name), nil
			}
		}
		return "", errors.Join(list.err, names.err, errors.New("ClientHello: server_name extension without a host name"))
	}
	return "", exts.err
}

// parser reads big-endian fields; the first short read sets err and every
// later read returns zero.
type parser struct {
	b   []byte
	err error
}

func (p *parser) bytes(n int) []byte {
	if p.err != nil {
		return nil
	}
	if n > len(p.b) {
		p.err = errors.New("ClientHello is truncated")
		p.b = nil
		return nil
	}
	out := p.b[:n]
	p.b = p.b[n:]
	return out
}

func (p *parser) skip(n int) { p.bytes(n) }

func (p *parser) u8() int {
	b := p.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (p *parser) u16() int {
	b := p.bytes(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}

// SplitPassthrough wraps a data port's listener: a connection accepted while
// the snapshot says the port is a TLS passthrough listener's is routed by
// its server name and spliced to a backend here (never handed to the HTTP
// server), one accepted while it says the port is a TCP listener's is
// spliced to its route's backend (serveTCP); any other connection is
// returned as it is. Closing the listener
// closes the connections it is splicing, so a closed data port leaves none
// behind.
func SplitPassthrough(ln net.Listener, dataPort int32, load func() *Snapshot, dial Dialer, log *slog.Logger) net.Listener {
	if dial == nil {
		d := &net.Dialer{Timeout: dialTimeout}
		dial = d.DialContext
	}
	return &passthroughListener{Listener: ln, port: dataPort, load: load, dial: dial, log: log, conns: map[net.Conn]struct{}{}}
}

type passthroughListener struct {
	net.Listener
	port int32
	load func() *Snapshot
	dial Dialer
	log  *slog.Logger

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
}

func (l *passthroughListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		s := l.load()
		serve, what := l.serve, "passthrough"
		switch {
		case s.Passthrough[l.port]:
		case s.TCP[l.port]:
			serve, what = l.serveTCP, "TCP"
		default:
			return c, nil
		}
		if !l.track(c) {
			c.Close()
			continue
		}
		go func() {
			defer l.untrack(c)
			if err := serve(c); err != nil {
				l.log.Debug(what+" connection refused", "port", l.port, "client", c.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

func (l *passthroughListener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *passthroughListener) untrack(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
}

func (l *passthroughListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	return err
}

// serve routes one client connection and splices it; an error means the
// client was refused (the connection is closed without a reply).
func (l *passthroughListener) serve(c net.Conn) error {
	defer c.Close()
	if err := c.SetReadDeadline(time.Now().Add(helloTimeout)); err != nil {
		return err
	}
	hello, name, err := ReadClientHello(c)
	if err != nil {
		return err
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	ep, err := PassthroughEndpoint(l.load(), l.port, name, rand.IntN)
	if err != nil {
		return err
	}
	if err := l.spliceTo(c, ep, hello); err != nil {
		return fmt.Errorf("server name %q: %w", name, err)
	}
	return nil
}

// PassthroughEndpoint is the "ip:port" of the endpoint a TLS connection
// asking for serverName is spliced to on a passthrough data port; pick(n)
// chooses uniformly in [0, n) (the backend by weight, then the endpoint).
func PassthroughEndpoint(s *Snapshot, dataPort int32, serverName string, pick func(int) int) (string, error) {
	t := s.Tables[dataPort]
	if t == nil {
		return "", fmt.Errorf("no TLS listener is served on data port %d", dataPort)
	}
	act := t.Route(Request{Host: strings.ToLower(serverName), Path: "/"})
	if act == nil {
		return "", fmt.Errorf("no TLSRoute serves server name %q", serverName)
	}
	return endpointOf(s, act, pick)
}

// splice copies both ways until both directions end; the end of one
// direction is passed on as a half close (FIN), as TLS close_notify and
// protocols that read to EOF need.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	one := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
			return
		}
		// An error (a reset) ends both directions.
		a.Close()
		b.Close()
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
