package doctor_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/doctor"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// runID makes every namespace a test run creates recognisable as its own:
// "mkd-<runID>-...". Tests never touch namespaces without that prefix.
var runID = func() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}()

var nameSeq atomic.Int32

// TestMain fails the run when a test left a namespace of its own behind,
// changed the main thread's namespaces or the root namespace's links (the
// probe must create its links in its own namespace only).
func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	guard := testutil.GuardRoot()
	code := m.Run()
	if !guard.Intact("mkd-"+runID, netns.ListNamed) {
		code = 1
	}
	os.Exit(code)
}

// requireRoot fails, never skips: CI runs as root, and a skipped test
// proves nothing.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it creates network namespaces and probes the kernel (run it with sudo)")
	}
}

// newNetns makes a throwaway named network namespace, removed when the test
// ends, and returns its path.
func newNetns(t *testing.T, kind string) string {
	t.Helper()
	name := fmt.Sprintf("mkd-%s-%d-%s", runID, nameSeq.Add(1), kind)
	if err := netns.CreateNamed(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil {
			t.Error(err)
		}
	})
	return netns.NetNSPath(name)
}

// TestThisMachine: the machine the tests run on has what minikit needs (the
// lab tier needs it too), and the checks that lab up, server and agent run
// first are fast enough to run on every start.
func TestThisMachine(t *testing.T) {
	requireRoot(t)
	r := doctor.Run(doctor.Host(), doctor.Options{})
	var text strings.Builder
	r.WriteText(&text)
	t.Logf("minikit doctor:\n%s", text.String())
	if !r.OK {
		t.Errorf("this machine lacks what minikit needs: %v", r.Failed())
	}
	for _, name := range []string{"root", "netns", "veth", "bridge", "vxlan", "nftables", "conntrack", "ipset"} {
		if c, _ := r.Check(name); c.Status != doctor.OK {
			t.Errorf("%s", c.Line())
		}
	}
	start := time.Now()
	r = doctor.Run(doctor.Host(), doctor.Options{RequiredOnly: true})
	took := time.Since(start)
	t.Logf("the required checks took %v", took)
	if !r.OK {
		t.Errorf("required checks fail: %v", r.Failed())
	}
	// A limit, not a target: a lab up runs these once per process it
	// starts. (They take about 20 ms here.)
	if took > 2*time.Second {
		t.Errorf("the required checks took %v: they run before every lab up, server and agent", took)
	}
}

// TestProbeLeavesNothing: the probe's links, nftables table and ipsets live
// in its own namespace, which goes with its thread; none appears here.
func TestProbeLeavesNothing(t *testing.T) {
	requireRoot(t)
	for i := 0; i < 3; i++ {
		p := doctor.Host().Probe()
		for _, f := range []doctor.Feature{doctor.FeatureNetNS, doctor.FeatureVeth, doctor.FeatureNFTables, doctor.FeatureIPSet} {
			if err, tried := p[f]; !tried || err != nil {
				t.Fatalf("probe %d: %s: tried %v, %v", i, f, tried, err)
			}
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, "mkdoc-") {
			t.Errorf("the probe's link %s is in the test's namespace", i.Name)
		}
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == "minikit-doctor" {
			t.Errorf("the probe's nftables table is in the test's namespace")
		}
	}
}

