package lab

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/minikit/minikit/internal/pki"

	"github.com/miekg/dns"
	"k8s.io/client-go/tools/clientcmd"
)

// Info draws a lab from its state alone (no API): where to reach its API
// from the machine and from inside, its ranges and every host's address.
func TestInfoAddresses(t *testing.T) {
	l := testLab(t, Config{Name: "inf", Nodes: 3, Topology: TopologyRouted, PodNetwork: "vxlan"})
	l.state.Subnet2 = l.cfg.subnet2().String()
	l.state.PIDs["forwarder"] = -1 // recorded, not running
	in := l.state.Info(context.Background(), false)
	for what, tc := range map[string][2]string{
		"API":          {in.APIServer, "https://127.0.0.1:40001"},
		"internal API": {in.InternalAPIServer, "https://192.168.56.10:6443"},
		"context":      {in.Context, "minikit-inf"},
		"kubeconfig":   {in.Kubeconfig, l.Kubeconfig()},
		"LB pool":      {in.LoadBalancerPool, "192.168.56.240-192.168.56.250"},
		"services":     {in.ServiceCIDR, "10.96.0.0/12"},
		"pods":         {in.ClusterCIDR, "10.244.0.0/16"},
		"DNS":          {in.ClusterDNS, "10.96.0.10"},
		"underlay 2":   {in.Underlay2, "192.168.57.0/24"},
	} {
		if tc[0] != tc[1] {
			t.Errorf("%s %q, want %q", what, tc[0], tc[1])
		}
	}
	if in.Router == nil || in.Router.Address != "192.168.56.1,192.168.57.1" || in.Router.Netns != "inf-router" {
		t.Errorf("router %+v", in.Router)
	}
	var got []string
	for _, h := range in.Hosts {
		got = append(got, h.Name+"="+h.Role+"@"+h.Address)
	}
	want := "node1=node@192.168.56.10 node2=node@192.168.57.11 node3=node@192.168.57.12 client=client@192.168.56.100 " +
		"external=external@192.168.56.200 forwarder=forwarder@127.0.0.1:40001"
	if strings.Join(got, " ") != want {
		t.Errorf("hosts\n %s\nwant\n %s", strings.Join(got, " "), want)
	}
	if in.Running {
		t.Error("a lab with a stopped forwarder is Running")
	}

	var out bytes.Buffer
	PrintInfo(&out, in)
	for _, line := range []string{
		`lab "inf" (3 nodes) in ` + l.Dir(),
		"API: https://127.0.0.1:40001 (inside the lab: https://192.168.56.10:6443)",
		"services 10.96.0.0/12 (DNS 10.96.0.10), pods 10.244.0.0/16, LoadBalancer pool 192.168.56.240-192.168.56.250",
		"routed underlay: 192.168.56.0/24 and 192.168.57.0/24 joined by router (netns inf-router, 192.168.56.1,192.168.57.1)",
		"pod network vxlan",
		"kubeconfig: " + l.Kubeconfig(),
	} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("PrintInfo lacks %q:\n%s", line, out.String())
		}
	}
}

