package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// UDP listeners and UDPRoutes: a UDP data port is a socket of its own (a
// UDPRelay), not the HTTP server's. UDP has no connection, so the relay
// makes one per client address, as conntrack does: the first datagram from a
// client address opens a session, which picks a ready endpoint of a backend
// of the listener's route (by weight, as a TCP connection does) and a socket
// of its own connected to it; the client's datagrams go out on that socket,
// and what comes back on it goes to that client, from the address the client
// sent to (so conntrack un-DNATs the reply: the service proxy DNATed
// LB-IP:port to the node's address and data port). A session no datagram
// crossed, either way, for the idle timeout ends (its socket closed), and so
// does one whose endpoint the current snapshot no longer serves (its
// backend gone, its ReferenceGrant deleted, the endpoint not ready): the
// client's next datagram opens a new one. Sessions are bounded per data port;
// past the bound a new client's datagrams are dropped, as a full conntrack
// table drops them, and the sessions that exist keep working.
//
// A UDPRoute goes through the rules as a TCPRoute does (udpAsHTTP): same
// attachment, ReferenceGrants naming UDPRoute, only the oldest route of a
// listener served. A datagram no session can take (no route, an invalid
// backend picked by weight, no ready endpoint) is dropped: the client's read
// times out, as with a server that is not there.

const kindUDP = "UDPRoute"

// udpAsHTTP is the HTTPRoute that routes what a UDPRoute does.
func udpAsHTTP(u *gatewayv1.UDPRoute) *gatewayv1.HTTPRoute {
	rt := routeAsHTTP(kindUDP, u.ObjectMeta, u.Spec.CommonRouteSpec, nil)
	for _, r := range u.Spec.Rules {
		rt.Spec.Rules = append(rt.Spec.Rules, l4Rule(r.Name, r.BackendRefs))
	}
	return rt
}

// Defaults of a UDPRelay.
const (
	// UDPIdleTimeout ends a session no datagram crossed for this long (what
	// conntrack keeps an assured UDP flow for is 120s, an unreplied one 30s).
	UDPIdleTimeout = 60 * time.Second
	// UDPMaxSessions bounds a data port's sessions.
	UDPMaxSessions = 4096
	maxDatagram    = 1<<16 - 1
)

// UDPRelayConfig configures a UDP data port's relay.
type UDPRelayConfig struct {
	// Conn is the data port's socket; the relay owns it (Close closes it).
	Conn     net.PacketConn
	DataPort int32
	Load     func() *Snapshot
	// Dial opens a session's socket to an endpoint ("udp"; nil: the system's).
	Dial Dialer
	// Pick chooses uniformly in [0, n) (nil: math/rand).
	Pick        func(int) int
	IdleTimeout time.Duration // 0: UDPIdleTimeout
	MaxSessions int           // 0: UDPMaxSessions
	Logger      *slog.Logger
}

// UDPRelay serves one UDP data port.
type UDPRelay struct {
	cfg UDPRelayConfig
	pc  *packetConn

	mu       sync.Mutex // guards sessions and closed
	sessions map[string]*udpSession
	closed   bool
	wg       sync.WaitGroup // the sessions' reply pumps
}

type udpSession struct {
	key      string
	client   net.Addr
	local    net.IP // where the client sent to: the replies' source
	up       net.Conn
	endpoint string
	snap     *Snapshot // the snapshot the endpoint was last checked against
	last     atomic.Int64
}

func (s *udpSession) touch() { s.last.Store(time.Now().UnixNano()) }

// NewUDPRelay prepares a relay on cfg.Conn; Serve runs it.
func NewUDPRelay(cfg UDPRelayConfig) *UDPRelay {
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: dialTimeout}
		cfg.Dial = d.DialContext
	}
	if cfg.Pick == nil {
		cfg.Pick = rand.IntN
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = UDPIdleTimeout
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = UDPMaxSessions
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &UDPRelay{cfg: cfg, pc: newPacketConn(cfg.Conn), sessions: map[string]*udpSession{}}
}

// Serve relays datagrams until Close; it returns nil once closed.
func (r *UDPRelay) Serve() error {
	buf := make([]byte, maxDatagram)
	for {
		n, local, client, err := r.pc.readFrom(buf)
		if err != nil {
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("reading UDP data port %d: %w", r.cfg.DataPort, err)
		}
		r.forward(buf[:n], client, local)
	}
}

// forward sends one client datagram on its session's socket. A session that
// ended as the datagram came (idle at that moment) is made again once.
func (r *UDPRelay) forward(b []byte, client net.Addr, local net.IP) {
	for try := 0; ; try++ {
		s, err := r.session(client, local)
		if err != nil {
			r.cfg.Logger.Debug("UDP datagram dropped", "port", r.cfg.DataPort, "client", client.String(), "err", err)
			return
		}
		s.touch()
		_, err = s.up.Write(b)
		if err == nil {
			return
		}
		r.end(s)
		if !errors.Is(err, net.ErrClosed) || try > 0 {
			r.cfg.Logger.Debug("UDP session ended", "port", r.cfg.DataPort, "client", client.String(), "endpoint", s.endpoint, "err", err)
			return
		}
	}
}