// TestMissingToolOnPath runs the real checks with PATH set to a directory
// that holds every tool but nft (and kubectl): nft's line names it, and
// the report fails; kubectl only warns.
func TestMissingToolOnPath(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	for _, tool := range []string{"ip", "iptables", "iptables-restore", "iptables-save", "nsenter", "modprobe"} {
		path, err := lookPath(tool)
		if err != nil {
			if tool == "modprobe" {
				continue // not every kernel has modules
			}
			t.Fatalf("the test machine has no %s: %v", tool, err)
		}
		if err := os.Symlink(path, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	r := doctor.Run(doctor.Host(), doctor.Options{})
	want := "missing  nft              nft is not on PATH (minikit trace and the examples read nftables rules with it): apt-get install --no-install-recommends nftables"
	if c, _ := r.Check("nft"); c.Line() != want {
		t.Errorf("nft:\n got %q\nwant %q", c.Line(), want)
	}
	want = "warn     kubectl          kubectl is not on PATH (the student's client; minikit get, apply, ... run it): apt-get install --no-install-recommends kubernetes-client, or see https://kubernetes.io/docs/tasks/tools/"
	if c, _ := r.Check("kubectl"); c.Line() != want {
		t.Errorf("kubectl:\n got %q\nwant %q", c.Line(), want)
	}
	var failed []string
	for _, c := range r.Failed() {
		failed = append(failed, c.Name)
	}
	if !slices.Equal(failed, []string{"nft"}) {
		t.Errorf("failed = %v, want [nft]", failed)
	}
	// iptables, through the symlink, still runs and says its backend.
	if c, _ := r.Check("iptables"); c.Status == doctor.Missing {
		t.Errorf("%s", c.Line())
	}
	err := doctor.Run(doctor.Host(), doctor.Options{Command: "minikit lab up", RequiredOnly: true}).Err("minikit lab up")
	if err == nil || !strings.Contains(err.Error(), "\nmissing  nft ") {
		t.Errorf("the required checks' error does not name nft: %v", err)
	}
}

// lookPath finds a tool on the test's own PATH or in the sbin directories
// root's PATH has.
func lookPath(tool string) (string, error) {
	for _, dir := range append(filepath.SplitList(os.Getenv("PATH")), "/usr/sbin", "/sbin", "/usr/bin", "/bin") {
		p := filepath.Join(dir, tool)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", tool)
}

// TestIPv6OffInANamespace turns IPv6 off inside a namespace of the test's
// own: the check, told to look there, says so (and how to turn it back on
// there); in a fresh namespace beside it IPv6 is on.
func TestIPv6OffInANamespace(t *testing.T) {
	requireRoot(t)
	off, on := newNetns(t, "v6off"), newNetns(t, "v6on")
	err := netns.DoPath(off, func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/all/disable_ipv6", []byte("1"), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	r := doctor.Run(doctor.Host(), doctor.Options{NetNS: off})
	want := "warn     ipv6             IPv6 is disabled (net.ipv6.conf.all.disable_ipv6 = 1 in " + off + "): nsenter --net=" + off + " sysctl -w net.ipv6.conf.all.disable_ipv6=0"
	if c, _ := r.Check("ipv6"); c.Line() != want {
		t.Errorf("ipv6 in %s:\n got %q\nwant %q", off, c.Line(), want)
	}
	if !r.OK {
		t.Errorf("IPv6 off fails the report: %v", r.Failed())
	}
	r = doctor.Run(doctor.Host(), doctor.Options{NetNS: on})
	want = "ok       ipv6             IPv6 is enabled in " + on
	if c, _ := r.Check("ipv6"); c.Line() != want {
		t.Errorf("ipv6 in %s:\n got %q\nwant %q", on, c.Line(), want)
	}
}

// TestModulelessFeature runs the real checks on a kernel from which the
// seam takes VXLAN and nf_tables' fib away, as a kernel without those
// modules answers (EOPNOTSUPP for an unknown link kind, ENOENT for an
// unknown expression), and br_netfilter, neither loaded nor a module.
// Everything else is this machine's.
func TestModulelessFeature(t *testing.T) {
	requireRoot(t)
	sys := doctor.Host()
	probe, sysctl, readFile := sys.Probe, sys.Sysctl, sys.ReadFile
	sys.Probe = func() doctor.Probe {
		p := probe()
		p[doctor.FeatureVXLAN] = unix.EOPNOTSUPP
		p[doctor.FeatureFib] = unix.ENOENT
		return p
	}
	sys.Sysctl = func(ns, name string) (string, error) {
		if strings.HasPrefix(name, "net/bridge/") {
			return "", &os.PathError{Op: "open", Path: "/proc/sys/" + name, Err: unix.ENOENT}
		}
		return sysctl(ns, name)
	}
	sys.ReadFile = func(name string) ([]byte, error) {
		if strings.HasPrefix(name, "/lib/modules/") {
			return nil, &os.PathError{Op: "open", Path: name, Err: unix.ENOENT}
		}
		return readFile(name)
	}
	r := doctor.Run(sys, doctor.Options{})
	for _, want := range []string{
		"missing  vxlan            the kernel cannot create a VXLAN device (operation not supported): modprobe vxlan, or a kernel with CONFIG_VXLAN",
		"missing  nftables         nf_tables lacks fib (no such file or directory): modprobe nft_fib_ipv4, or a kernel with the nft expressions kube-proxy uses",
		"warn     br_netfilter     br_netfilter is not loaded nor a module of this kernel: pod-to-pod traffic on a node's bridge bypasses iptables: modprobe br_netfilter, or a kernel with CONFIG_BRIDGE_NETFILTER",
	} {
		name := strings.Fields(want)[1]
		if c, _ := r.Check(name); c.Line() != want {
			t.Errorf("%s:\n got %q\nwant %q", name, c.Line(), want)
		}
	}
	var failed []string
	for _, c := range r.Failed() {
		failed = append(failed, c.Name)
	}
	if !slices.Equal(failed, []string{"vxlan", "nftables"}) {
		t.Errorf("failed = %v, want [vxlan nftables]: the rest is this machine's, which has it", failed)
	}
	// The features the seam left alone were really tried.
	if c, _ := r.Check("veth"); c.Status != doctor.OK {
		t.Errorf("%s", c.Line())
	}
}
