package dns

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// FuzzRequest feeds arbitrary datagrams to the request path (memo key, fast
// path, unpack, answer, forward, pack) and the TCP path: nothing may panic,
// every reply must unpack and carry the request's ID, and a memoised reply
// must equal the one computed afresh.
//
//	go test -run XXX -fuzz FuzzRequest -fuzztime 60s ./internal/dns/
func FuzzRequest(f *testing.F) {
	for _, w := range handlerRows {
		for _, edns := range []bool{false, true} {
			m := new(dns.Msg)
			m.SetQuestion(w.name, w.qtype)
			if edns {
				m.SetEdns0(1232, true)
			}
			b, err := m.Pack()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte{0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0x0c, 0, 1, 0, 1})
	up := fakeUpstream(f)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	objs := handlerFixture()
	client := netip.MustParseAddr("10.244.9.9")
	objs.Pods = append(objs.Pods, pod("test-1", "client", client.String()))
	s, err := New(Config{Upstreams: []netip.AddrPort{up}, Pods: PodsInsecure, Autopath: true, HostSearch: []string{"example.org"}, Logger: log,
		ReverseZones: []string{"0.10.in-addr.arpa", "ip6.arpa"}}, NewStaticSource(objs, true))
	if err != nil {
		f.Fatal(err)
	}
	s.rebuild()
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, pkt []byte) {
		sc := &udpScratch{}
		in := append([]byte(nil), pkt...)
		out, slow := s.handleUDP(ctx, in, sc, client)
		if slow != nil {
			out = slow()
		}
		if out != nil {
			check(t, pkt, out)
			// A second time: now possibly from the memo, which must agree.
			again, slow := s.handleUDP(ctx, in, sc, client)
			if slow != nil {
				again = slow()
			}
			if string(again) != string(out) && !forwarded(out) {
				t.Errorf("memoised reply differs:\n%x\n%x", out, again)
			}
		}
		req := new(dns.Msg)
		if req.Unpack(pkt) == nil {
			if m, _ := s.reply(ctx, s.cur.Load(), req, overTCP, client); m != nil {
				if _, err := m.Pack(); err != nil {
					t.Errorf("TCP reply does not pack: %v", err)
				}
			}
		}
	})
}

func check(t *testing.T, pkt, out []byte) {
	t.Helper()
	r := new(dns.Msg)
	if err := r.Unpack(out); err != nil {
		t.Fatalf("reply does not unpack: %v", err)
	}
	if len(pkt) >= 2 && r.Id != uint16(pkt[0])<<8|uint16(pkt[1]) {
		t.Errorf("reply ID %d, request %x", r.Id, pkt[:2])
	}
	if !r.Response {
		t.Errorf("reply without QR")
	}
}

// forwarded replies carry upstream TTLs, which may tick between two asks.
func forwarded(b []byte) bool { return len(b) > 3 && b[2]&0x04 == 0 }
