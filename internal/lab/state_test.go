package lab

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/minikit/minikit/internal/pki"
	"github.com/minikit/minikit/internal/testutil"
)

// testLab is a lab as Up records it, in a temporary directory, with no
// namespace or process behind it.
func testLab(t *testing.T, cfg Config) *Lab {
	t.Helper()
	cfg.Dir = t.TempDir()
	cfg.Logger = testutil.Logger(t)
	cfg = defaultConfig(t, cfg)
	l := &Lab{cfg: cfg, state: newState(cfg), log: cfg.Logger}
	for _, h := range l.Hosts() {
		l.state.Addresses[h] = l.Addr(h).String()
		l.state.Namespaces = append(l.state.Namespaces, NS(cfg.Name, h))
	}
	for i := 1; i <= cfg.Nodes; i++ {
		l.state.Args[nodeName(i)] = l.nodeArgs(i, nil)
	}
	l.state.APIPort = 40001
	if err := l.saveState(); err != nil {
		t.Fatal(err)
	}
	return l
}

// lab.json round-trips: what Up and every change write is what `lab
// down`, `lab status` and Open read back.
func TestStateRoundTrip(t *testing.T) {
	l := testLab(t, Config{Name: "rt", Nodes: 3, Topology: TopologyRouted, PodNetwork: "vxlan", ProxyMode: "nftables"})
	l.state.Subnet2 = "192.168.57.0/24"
	l.state.PIDs["node1"], l.state.Starts = 4242, map[string]uint64{"node1": 99}
	l.state.UserKubeconfig, l.state.UserUID, l.state.PrevContext = "/home/u/.kube/config", 1000, "kind-dev"
	if err := l.saveState(); err != nil {
		t.Fatal(err)
	}
	st, err := Load("rt", l.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st, l.state) {
		t.Errorf("read back\n %+v\nwant\n %+v", st, l.state)
	}
	fi, err := os.Stat(filepath.Join(l.Dir(), "lab.json"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("lab.json: %v, mode %v; want 0644 (lab status works without sudo)", err, fi.Mode().Perm())
	}
	o, err := Open("rt", l.Dir(), "/bin/minikit", testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Nodes != 3 || o.cfg.Topology != TopologyRouted || o.cfg.PodNetwork != "vxlan" || o.cfg.Subnet != l.cfg.Subnet ||
		o.cfg.Binary != "/bin/minikit" || o.Addr("node2") != l.Addr("node2") || o.PID("node1") != 4242 {
		t.Errorf("Open: config %+v", o.cfg)
	}
}

// A missing or corrupt state file is an error that says which, and where.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load("gone", dir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), `no lab "gone" in `+dir) {
		t.Errorf("missing: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lab.json"), []byte(`{"name":"x","nodes":`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load("x", dir)
	if err == nil || errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "no lab") ||
		!strings.Contains(err.Error(), filepath.Join(dir, "lab.json")) {
		t.Errorf("corrupt: %v; want an error naming lab.json, not one saying there is no lab", err)
	}
	if _, err := Open("x", dir, "/bin/true", nil); err == nil {
		t.Error("Open accepted a corrupt state")
	}
	os.WriteFile(filepath.Join(dir, "lab.json"), []byte(`{"name":"x","nodes":2,"subnet":"nonsense"}`), 0o644)
	if _, err := Open("x", dir, "/bin/true", nil); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Errorf("a state with a bad subnet: %v", err)
	}
}

