package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// corednsAt starts the coredns image on Corefile text (its server block on
// port 0) and returns its UDP address.
func corednsAt(t *testing.T, corefile string) (*running, string) {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/coredns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/coredns/Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startWith(t, "registry.k8s.io/coredns/coredns:v1.12.0", []string{"-conf", "/etc/coredns/Corefile"}, nil,
		func(c *container) { c.root = root })
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.addrs["udp"]) != 1 {
		t.Fatalf("coredns listens on udp %v, want one address", r.addrs["udp"])
	}
	return r, r.addrs["udp"][0].String()
}

func query(t *testing.T, server, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	resp, _, err := new(dns.Client).Exchange(m, server)
	if err != nil {
		t.Fatalf("asking %s for %s: %v", server, name, err)
	}
	return resp
}

// The e2e suite's own DNS server (generateCoreDNSConfigmap): agnhost's
// /coredns with a hosts block answers its names, SERVFAIL for others (no
// fallthrough), and logs each query.
func TestCoreDNSHosts(t *testing.T) {
	r, addr := corednsAt(t, ".:0 {\n\thosts {\n\t\t1.1.1.1 notexistname.resolv.conf.local\n\t\t2001:db8::1 notexistname.resolv.conf.local\n\t}\n\tlog\n}")
	for _, c := range []struct {
		name  string
		qtype uint16
		rcode int
		want  string
	}{
		{"notexistname.resolv.conf.local.", dns.TypeA, dns.RcodeSuccess, "1.1.1.1"},
		{"NotExistName.Resolv.Conf.Local.", dns.TypeA, dns.RcodeSuccess, "1.1.1.1"},
		{"notexistname.resolv.conf.local.", dns.TypeAAAA, dns.RcodeSuccess, "2001:db8::1"},
		{"notexistname.resolv.conf.local.", dns.TypeMX, dns.RcodeSuccess, ""},
		{"other.example.", dns.TypeA, dns.RcodeServerFailure, ""},
	} {
		resp := query(t, addr, c.name, c.qtype)
		var got []string
		for _, rr := range resp.Answer {
			switch rr := rr.(type) {
			case *dns.A:
				got = append(got, rr.A.String())
			case *dns.AAAA:
				got = append(got, rr.AAAA.String())
			}
		}
		if resp.Rcode != c.rcode || strings.Join(got, " ") != c.want {
			t.Errorf("%s %s = %s %v, want %s %q", dns.TypeToString[c.qtype], c.name, dns.RcodeToString[resp.Rcode], got,
				dns.RcodeToString[c.rcode], c.want)
		}
	}
	if !strings.Contains(r.stdout.String(), `"A IN notexistname.resolv.conf.local. udp`) {
		t.Errorf("the log plugin did not log the query:\n%s", r.stdout.String())
	}
}

// hosts with fallthrough hands unknown names to forward.
func TestCoreDNSForward(t *testing.T) {
	_, upstream := corednsAt(t, ".:0 {\n\thosts {\n\t\t10.0.0.7 far.example\n\t}\n}")
	_, addr := corednsAt(t, ".:0 {\n\thosts {\n\t\t10.0.0.8 near.example\n\t\tfallthrough\n\t}\n\tforward . "+upstream+"\n}")
	for name, want := range map[string]string{"near.example.": "10.0.0.8", "far.example.": "10.0.0.7"} {
		resp := query(t, addr, name, dns.TypeA)
		if len(resp.Answer) != 1 || resp.Answer[0].(*dns.A).A.String() != want {
			t.Errorf("A %s = %v, want %s", name, resp.Answer, want)
		}
	}
}

// A Corefile with a directive the image does not have stops it with the
// plugin's name, as CoreDNS stops on a Corefile it cannot parse.
func TestCoreDNSUnknownDirective(t *testing.T) {
	for _, c := range []struct{ corefile, want string }{
		{". {\n\tetcd skydns.local\n}", "Corefile:2 - Error during parsing: Unknown directive 'etcd'"},
		{".:53 {\n\tforward . 10.0.0.1\n\tdnssec\n}", "Unknown directive 'dnssec'"},
		{". {\n\trewrite type A AAAA\n}", "plugin/rewrite: only name rules"},
		{". {\n\tkubernetes cluster.local {\n\t\tpods sometimes\n\t}\n}", "plugin/kubernetes: pods"},
	} {
		_, err := parseCorefile(c.corefile, func(string) ([]byte, error) { return nil, os.ErrNotExist })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parsing %q: %v, want %q", c.corefile, err, c.want)
		}
	}
	// The image logs the error and exits.
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "Corefile"), []byte(". {\n\tetcd\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	c := newContainer("registry.k8s.io/coredns/coredns", nil, "127.0.0.1", &stdout, &stderr)
	c.root = root
	if err := runCoreDNS(t.Context(), c, nil); err == nil || !strings.Contains(stderr.String(), "Unknown directive 'etcd'") {
		t.Errorf("running a Corefile with etcd: %v, log %q", err, stderr.String())
	}
}

// The Gateway API conformance suite's DNS backend: a whoami server block
// beside the root block. Whatever the type asked, whoami answers with the
// client's own address and source port in the additional section, under the
// lowercased name, over UDP and TCP alike.
func TestCoreDNSWhoami(t *testing.T) {
	r, udpAddr := corednsAt(t, ".:0 {\n\thosts {\n\t\t10.0.0.8 near.example\n\t}\n\tlog\n\terrors\n}\nfoo.bar.com:0 {\n  whoami\n}\n")
	r.mu.Lock()
	tcpAddr := r.addrs["tcp"][0].String()
	r.mu.Unlock()
	for _, c := range []struct {
		network, server string
		qtype           uint16
	}{
		{"udp", udpAddr, dns.TypeA},
		{"udp", udpAddr, dns.TypeTXT},
		{"tcp", tcpAddr, dns.TypeA},
	} {
		co, err := dns.Dial(c.network, c.server)
		if err != nil {
			t.Fatal(err)
		}
		m := new(dns.Msg)
		m.SetQuestion("Foo.Bar.Com.", c.qtype)
		resp, _, err := new(dns.Client).ExchangeWithConn(m, co)
		local := co.LocalAddr().String()
		co.Close()
		if err != nil {
			t.Fatalf("%s %s: %v", c.network, dns.TypeToString[c.qtype], err)
		}
		_, port, _ := strings.Cut(local, ":")
		want := []string{
			"foo.bar.com.\t0\tIN\tA\t127.0.0.1",
			"_" + c.network + ".foo.bar.com.\t0\tIN\tSRV\t0 0 " + port + " .",
		}
		var got []string
		for _, rr := range resp.Extra {
			got = append(got, rr.String())
		}
		if resp.Rcode != dns.RcodeSuccess || !resp.Authoritative || len(resp.Answer) != 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s %s foo.bar.com: rcode %s aa %t answer %v extra\n%s\nwant NOERROR aa, no answer, extra\n%s",
				c.network, dns.TypeToString[c.qtype], dns.RcodeToString[resp.Rcode], resp.Authoritative, resp.Answer,
				strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	// The root block is not whoami's.
	if resp := query(t, udpAddr, "near.example.", dns.TypeA); len(resp.Answer) != 1 || len(resp.Extra) != 0 {
		t.Errorf("A near.example. = %v extra %v, want the hosts entry only", resp.Answer, resp.Extra)
	}
	if _, err := parseCorefile("foo.bar.com {\n\twhoami extra\n}", nil); err == nil || !strings.Contains(err.Error(), "plugin/whoami") {
		t.Errorf("whoami with an argument: %v, want a plugin/whoami error", err)
	}
}