func TestInfoDualStack(t *testing.T) {
	l := testLab(t, Config{Name: "ds", Nodes: 2, IPFamily: IPFamilyDual})
	in := l.state.Info(context.Background(), false)
	if in.IPFamily != IPFamilyDual || in.Underlay6 != "fd00:56::/64" || in.ServiceCIDR6 != "fd00:10:96::/112" || in.ClusterCIDR6 != "fd00:10:244::/56" {
		t.Errorf("dual-stack info %q %q %q %q", in.IPFamily, in.Underlay6, in.ServiceCIDR6, in.ClusterCIDR6)
	}
	var out bytes.Buffer
	PrintInfo(&out, in)
	for _, line := range []string{
		"dual-stack: IPv6 underlay fd00:56::/64, services fd00:10:96::/112, pods fd00:10:244::/56\n",
		"LoadBalancer pool 192.168.56.240-192.168.56.250,fd00:56::240-fd00:56::250\n",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("PrintInfo lacks %q:\n%s", line, out.String())
		}
	}
	if in.LoadBalancerPool != l.LBPool() {
		t.Errorf("info's LoadBalancer pool %q, the servers' --lb-pool %q", in.LoadBalancerPool, l.LBPool())
	}
	// A node's pod CIDRs of both families, as the API gives them.
	for i := range in.Hosts {
		if in.Hosts[i].Name == "node2" {
			in.Hosts[i].PodCIDR, in.Hosts[i].PodCIDRs = "10.244.1.0/24", []string{"10.244.1.0/24", "fd00:10:244:1::/64"}
		}
	}
	out.Reset()
	PrintInfo(&out, in)
	if !strings.Contains(out.String(), "  pods 10.244.1.0/24 fd00:10:244:1::/64\n") {
		t.Errorf("PrintInfo lacks node2's pod CIDRs of both families:\n%s", out.String())
	}
	l.state.IPFamily = "" // a lab from before dual-stack
	if in := l.state.Info(context.Background(), false); in.IPFamily != IPFamilyIPv4 || in.ServiceCIDR6 != "" {
		t.Errorf("an old lab's info %q %q", in.IPFamily, in.ServiceCIDR6)
	}
	out.Reset()
	PrintInfo(&out, l.state.Info(context.Background(), false))
	if strings.Contains(out.String(), "dual-stack") {
		t.Errorf("an IPv4 lab's info says dual-stack:\n%s", out.String())
	}
}

func TestInfoIPv6(t *testing.T) {
	l := testLab(t, Config{Name: "v6", Nodes: 2, IPFamily: IPFamilyIPv6})
	in := l.state.Info(context.Background(), false)
	if in.IPFamily != IPFamilyIPv6 || in.Underlay6 != "fd00:56::/64" || in.ServiceCIDR != "fd00:10:96::/112" ||
		in.ClusterCIDR != "fd00:10:244::/56" || in.ClusterDNS != "fd00:10:96::a" || in.ServiceCIDR6 != "" {
		t.Errorf("IPv6 info %+v", in)
	}
	if in.LoadBalancerPool != l.LBPool() || in.LoadBalancerPool != "fd00:56::240-fd00:56::250" {
		t.Errorf("info's LoadBalancer pool %q, the servers' --lb-pool %q", in.LoadBalancerPool, l.LBPool())
	}
	var out bytes.Buffer
	PrintInfo(&out, in)
	for _, line := range []string{
		"services fd00:10:96::/112 (DNS fd00:10:96::a), pods fd00:10:244::/56, LoadBalancer pool fd00:56::240-fd00:56::250\n",
		"IPv6 single-stack: nodes' InternalIPs on the IPv6 underlay fd00:56::/64",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("PrintInfo lacks %q:\n%s", line, out.String())
		}
	}
}