// Switching a stopped node's proxy mode or pod network edits the command
// line Start runs, and persists it.
func TestSetArgs(t *testing.T) {
	l := testLab(t, Config{Nodes: 2})
	if l.ProxyMode("node2") != "iptables" || l.PodNetwork("node2") != "host-gw" {
		t.Fatalf("modes %s %s", l.ProxyMode("node2"), l.PodNetwork("node2"))
	}
	if err := l.SetProxyMode("node2", "nftables"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetPodNetwork("node2", "vxlan"); err != nil {
		t.Fatal(err)
	}
	if l.ProxyMode("node2") != "nftables" || l.PodNetwork("node2") != "vxlan" || l.ProxyMode("node1") != "iptables" {
		t.Errorf("after switching node2: %s %s, node1 %s", l.ProxyMode("node2"), l.PodNetwork("node2"), l.ProxyMode("node1"))
	}
	st, _ := Load("", l.Dir())
	args := strings.Join(st.Args["node2"], " ")
	if strings.Count(args, "--proxy-mode") != 1 || !strings.Contains(args, "--proxy-mode nftables") || !strings.Contains(args, "--pod-network vxlan") {
		t.Errorf("persisted node2 args: %s", args)
	}
	// A command line recorded before the flag existed gets it appended.
	l.state.Args["node1"] = []string{"/bin/minikit", "server"}
	if err := l.SetPodNetwork("node1", "vxlan"); err != nil || !slices.Equal(l.state.Args["node1"], []string{"/bin/minikit", "server", "--pod-network", "vxlan"}) {
		t.Errorf("appended: %v, %v", l.state.Args["node1"], err)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{l.SetProxyMode("node2", "ipvs"), `unknown proxy mode "ipvs": want iptables or nftables`},
		{l.SetPodNetwork("node2", "udp"), `unknown pod network "udp": want host-gw or vxlan`},
		{l.SetProxyMode("client", "nftables"), "client has no process"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("got %v, want %q", tc.err, tc.want)
		}
	}
}

// What the lab refuses before touching anything.
func TestHostCommandRefusals(t *testing.T) {
	l := testLab(t, Config{Nodes: 4, Servers: 3})
	l.state.PIDs["node2"] = os.Getpid() // a live process: this test
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"start a host without a process", l.Start("client"), "client has no process to start"},
		{"start a running node", l.Start("node2"), "node2 already runs process"},
		{"stop a node that runs nothing", l.Stop("node3", syscall.SIGTERM), "node3 runs no process"},
		{"remove node1", l.RemoveNode(context.Background(), "node1"), "node1 runs the server and cannot be removed"},
		{"remove an HA server", l.RemoveNode(context.Background(), "node3"), "node3 is a server of the lab's HA control plane"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, tc.err, tc.want)
		}
	}
}

func TestRegistryEntries(t *testing.T) {
	RegistryDir = filepath.Join(t.TempDir(), "registry")
	DefaultDir = filepath.Join(t.TempDir(), "default")
	t.Cleanup(func() { RegistryDir, DefaultDir = "/run/minikit-lab", "/var/lib/minikit-lab" })
	for _, e := range []Entry{{Name: "b", Dir: "/x/b"}, {Name: "a", Dir: "/x/a"}, {Name: "c", Dir: "/x/c"}} {
		if err := register(e); err != nil {
			t.Fatal(err)
		}
	}
	// Up registers again once the forwarder has its port.
	if err := register(Entry{Name: "a", Dir: "/x/a", Kubeconfig: "/x/a/kubeconfig", APIPort: 40001}); err != nil {
		t.Fatal(err)
	}
	if e, ok := Lookup("a"); !ok || e.APIPort != 40001 {
		t.Errorf("Lookup(a) after re-registering = %+v, %v", e, ok)
	}
	b, _ := os.ReadFile(registryPath("a"))
	fi, _ := os.Stat(registryPath("a"))
	if !bytes.Contains(b, []byte(`"apiPort": 40001`)) || fi.Mode().Perm() != 0o644 {
		t.Errorf("a.json %s mode %v; want it world-readable", b, fi.Mode().Perm())
	}
	var names []string
	for _, e := range Registered() {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Errorf("Registered() names %v, want a b c in order", names)
	}
	// A corrupt record or one without a directory is no record; the default
	// directory's state still finds the lab.
	os.WriteFile(registryPath("c"), []byte("{"), 0o644)
	os.WriteFile(registryPath("d"), []byte(`{"name":"d"}`), 0o644)
	if _, ok := Lookup("c"); ok {
		t.Error("a corrupt record was found")
	}
	os.MkdirAll(filepath.Join(DefaultDir, "d"), 0o700)
	os.WriteFile(filepath.Join(DefaultDir, "d", "lab.json"), []byte(`{"name":"d","apiPort":40004}`), 0o644)
	if e, ok := Lookup("d"); !ok || e.Dir != filepath.Join(DefaultDir, "d") || e.APIPort != 40004 {
		t.Errorf("Lookup(d) = %+v, %v; want its default directory", e, ok)
	}
	if err := unregister("b"); err != nil {
		t.Fatal(err)
	}
	if _, ok := Lookup("b"); ok {
		t.Error("b is still found after unregister")
	}
	if _, err := os.Stat(RegistryDir); err != nil {
		t.Errorf("the registry was removed while labs remain: %v", err)
	}
}