// session is the client's session, made (or made again) when needed.
func (r *UDPRelay) session(client net.Addr, local net.IP) (*udpSession, error) {
	key := client.String()
	snap := r.cfg.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("the data port is closed")
	}
	if s := r.sessions[key]; s != nil {
		if s.snap == snap {
			return s, nil
		}
		if servesEndpoint(snap, r.cfg.DataPort, s.endpoint) {
			s.snap = snap
			return s, nil
		}
		// The endpoint is no longer the route's: end the session (its pump
		// sees the socket closed) and pick again.
		delete(r.sessions, key)
		s.up.Close()
	}
	if len(r.sessions) >= r.cfg.MaxSessions {
		return nil, fmt.Errorf("%d sessions, the most a UDP data port keeps", len(r.sessions))
	}
	if !snap.UDP[r.cfg.DataPort] {
		return nil, fmt.Errorf("data port %d is not a UDP listener's", r.cfg.DataPort)
	}
	ep, err := L4Endpoint(snap, r.cfg.DataPort, r.cfg.Pick)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := r.cfg.Dial(ctx, "udp", ep)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("opening a socket to %s: %w", ep, err)
	}
	s := &udpSession{key: key, client: client, local: local, up: up, endpoint: ep, snap: snap}
	s.touch()
	r.sessions[key] = s
	r.wg.Add(1)
	go r.pump(s)
	return s, nil
}

// pump sends what the endpoint answers to the client until the session is
// idle for the timeout or its socket fails or is closed.
func (r *UDPRelay) pump(s *udpSession) {
	defer r.wg.Done()
	defer r.end(s)
	buf := make([]byte, maxDatagram)
	for {
		if err := s.up.SetReadDeadline(time.Unix(0, s.last.Load()).Add(r.cfg.IdleTimeout)); err != nil {
			return
		}
		n, err := s.up.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, s.last.Load())) < r.cfg.IdleTimeout {
				continue // the client sent meanwhile: wait on
			}
			return
		}
		s.touch()
		if _, err := r.pc.writeTo(buf[:n], s.local, s.client); err != nil {
			r.cfg.Logger.Debug("UDP reply not sent", "port", r.cfg.DataPort, "client", s.client.String(), "err", err)
		}
	}
}

// end forgets a session and closes its socket.
func (r *UDPRelay) end(s *udpSession) {
	r.mu.Lock()
	if r.sessions[s.key] == s {
		delete(r.sessions, s.key)
	}
	r.mu.Unlock()
	s.up.Close()
}

// Sessions is the number of live sessions.
func (r *UDPRelay) Sessions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// Close closes the data port and every session, and waits for their pumps.
func (r *UDPRelay) Close() error {
	r.mu.Lock()
	r.closed = true
	err := r.cfg.Conn.Close()
	for k, s := range r.sessions {
		s.up.Close()
		delete(r.sessions, k)
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

// servesEndpoint reports whether ep is still a ready endpoint of a backend
// with weight of the data port's route.
func servesEndpoint(s *Snapshot, dataPort int32, ep string) bool {
	t := s.Tables[dataPort]
	if t == nil || !s.UDP[dataPort] {
		return false
	}
	act := t.Route(Request{Path: "/"})
	if act == nil {
		return false
	}
	for _, b := range act.Backends {
		if !b.Invalid && b.Weight > 0 && slices.Contains(s.Endpoints[b.Key()], ep) {
			return true
		}
	}
	return false
}

// packetConn reads a datagram with the address it was sent to and replies
// from that address (IP_PKTINFO, IPV6_PKTINFO): the data port listens on
// every address, and a reply whose source the kernel picks by route (another
// interface's address, for a client behind the CNI bridge) would not match
// the conntrack entry of the service proxy's DNAT, which drops it or sends it
// un-NATed. A socket where the control messages are not available (not a
// UDPConn, a kernel without them) replies from what the kernel picks.
type packetConn struct {
	net.PacketConn
	v4 *ipv4.PacketConn
	v6 *ipv6.PacketConn
}

func newPacketConn(c net.PacketConn) *packetConn {
	pc := &packetConn{PacketConn: c}
	uc, ok := c.(*net.UDPConn)
	if !ok {
		return pc
	}
	la, ok := uc.LocalAddr().(*net.UDPAddr)
	if !ok {
		return pc
	}
	// A wildcard "udp" socket is AF_INET6 (dual stack) unless the host has
	// no IPv6, when its address is 0.0.0.0; IPv4 packets on a dual-stack
	// socket carry IPV6_PKTINFO with a v4-mapped address, which Linux
	// also takes back as the source.
	if la.IP.To4() != nil {
		p := ipv4.NewPacketConn(uc)
		if p.SetControlMessage(ipv4.FlagDst, true) == nil {
			pc.v4 = p
		}
		return pc
	}
	p := ipv6.NewPacketConn(uc)
	if p.SetControlMessage(ipv6.FlagDst, true) == nil {
		pc.v6 = p
	}
	return pc
}

func (c *packetConn) readFrom(b []byte) (int, net.IP, net.Addr, error) {
	switch {
	case c.v4 != nil:
		n, cm, src, err := c.v4.ReadFrom(b)
		if cm != nil {
			return n, cm.Dst, src, err
		}
		return n, nil, src, err
	case c.v6 != nil:
		n, cm, src, err := c.v6.ReadFrom(b)
		if cm != nil {
			return n, cm.Dst, src, err
		}
		return n, nil, src, err
	}
	n, src, err := c.ReadFrom(b)
	return n, nil, src, err
}

func (c *packetConn) writeTo(b []byte, from net.IP, to net.Addr) (int, error) {
	if from != nil && !from.IsUnspecified() {
		switch {
		case c.v4 != nil:
			if n, err := c.v4.WriteTo(b, &ipv4.ControlMessage{Src: from}, to); err == nil {
				return n, nil
			}
		case c.v6 != nil:
			if n, err := c.v6.WriteTo(b, &ipv6.ControlMessage{Src: from}, to); err == nil {
				return n, nil
			}
		}
	}
	return c.WriteTo(b, to)
}