// The external host answers for example.com as a real authoritative server
// would: its names at its own address, NXDOMAIN with the SOA for others,
// and nothing outside its zone.
func TestAnswerExternal(t *testing.T) {
	self := netip.MustParseAddr("192.168.56.200")
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		ans   string // the answer's first record's type, "" for none
		auth  bool   // an SOA in the authority section
	}{
		{"my.database.example.com.", dns.TypeA, dns.RcodeSuccess, "A", false},
		{"WWW.Example.COM.", dns.TypeA, dns.RcodeSuccess, "A", false},
		{"example.com.", dns.TypeSOA, dns.RcodeSuccess, "SOA", false},
		{"example.com.", dns.TypeNS, dns.RcodeSuccess, "NS", false},
		{"www.example.com.", dns.TypeAAAA, dns.RcodeSuccess, "", true},
		{"www.example.com.", dns.TypeNS, dns.RcodeSuccess, "", true},
		{"nope.example.com.", dns.TypeA, dns.RcodeNameError, "", true},
	} {
		q := new(dns.Msg)
		q.SetQuestion(tc.name, tc.qtype)
		m := answerExternal(q, self)
		var ans string
		if len(m.Answer) > 0 {
			ans = dns.TypeToString[m.Answer[0].Header().Rrtype]
		}
		if m.Rcode != tc.rcode || ans != tc.ans || !m.Authoritative || (len(m.Ns) == 1) != tc.auth {
			t.Errorf("%s %s: rcode %s answer %q authority %d; want %s %q %v", tc.name, dns.TypeToString[tc.qtype],
				dns.RcodeToString[m.Rcode], ans, len(m.Ns), dns.RcodeToString[tc.rcode], tc.ans, tc.auth)
		}
		if a, ok := firstA(m); ok && a != self {
			t.Errorf("%s at %s, want the external host %s", tc.name, a, self)
		}
	}
	two := new(dns.Msg)
	two.Question = []dns.Question{{Name: "example.com.", Qtype: dns.TypeA, Qclass: dns.ClassINET}, {Name: "www.example.com.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}
	if m := answerExternal(two, self); m.Rcode != dns.RcodeFormatError {
		t.Errorf("two questions: %s, want FORMERR", dns.RcodeToString[m.Rcode])
	}
}

func firstA(m *dns.Msg) (netip.Addr, bool) {
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			addr, _ := netip.AddrFromSlice(a.A.To4())
			return addr, true
		}
	}
	return netip.Addr{}, false
}

// The lab's own kubeconfig reaches the API through the forwarder with the
// server's token and CA, and belongs to the user who ran sudo.
func TestLabKubeconfig(t *testing.T) {
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = 65534, 65534
	}
	l := testLab(t, Config{Name: "kc", Owner: &User{Name: "u", UID: uid, GID: gid}})
	ca, err := pki.NewCA("minikit-ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.writeKubeconfig("https://127.0.0.1:40001", "tok", ca.CertPEM()); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	n := "minikit-kc"
	if cfg.CurrentContext != n || cfg.Contexts[n] == nil || cfg.Contexts[n].Cluster != n || cfg.Contexts[n].AuthInfo != n || cfg.Contexts[n].Namespace != "default" {
		t.Errorf("context %q %+v", cfg.CurrentContext, cfg.Contexts[n])
	}
	rc, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://127.0.0.1:40001" || rc.BearerToken != "tok" || !bytes.Equal(rc.CAData, ca.CertPEM()) {
		t.Errorf("client config host %q token %q CA %q", rc.Host, rc.BearerToken, rc.CAData)
	}
	fi, _ := os.Stat(l.Kubeconfig())
	if sys := fi.Sys().(*syscall.Stat_t); int(sys.Uid) != uid || int(sys.Gid) != gid || fi.Mode().Perm() != 0o600 {
		t.Errorf("owner %d:%d mode %v, want %d:%d 0600", sys.Uid, sys.Gid, fi.Mode().Perm(), uid, gid)
	}
	if _, err := l.Client(); err != nil {
		t.Errorf("a client from the lab's kubeconfig: %v", err)
	}
}

// reachable says whether a user can enter every directory above a file.
func TestReachable(t *testing.T) {
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755) // the test's own temporary directories
	os.Chmod(base, 0o755)
	open := filepath.Join(base, "open", "kubeconfig")
	closed := filepath.Join(base, "closed", "kubeconfig")
	os.Mkdir(filepath.Dir(open), 0o711)
	os.Mkdir(filepath.Dir(closed), 0o700)
	if !reachable(open, 0, 0) || !reachable(closed, 0, 0) {
		t.Error("root cannot reach a file")
	}
	other := os.Geteuid() + 4242
	if !reachable(open, other, other) {
		t.Errorf("%s not reachable through 0711 directories", open)
	}
	if reachable(closed, other, other) {
		t.Errorf("%s reachable through a 0700 directory of another user", closed)
	}
}