func TestEnsureEtcdCA(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := ensureEtcdCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if ca.Cert.Subject.CommonName != "minikit-lab-etcd-ca" || !ca.Cert.IsCA || ca.Cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("etcd CA %v", ca.Cert.Subject)
	}
	if !bytes.HasPrefix(keyPEM, []byte("-----BEGIN EC PRIVATE KEY-----")) {
		t.Errorf("key is not an EC PRIVATE KEY block")
	}
	c2, k2, err := ensureEtcdCA(dir)
	if err != nil || !bytes.Equal(c2, certPEM) || !bytes.Equal(k2, keyPEM) {
		t.Errorf("a restart of the etcd made a new CA (%v): the servers' client certificates would stop working", err)
	}
}

// The state's names, newest first and once, are what down removes.
func TestStateNames(t *testing.T) {
	st := State{Name: "n", Nodes: 2, Dir: "/labs/n", Namespaces: []string{"n-net", "n-node1", "n-node2", "n-node1", "n-client"}}
	if got := st.names(); !slices.Equal(got, []string{"n-client", "n-node1", "n-node2", "n-net"}) {
		t.Errorf("names %v", got)
	}
	if got := st.podPrefixes(); len(got) != 2 || got[0] == got[1] {
		t.Errorf("pod prefixes %v, want one per node", got)
	}
}

// keepLogs saves a failed lab's logs, each embedded etcd member's named for
// its node, before down removes the directory.
func TestKeepLogs(t *testing.T) {
	l := testLab(t, Config{Name: "kl"})
	os.WriteFile(filepath.Join(l.Dir(), "node1.log"), []byte("server log"), 0o600)
	os.MkdirAll(filepath.Join(l.Dir(), "node1", "etcd"), 0o700)
	os.WriteFile(filepath.Join(l.Dir(), "node1", "etcd", "etcd.log"), []byte("etcd log"), 0o600)
	kept := l.keepLogs()
	if kept == "" {
		t.Fatal("no logs kept")
	}
	t.Cleanup(func() { os.RemoveAll(kept) })
	for name, want := range map[string]string{"node1.log": "server log", "node1-etcd.log": "etcd log"} {
		if b, err := os.ReadFile(filepath.Join(kept, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	if empty := testLab(t, Config{Name: "none"}); empty.keepLogs() != "" {
		t.Error("a lab without logs kept a directory")
	}
}

// A lab directory shared with the invoking user can be entered, not
// listed, by others; a private one is root's alone.
func TestMakeDir(t *testing.T) {
	base := t.TempDir()
	shared := filepath.Join(base, "a", "lab")
	if err := makeDir(shared, true); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{shared, filepath.Dir(shared)} {
		if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o711 {
			t.Errorf("%s mode %v, want 0711", d, fi.Mode().Perm())
		}
	}
	private := filepath.Join(base, "b", "lab")
	if err := makeDir(private, false); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(private); fi.Mode().Perm() != 0o700 {
		t.Errorf("%s mode %v, want 0700", private, fi.Mode().Perm())
	}
	if fi, _ := os.Stat(base); fi.Mode().Perm() == 0o711 {
		t.Error("makeDir changed a directory it did not make")
	}
}

// A lab whose directory (and so its state) is gone still has its pods'
// namespaces found: their prefixes derive from the directory and the node's
// name, for every node a lab can have.
func TestPodPrefixesWithoutState(t *testing.T) {
	known := State{Dir: "/tmp/minikit-mkt0", Nodes: 2}.podPrefixes()
	lost := State{Dir: "/tmp/minikit-mkt0"}.podPrefixes()
	if len(known) != 2 || len(lost) != MaxNodes || lost[0] != known[0] || lost[1] != known[1] {
		t.Errorf("prefixes with state %v, without %d starting %v", known, len(lost), lost[:2])
	}
	if other := (State{Dir: "/tmp/minikit-mkt1", Nodes: 1}).podPrefixes(); other[0] == known[0] {
		t.Errorf("two labs share the pod prefix %s", other[0])
	}
}
