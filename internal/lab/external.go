package lab

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// ExternalZone is the zone the external host serves authoritatively.
const ExternalZone = "example.com."

// RunExternal is the lab's "machine outside the cluster": an authoritative DNS
// server for example.com (my.database.example.com and www.example.com point at
// itself) and an HTTP service that names itself and the client address it saw,
// the target of ExternalName Services and of the cluster DNS's upstream forwarding.
func RunExternal(ctx context.Context, self netip.Addr, log *slog.Logger) error {
	mux := dns.NewServeMux()
	mux.HandleFunc(ExternalZone, func(w dns.ResponseWriter, r *dns.Msg) {
		w.WriteMsg(answerExternal(r, self))
	})
	mux.HandleFunc(".", func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeRefused)
		w.WriteMsg(m)
	})
	errc := make(chan error, 3)
	var servers []*dns.Server
	for _, netw := range []string{"udp", "tcp"} {
		s := &dns.Server{Addr: ":53", Net: netw, Handler: mux}
		servers = append(servers, s)
		go func() { errc <- s.ListenAndServe() }()
	}
	hs := &http.Server{Addr: ":80", ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "external host %s (my.database.example.com)\nclient_address=%s\nhost=%s\nuri=%s\n", self, r.RemoteAddr, r.Host, r.RequestURI)
	})}
	go func() { errc <- hs.ListenAndServe() }()
	log.Info("external host serving", "dns", ExternalZone, "address", self)
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil {
			return err
		}
	}
	for _, s := range servers {
		s.Shutdown()
	}
	return hs.Close()
}

func answerExternal(r *dns.Msg, self netip.Addr) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	if len(r.Question) != 1 {
		m.SetRcode(r, dns.RcodeFormatError)
		return m
	}
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	soa := &dns.SOA{Hdr: dns.RR_Header{Name: ExternalZone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
		Ns: "ns." + ExternalZone, Mbox: "hostmaster." + ExternalZone, Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 60}
	hosts := map[string]bool{ExternalZone: true, "my.database." + ExternalZone: true, "www." + ExternalZone: true, "ns." + ExternalZone: true}
	if !hosts[name] {
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa}
		return m
	}
	switch q.Qtype {
	case dns.TypeA, dns.TypeANY:
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IP(self.AsSlice())})
	case dns.TypeSOA:
		if name == ExternalZone {
			m.Answer = append(m.Answer, soa)
		} else {
			m.Ns = []dns.RR{soa}
		}
	case dns.TypeNS:
		if name == ExternalZone {
			m.Answer = append(m.Answer, &dns.NS{Hdr: dns.RR_Header{Name: ExternalZone, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: 60}, Ns: "ns." + ExternalZone})
		} else {
			m.Ns = []dns.RR{soa}
		}
	default:
		m.Ns = []dns.RR{soa}
	}
	return m
}

// startExternal runs the external host's services in its namespace.
func (l *Lab) startExternal() error {
	return l.start(External, "external services", l.cfg.Binary, "__lab-external", "--address", l.Addr(External).String())
}
