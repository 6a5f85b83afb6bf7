package lab

import (
	"strings"
	"testing"
)

func TestServersAndDatastoreFlags(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" for accepted
	}{
		{Config{Nodes: 2}, ""},
		{Config{Nodes: 4, Servers: 3}, ""},
		{Config{Nodes: 3, Servers: 3}, ""},
		{Config{Nodes: 2, Datastore: "etcd"}, ""},
		{Config{Nodes: 4, Servers: 2}, "--servers 2: etcd needs a majority"},
		{Config{Nodes: 2, Servers: 3}, "--servers 3: a lab of 2 nodes has 1 to 2 servers"},
		{Config{Nodes: 9, Servers: 9}, "--servers 9: at most 7"},
		{Config{Nodes: 2, Datastore: "sqlite"}, `unknown datastore "sqlite": want bolt or etcd`},
		{Config{Nodes: 3, Servers: 3, Datastore: "etcd"}, "--datastore etcd runs one server on an external etcd; --servers 3"},
	} {
		c := tc.cfg
		c.Binary = "/bin/true"
		err := c.defaults()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v refused: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want an error containing %q", tc.cfg, err, tc.want)
		}
		if tc.want == "" && (c.Servers < 1 || c.Datastore == "") {
			t.Errorf("%+v: defaults left Servers %d, Datastore %q", tc.cfg, c.Servers, c.Datastore)
		}
	}
}

func TestInfoNamesServersAndEtcd(t *testing.T) {
	st := State{Name: "x", Nodes: 4, Servers: 3, Subnet: "192.168.56.0/24", Addresses: map[string]string{
		"node1": "192.168.56.10", "node2": "192.168.56.11", "node3": "192.168.56.12", "node4": "192.168.56.13",
		External: "192.168.56.200"}, PIDs: map[string]int{EtcdHost: -1}}
	in := st.Info(t.Context(), false)
	if got := strings.Join(in.Servers, ","); got != "node1,node2,node3" {
		t.Errorf("servers %s", got)
	}
	var etcd *HostInfo
	for i, h := range in.Hosts {
		if h.Name == EtcdHost {
			etcd = &in.Hosts[i]
		}
	}
	if etcd == nil || etcd.Role != EtcdHost || etcd.Address != "192.168.56.200:2379" || etcd.Netns != "x-external" {
		t.Errorf("the external etcd drawn as %+v", etcd)
	}
	one := State{Name: "y", Nodes: 2, Subnet: "192.168.56.0/24", Addresses: map[string]string{"node1": "192.168.56.10"}}
	if got := one.Info(t.Context(), false); len(got.Servers) != 1 || got.Servers[0] != "node1" {
		t.Errorf("a one-server lab's servers %v", got.Servers)
	}
	for _, h := range one.Info(t.Context(), false).Hosts {
		if h.Name == EtcdHost {
			t.Error("an etcd host in a lab without one")
		}
	}
}
