package lab

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// defaultConfig is cfg after defaults, failing the test on an error.
func defaultConfig(t *testing.T, cfg Config) Config {
	t.Helper()
	if cfg.Binary == "" {
		cfg.Binary = "/usr/local/bin/minikit"
	}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestConfigDefaults(t *testing.T) {
	c := defaultConfig(t, Config{})
	want := Config{Name: "lab", Nodes: 2, Servers: 1, Datastore: "bolt", Dir: filepath.Join(DefaultDir, "lab"),
		Binary: "/usr/local/bin/minikit", Subnet: netip.MustParsePrefix("192.168.56.0/24"),
		ProxyMode: "iptables", PodNetwork: "host-gw", Topology: TopologyFlat}
	c.Logger = nil
	if c.Name != want.Name || c.Nodes != want.Nodes || c.Servers != want.Servers || c.Datastore != want.Datastore ||
		c.Dir != want.Dir || c.Subnet != want.Subnet || c.ProxyMode != want.ProxyMode || c.PodNetwork != want.PodNetwork || c.Topology != want.Topology {
		t.Errorf("defaults\n %+v\nwant\n %+v", c, want)
	}
	if c := defaultConfig(t, Config{Name: "np"}); c.Dir != filepath.Join(DefaultDir, "np") {
		t.Errorf("lab np's directory %s, want %s", c.Dir, filepath.Join(DefaultDir, "np"))
	}
	kept := defaultConfig(t, Config{Name: "x", Nodes: 5, Servers: 3, Dir: "/tmp/x", Subnet: netip.MustParsePrefix("10.0.5.0/24"),
		ProxyMode: "nftables", PodNetwork: "vxlan", Topology: TopologyRouted})
	if kept.Nodes != 5 || kept.Servers != 3 || kept.Dir != "/tmp/x" || kept.Subnet.String() != "10.0.5.0/24" ||
		kept.ProxyMode != "nftables" || kept.PodNetwork != "vxlan" || kept.Topology != TopologyRouted {
		t.Errorf("given values were changed: %+v", kept)
	}
}

// Nodes spread over the zones round-robin, three zones by default (one per
// node in a smaller lab), as a multi-zone cloud cluster's nodes are labelled.
func TestNodeZones(t *testing.T) {
	for nodes, want := range map[int]int{1: 1, 2: 2, 3: 3, 6: 3} {
		if c := defaultConfig(t, Config{Nodes: nodes}); c.Zones != want {
			t.Errorf("a %d-node lab spans %d zones by default, want %d", nodes, c.Zones, want)
		}
	}
	for _, tc := range []struct {
		nodes, zones int
		want         []string
	}{
		{3, 3, []string{"zone-1", "zone-2", "zone-3"}},
		{5, 2, []string{"zone-1", "zone-2", "zone-1", "zone-2", "zone-1"}},
		{2, 1, []string{"zone-1", "zone-1"}},
		{2, 0, []string{"", ""}}, // a lab recorded before zones
	} {
		var got []string
		for i := 1; i <= tc.nodes; i++ {
			got = append(got, NodeZone(i, tc.zones))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%d nodes in %d zones: %q, want %q", tc.nodes, tc.zones, got, tc.want)
		}
	}
	for name, want := range map[string]int{"node1": 1, "node12": 12, "node": 0, "node01": 0, "client": 0, "node0": 0} {
		if i, ok := nodeIndex(name); i != want && ok || ok != (want > 0) {
			t.Errorf("nodeIndex(%q) = %d, %v; want %d", name, i, ok, want)
		}
	}
}

// Every refusal names the flag or value that is wrong.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Nodes: 51}, "a lab has 1 to 50 nodes, not 51"},
		{Config{Nodes: -1}, "a lab has 1 to 50 nodes, not -1"},
		{Config{Servers: -1}, "--servers -1: a lab of 2 nodes has 1 to 2 servers"},
		{Config{Name: "a-name-longer-than-twenty"}, `lab name "a-name-longer-than-twenty" must be at most 20 characters`},
		{Config{Name: "a.b"}, `lab name "a.b"`},
		{Config{Name: "a/b"}, `lab name "a/b"`},
		{Config{Name: "a b"}, `lab name "a b"`},
		{Config{ProxyMode: "ipvs"}, `unknown proxy mode "ipvs": want iptables or nftables`},
		{Config{PodNetwork: "udp"}, `unknown pod network "udp": want host-gw or vxlan`},
		{Config{Topology: "star"}, `unknown topology "star": want flat or routed`},
		{Config{Nodes: 3, Zones: 4}, "--zones 4: a lab of 3 nodes spans 1 to 3 zones"},
		{Config{Zones: -1}, "--zones -1: a lab of 2 nodes spans 1 to 2 zones"},
		{Config{Topology: TopologyRouted, Subnet: netip.MustParsePrefix("192.168.56.0/25")}, "the routed topology's underlay subnet 192.168.56.0/25 must be an IPv4 prefix of /16 to /24"},
		{Config{Topology: TopologyRouted, Subnet: netip.MustParsePrefix("10.0.0.0/8")}, "must be an IPv4 prefix of /16 to /24"},
		{Config{Topology: TopologyRouted, Subnet: netip.MustParsePrefix("fd00::/64")}, "must be an IPv4 prefix"},
		{Config{IPFamily: IPFamilyIPv6, Servers: 3, Nodes: 3}, "a ipv6 lab is built only with --topology flat and one bbolt server"},
		{Config{IPFamily: "ipv5"}, `unknown IP family "ipv5": want ipv4 or dual or ipv6`},
	} {
		c := tc.cfg
		c.Binary = "/bin/true"
		if err := c.defaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

// A lab's addresses follow a Vagrant private network's: nodes from .10,
// the client at .100, the external host at .200, LoadBalancer IPs .240-.250.
func TestAddresses(t *testing.T) {
	for _, tc := range []struct {
		subnet string
		want   map[string]string
		pool   string
	}{
		{"192.168.56.0/24", map[string]string{"node1": "192.168.56.10", "node2": "192.168.56.11", "node9": "192.168.56.18",
			Client: "192.168.56.100", External: "192.168.56.200"}, "192.168.56.240-192.168.56.250"},
		{"10.0.5.0/24", map[string]string{"node1": "10.0.5.10", "node3": "10.0.5.12", Client: "10.0.5.100", External: "10.0.5.200"},
			"10.0.5.240-10.0.5.250"},
		{"172.16.7.99/24", map[string]string{"node1": "172.16.7.10", External: "172.16.7.200"}, "172.16.7.240-172.16.7.250"}, // unmasked
		{"10.9.0.0/16", map[string]string{"node2": "10.9.0.11", Client: "10.9.0.100"}, "10.9.0.240-10.9.0.250"},
	} {
		l := &Lab{cfg: defaultConfig(t, Config{Nodes: 9, Subnet: netip.MustParsePrefix(tc.subnet)})}
		for host, want := range tc.want {
			if got := l.Addr(host).String(); got != want {
				t.Errorf("%s: %s at %s, want %s", tc.subnet, host, got, want)
			}
		}
		if got := l.LBPool(); got != tc.pool {
			t.Errorf("%s: LoadBalancer pool %s, want %s", tc.subnet, got, tc.pool)
		}
	}
	dual := &Lab{cfg: defaultConfig(t, Config{Nodes: 2, IPFamily: IPFamilyDual})}
	if got, want := dual.LBPool(), "192.168.56.240-192.168.56.250,fd00:56::240-fd00:56::250"; got != want {
		t.Errorf("dual-stack LoadBalancer pool %s, want %s", got, want)
	}
	if got := dual.Addr6(Client).String(); got != "fd00:56::100" {
		t.Errorf("dual-stack client at %s, want fd00:56::100", got)
	}
	// An IPv6 lab: the IPv6 pool alone; the IPv6 ranges and the node and
	// server flags of an IPv6 single-stack cluster.
	v6 := &Lab{cfg: defaultConfig(t, Config{Nodes: 2, IPFamily: IPFamilyIPv6})}
	if got, want := v6.LBPool(), "fd00:56::240-fd00:56::250"; got != want {
		t.Errorf("IPv6 LoadBalancer pool %s, want %s", got, want)
	}
	if got := v6.Addr6("node2").String(); got != "fd00:56::11" {
		t.Errorf("IPv6 node2 at %s, want fd00:56::11", got)
	}
	if got := ClusterDNS6().String(); got != "fd00:10:96::a" {
		t.Errorf("IPv6 cluster DNS %s, want fd00:10:96::a", got)
	}
	server, agent := strings.Join(v6.nodeArgs(1, nil), " "), strings.Join(v6.nodeArgs(2, nil), " ")
	for _, want := range []string{"--listen [::]:6443", "--advertise-address fd00:56::10", "--node-ip fd00:56::10",
		"--service-cidr fd00:10:96::/112", "--cluster-cidr fd00:10:244::/56", "--lb-pool fd00:56::240-fd00:56::250"} {
		if !strings.Contains(server, want) {
			t.Errorf("IPv6 lab's server lacks %q: %s", want, server)
		}
	}
	for _, want := range []string{" agent ", "--node-ip fd00:56::11", "--service-cidr fd00:10:96::/112", "--cluster-cidr fd00:10:244::/56"} {
		if !strings.Contains(agent, want) {
			t.Errorf("IPv6 lab's agent lacks %q: %s", want, agent)
		}
	}
	l := &Lab{cfg: defaultConfig(t, Config{Name: "np", Nodes: 3, Dir: "/var/lib/minikit-lab/np"})}
	if got := l.Hosts(); !slices.Equal(got, []string{"node1", "node2", "node3", Client, External}) {
		t.Errorf("hosts %v", got)
	}
	if got := NS("np", "node2"); got != "np-node2" {
		t.Errorf("NS = %s, want np-node2", got)
	}
	if l.Kubeconfig() != "/var/lib/minikit-lab/np/kubeconfig" || l.Name() != "np" || l.Dir() != "/var/lib/minikit-lab/np" {
		t.Errorf("kubeconfig %s, name %s, dir %s", l.Kubeconfig(), l.Name(), l.Dir())
	}
}

func TestSubnet2(t *testing.T) {
	for in, want := range map[string]string{
		"192.168.56.0/24":  "192.168.57.0/24",
		"192.168.255.0/24": "192.169.0.0/24", // the carry
		"10.9.0.0/16":      "10.10.0.0/16",
		"10.9.3.0/16":      "10.10.0.0/16", // unmasked
	} {
		c := Config{Subnet: netip.MustParsePrefix(in)}
		if got := c.subnet2().String(); got != want {
			t.Errorf("subnet2 of %s = %s, want %s", in, got, want)
		}
	}
	if got := routerAddr(netip.MustParsePrefix("192.168.57.0/24")); got.String() != "192.168.57.1" {
		t.Errorf("router at %s, want 192.168.57.1", got)
	}
}

// The command line of each node: what a Vagrant VM would run.
func TestNodeArgs(t *testing.T) {
	l := &Lab{cfg: defaultConfig(t, Config{Nodes: 3, Dir: "/labs/lab", ProxyMode: "nftables"})}
	server := strings.Join(l.nodeArgs(1, nil), " ")
	if want := "/usr/local/bin/minikit server --data-dir /labs/lab/node1 --listen 0.0.0.0:6443 --advertise-address 192.168.56.10 " +
		"--node-name node1 --node-ip 192.168.56.10 --lb-pool 192.168.56.240-192.168.56.250 --dns-upstream 192.168.56.200 " +
		"--proxy-mode nftables --pod-network host-gw"; server != want {
		t.Errorf("node1:\n %s\nwant\n %s", server, want)
	}
	agent := strings.Join(l.nodeArgs(3, nil), " ")
	if want := "/usr/local/bin/minikit agent --server https://192.168.56.10:6443 --token-file /labs/lab/node1/token " +
		"--ca-file /labs/lab/node1/tls/ca.crt --data-dir /labs/lab/node3 --node-name node3 --node-ip 192.168.56.12 " +
		"--dns-upstream 192.168.56.200 --proxy-mode nftables --pod-network host-gw"; agent != want {
		t.Errorf("node3:\n %s\nwant\n %s", agent, want)
	}
	if got := l.apiServers(); !slices.Equal(got, []string{"192.168.56.10:6443"}) {
		t.Errorf("API servers %v", got)
	}

	ha := &Lab{cfg: defaultConfig(t, Config{Nodes: 4, Servers: 3, Dir: "/labs/ha"})}
	for i, want := range map[int][]string{
		1: {"server", "--cluster-init"},
		2: {"server", "--join https://192.168.56.10:6443 --token-file /labs/ha/node1/server-token", "--advertise-address 192.168.56.11"},
		3: {"server", "--join https://192.168.56.10:6443"},
		4: {"agent", "--server https://192.168.56.10:6443,https://192.168.56.11:6443,https://192.168.56.12:6443"},
	} {
		got := strings.Join(ha.nodeArgs(i, nil), " ")
		for _, w := range want {
			if !strings.Contains(got, " "+w) {
				t.Errorf("HA node%d: %s\nlacks %q", i, got, w)
			}
		}
		if i != 1 && strings.Contains(got, "--cluster-init") {
			t.Errorf("HA node%d also inits a cluster: %s", i, got)
		}
	}

	etcd := &Lab{cfg: defaultConfig(t, Config{Datastore: "etcd"})}
	flags := []string{"--datastore", "etcd", "--etcd-endpoints", "https://192.168.56.200:2379"}
	if got := etcd.nodeArgs(1, flags); !slices.Equal(got[len(got)-4:], flags) || slices.Contains(got, "--cluster-init") {
		t.Errorf("node1 on an external etcd: %v", got)
	}
}

func TestEtcdServerFlags(t *testing.T) {
	got, err := etcdServerFlags([]byte(`{"endpoints":["https://192.168.56.200:2379"],"caFile":"/e/ca.crt","certFile":"/e/c.crt","keyFile":"/e/c.key"}`), "/e/client.json")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--datastore", "etcd", "--etcd-endpoints", "https://192.168.56.200:2379",
		"--etcd-cafile", "/e/ca.crt", "--etcd-certfile", "/e/c.crt", "--etcd-keyfile", "/e/c.key"}
	if !slices.Equal(got, want) {
		t.Errorf("flags %q, want %q", got, want)
	}
	for in, msg := range map[string]string{`{"endpoints":[]}`: "reading /e/client.json: no endpoints", `{"endpoints":`: "reading /e/client.json: unexpected end"} {
		if _, err := etcdServerFlags([]byte(in), "/e/client.json"); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: got %v, want %q", in, err, msg)
		}
	}
}
