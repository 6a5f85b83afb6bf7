package gateway

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
)

// udpEcho is a UDP server that answers each datagram with its name, the
// address it came from and the datagram.
func udpEcho(t *testing.T, name string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(fmt.Appendf(nil, "%s %s %s", name, from, buf[:n]), from)
		}
	}()
	return pc.LocalAddr().String()
}

// picks hands out the values a test queued, in order; an empty queue is a
// test bug.
type picks struct {
	mu sync.Mutex
	q  []int
	t  *testing.T
}

func (p *picks) push(v ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.q = append(p.q, v...)
}

func (p *picks) pick(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.q) == 0 {
		p.t.Errorf("pick(%d) with no value queued: a session was made where none was expected", n)
		return 0
	}
	v := p.q[0]
	p.q = p.q[1:]
	return v % n
}

type udpRelayTest struct {
	t     *testing.T
	relay *UDPRelay
	addr  string
	snap  *atomic.Pointer[Snapshot]
	picks *picks
}

// startRelay serves a UDP data port on loopback for a UDPRoute with the
// given backends (name=weight), each a udpEcho.
func startRelay(t *testing.T, idle time.Duration, maxSessions int, backends ...string) *udpRelayTest {
	t.Helper()
	addrs := map[string]string{}
	for _, b := range backends {
		name, _, _ := strings.Cut(b, "=")
		addrs[name] = udpEcho(t, name)
	}
	svcs, slices := l4Services(corev1.ProtocolUDP, addrs)
	table, _ := BuildTable(World{Services: svcs}, []Attachment{{Route: udpAsHTTP(udpRoute("infra", "r", 0, nil, backends...))}})
	tables := map[int32]*Table{20001: table}
	var snap atomic.Pointer[Snapshot]
	snap.Store(&Snapshot{Tables: tables, UDP: map[int32]bool{20001: true}, Endpoints: ResolveEndpoints(tables, svcs, slices)})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &picks{t: t}
	r := NewUDPRelay(UDPRelayConfig{Conn: pc, DataPort: 20001, Load: snap.Load, Pick: p.pick, IdleTimeout: idle, MaxSessions: maxSessions,
		Logger: slog.New(slog.DiscardHandler)})
	done := make(chan error, 1)
	go func() { done <- r.Serve() }()
	t.Cleanup(func() {
		r.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &udpRelayTest{t: t, relay: r, addr: pc.LocalAddr().String(), snap: &snap, picks: p}
}

// client is one client address.
func (rt *udpRelayTest) client() *net.UDPConn {
	rt.t.Helper()
	c, err := net.Dial("udp", rt.addr)
	if err != nil {
		rt.t.Fatal(err)
	}
	rt.t.Cleanup(func() { c.Close() })
	return c.(*net.UDPConn)
}

// ask sends a datagram and returns the answer's backend name and the
// address the backend saw it from.
func (rt *udpRelayTest) ask(c *net.UDPConn, msg string) (backend, seenFrom string) {
	rt.t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		rt.t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		rt.t.Fatalf("%q: no answer: %v", msg, err)
	}
	f := strings.SplitN(string(buf[:n]), " ", 3)
	if len(f) != 3 || f[2] != msg {
		rt.t.Fatalf("%q: answer %q", msg, buf[:n])
	}
	return f[0], f[1]
}

// A client address is a session: its first datagram picks a backend by
// weight and opens one socket to it, its next datagrams and the answers go
// the same way; another client address picks again. Past the bound a new
// client's datagrams are dropped; a datagram no route takes too.
func TestUDPRelaySessions(t *testing.T) {
	rt := startRelay(t, time.Minute, 2, "a=1", "b=3", "zero=0")
	c1, c2, c3 := rt.client(), rt.client(), rt.client()

	rt.picks.push(0, 0) // backend: n=0 of total weight 4 falls on a; its only endpoint
	b1, from1 := rt.ask(c1, "one")
	rt.picks.push(1, 0) // n=1 falls on b
	b2, from2 := rt.ask(c2, "two")
	if b1 != "a" || b2 != "b" {
		t.Errorf("first datagrams answered by %s and %s, want a (pick 0 of 4) and b (pick 1)", b1, b2)
	}
	for i := range 3 {
		// No pick queued: a new session here would fail the test.
		if b, from := rt.ask(c1, fmt.Sprintf("again-%d", i)); b != "a" || from != from1 {
			t.Errorf("client 1 datagram %d: answered by %s, seen from %s; want a from %s (one socket per session)", i, b, from, from1)
		}
	}
	if _, from := rt.ask(c2, "again"); from != from2 {
		t.Errorf("client 2: seen from %s, want %s", from, from2)
	}
	if n := rt.relay.Sessions(); n != 2 {
		t.Errorf("%d sessions, want 2", n)
	}

	// The third client is past the bound of 2: dropped. Datagrams are read
	// in order, so once client 1's next answer is back the third's was
	// handled.
	if _, err := c3.Write([]byte("three")); err != nil {
		t.Fatal(err)
	}
	rt.ask(c1, "after-three")
	if n := rt.relay.Sessions(); n != 2 {
		t.Errorf("%d sessions after a third client past the bound, want 2", n)
	}
	c3.SetReadDeadline(time.Now())
	if n, err := c3.Read(make([]byte, 100)); err == nil {
		t.Errorf("client 3 past the bound got an answer of %d bytes", n)
	}

	// Backend a loses its endpoint: client 1's next datagram ends its
	// session and opens one to what the route serves now.
	next := *rt.snap.Load()
	next.Endpoints = map[BackendKey][]string{}
	for k, eps := range rt.snap.Load().Endpoints {
		if k.Service.Name != "a" {
			next.Endpoints[k] = eps
		}
	}
	rt.snap.Store(&next)
	rt.picks.push(1, 0)
	if b, _ := rt.ask(c1, "moved"); b != "b" {
		t.Errorf("client 1 after a lost its endpoint: answered by %s, want b", b)
	}
	if n := rt.relay.Sessions(); n != 2 {
		t.Errorf("%d sessions, want 2", n)
	}
}

// A session no datagram crossed for the idle timeout ends, and the client's
// next datagram picks again; with no route attached a datagram is dropped.
func TestUDPRelayIdleSessionsExpire(t *testing.T) {
	rt := startRelay(t, time.Second, 0, "a=1", "b=1")
	c := rt.client()
	rt.picks.push(0, 0)
	if b, _ := rt.ask(c, "first"); b != "a" {
		t.Errorf("first datagram answered by %s, want a", b)
	}
	testutil.Eventually(t, wait, "the idle session ended", func() error {
		if n := rt.relay.Sessions(); n != 0 {
			return fmt.Errorf("%d sessions", n)
		}
		return nil
	})
	rt.picks.push(1, 0)
	if b, _ := rt.ask(c, "second"); b != "b" {
		t.Errorf("after the session expired: answered by %s, want b (picked again)", b)
	}

	// No route: no session, so the datagram is dropped.
	empty, _ := BuildTable(World{}, nil)
	rt.snap.Store(&Snapshot{Tables: map[int32]*Table{20001: empty}, UDP: map[int32]bool{20001: true}})
	if _, err := rt.relay.session(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 9}, nil); err == nil {
		t.Error("a session without a route, want none")
	}
}
