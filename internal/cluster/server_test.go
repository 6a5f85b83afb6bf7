package cluster

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// What a server decides from its flags alone: the defaults it fills in, TLS
// or plain HTTP, and the refusals, each naming the flag.
func TestServerPlan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      ServerConfig
		loopback bool
		want     string // an error containing this; "" for accepted
	}{
		{name: "defaults", cfg: ServerConfig{}, loopback: true},
		{name: "localhost", cfg: ServerConfig{Listen: "localhost:6443"}, loopback: true},
		{name: "IPv6 loopback", cfg: ServerConfig{Listen: "[::1]:6443"}, loopback: true},
		{name: "a lab node", cfg: ServerConfig{Listen: "0.0.0.0:6443"}},
		{name: "an address", cfg: ServerConfig{Listen: "192.168.56.10:6443"}},
		{name: "HA first server", cfg: ServerConfig{Listen: "0.0.0.0:6443", ClusterInit: true}},
		{name: "no port", cfg: ServerConfig{Listen: "192.168.56.10"}, want: `parsing --listen "192.168.56.10"`},
		{name: "HA on loopback", cfg: ServerConfig{ClusterInit: true}, want: "--cluster-init and --join need --listen off loopback (got 127.0.0.1:6443)"},
		{name: "join on loopback", cfg: ServerConfig{Listen: "127.0.0.1:7443", Join: "https://192.168.56.10:6443"}, want: "need --listen off loopback"},
		{name: "datastore flags", cfg: ServerConfig{Listen: "0.0.0.0:6443", Datastore: "sqlite"}, want: `--datastore: unsupported value "sqlite"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			p, err := cfg.plan()
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.loopback != tc.loopback {
				t.Errorf("loopback %v, want %v", p.loopback, tc.loopback)
			}
			if cfg.DataDir != DefaultDataDir || cfg.Logger == nil || cfg.Listen == "" {
				t.Errorf("defaults not filled in: data dir %q, listen %q", cfg.DataDir, cfg.Listen)
			}
			if cfg.ServiceCIDR != netip.MustParsePrefix("10.96.0.0/12") || cfg.PodCIDR != netip.MustParsePrefix("10.244.0.0/16") {
				t.Errorf("ranges %s %s, want kubeadm's 10.96.0.0/12 and flannel's 10.244.0.0/16", cfg.ServiceCIDR, cfg.PodCIDR)
			}
			if p.validation.ServiceCIDR != cfg.ServiceCIDR {
				t.Errorf("validation's service CIDR %s, want %s", p.validation.ServiceCIDR, cfg.ServiceCIDR)
			}
		})
	}
	cfg := ServerConfig{ServiceCIDR: netip.MustParsePrefix("10.100.0.0/16"), PodCIDR: netip.MustParsePrefix("10.32.0.0/16"), NodePortMin: 31000, NodePortMax: 31999}
	p, err := cfg.plan()
	if err != nil {
		t.Fatal(err)
	}
	v := p.validation
	if v.ServiceCIDR != cfg.ServiceCIDR || v.NodePortMin != 31000 || v.NodePortMax != 31999 || cfg.PodCIDR.String() != "10.32.0.0/16" {
		t.Errorf("configured ranges not kept: validation %s %d-%d, pods %s", v.ServiceCIDR, v.NodePortMin, v.NodePortMax, cfg.PodCIDR)
	}
}

// The serving certificate names everything a client may dial: loopback,
// the listen and advertise addresses, --tls-san, the machine's addresses
// when listening on all of them, and the kubernetes Service pods use.
func TestServingHosts(t *testing.T) {
	cfg := ServerConfig{AdvertiseAddress: "192.168.56.10", ExtraSANs: []string{"api.example.com"},
		ServiceCIDR: netip.MustParsePrefix("10.100.0.0/16")}
	got := cfg.servingHosts("0.0.0.0", []string{"192.168.56.10", "10.0.2.15"})
	want := []string{"127.0.0.1", "localhost", "0.0.0.0", "api.example.com", "192.168.56.10", "192.168.56.10", "10.0.2.15",
		"10.100.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if !slices.Equal(got, want) {
		t.Errorf("servingHosts =\n %q\nwant\n %q", got, want)
	}
	// No service CIDR yet: the default range's first address.
	if got := (&ServerConfig{}).servingHosts("192.168.56.10", nil); !slices.Contains(got, "10.96.0.1") || !slices.Contains(got, "192.168.56.10") {
		t.Errorf("servingHosts = %q, want 192.168.56.10 and 10.96.0.1", got)
	}
}

func TestAdvertiseAddress(t *testing.T) {
	first := func() string { return "10.0.2.15" }
	nodeIP := netip.MustParseAddr("192.168.56.11")
	for _, tc := range []struct {
		name     string
		cfg      ServerConfig
		host     string
		loopback bool
		want     string
	}{
		{"--advertise-address wins", ServerConfig{AdvertiseAddress: "192.168.56.10", NodeIP: nodeIP}, "0.0.0.0", false, "192.168.56.10"},
		{"the node IP off loopback", ServerConfig{NodeIP: nodeIP}, "0.0.0.0", false, "192.168.56.11"},
		{"not the node IP on loopback", ServerConfig{NodeIP: nodeIP}, "127.0.0.1", true, "127.0.0.1"},
		{"the listen address", ServerConfig{}, "192.168.56.12", false, "192.168.56.12"},
		{"a wildcard: the first address", ServerConfig{}, "0.0.0.0", false, "10.0.2.15"},
		{"an IPv6 wildcard", ServerConfig{}, "::", false, "10.0.2.15"},
		{"no host", ServerConfig{}, "", false, "10.0.2.15"},
	} {
		if got := tc.cfg.advertiseAddress(tc.host, tc.loopback, first); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestAPIURL(t *testing.T) {
	for _, tc := range []struct {
		host string
		port int
		tls  bool
		want string
	}{
		{"127.0.0.1", 6443, false, "http://127.0.0.1:6443"},
		{"0.0.0.0", 6443, true, "https://127.0.0.1:6443"},
		{"::", 6443, true, "https://127.0.0.1:6443"},
		{"", 40001, false, "http://127.0.0.1:40001"},
		{"192.168.56.10", 6443, true, "https://192.168.56.10:6443"},
		{"::1", 6443, false, "http://[::1]:6443"},
	} {
		if got := apiURL(tc.host, tc.port, tc.tls); got != tc.want {
			t.Errorf("apiURL(%q, %d, %v) = %s, want %s", tc.host, tc.port, tc.tls, got, tc.want)
		}
	}
}

func TestKubernetesServiceAndDNSIPs(t *testing.T) {
	for cidr, want := range map[string][2]string{
		"10.96.0.0/12":  {"10.96.0.1", "10.96.0.10"},
		"10.100.7.0/24": {"10.100.7.1", "10.100.7.10"},
		"10.96.3.4/12":  {"10.96.0.1", "10.96.0.10"}, // unmasked
	} {
		p := netip.MustParsePrefix(cidr)
		if got := kubernetesServiceIP(p).String(); got != want[0] {
			t.Errorf("kubernetes Service of %s at %s, want %s", cidr, got, want[0])
		}
		if got := ClusterDNSIP(p).String(); got != want[1] {
			t.Errorf("kube-dns of %s at %s, want %s", cidr, got, want[1])
		}
	}
	if got := kubernetesServiceIP(netip.Prefix{}).String(); got != "10.96.0.1" {
		t.Errorf("kubernetes Service without a range at %s, want the default range's 10.96.0.1", got)
	}
}

func TestServerAddrs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "https://192.168.56.10:6443", want: []string{"192.168.56.10:6443"}},
		{in: "https://192.168.56.10:6443/", want: []string{"192.168.56.10:6443"}},
		{in: "https://api.example.com", want: []string{"api.example.com:443"}},
		{in: "https://192.168.56.10:6443, https://192.168.56.11:6443,https://192.168.56.12:6443",
			want: []string{"192.168.56.10:6443", "192.168.56.11:6443", "192.168.56.12:6443"}},
		{in: "", err: true},
		{in: "http://192.168.56.10:6443", err: true},
		{in: "192.168.56.10:6443", err: true},
		{in: "https://192.168.56.10:6443/api", err: true},
		{in: "https://192.168.56.10:6443,", err: true},
	} {
		got, err := serverAddrs(tc.in)
		switch {
		case tc.err && (err == nil || !strings.Contains(err.Error(), "--server must be an https:// URL")):
			t.Errorf("serverAddrs(%q) = %q, %v; want an error naming --server", tc.in, got, err)
		case !tc.err && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("serverAddrs(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestServerNodeName(t *testing.T) {
	if got := serverNodeName("Node1"); got != "node1" {
		t.Errorf("serverNodeName(Node1) = %q, want node1 (node names are lowercase)", got)
	}
	if got := serverNodeName(""); got == "" || got != strings.ToLower(got) {
		t.Errorf("serverNodeName(\"\") = %q, want the lowercased hostname", got)
	}
}
