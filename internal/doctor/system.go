package doctor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/netns"

	"golang.org/x/sys/unix"
)

// System is every side effect the checks have on the machine. Host is the
// real machine; a test replaces one func to take one feature away.
type System struct {
	// Geteuid is the effective user id.
	Geteuid func() int
	// ReadFile reads a file: /proc/self/status (capabilities),
	// /proc/self/mounts, /proc/sys/kernel/osrelease,
	// /lib/modules/RELEASE/modules.*, ./go.mod.
	ReadFile func(name string) ([]byte, error)
	// LookPath finds a tool on PATH, as exec.LookPath.
	LookPath func(file string) (string, error)
	// Output runs a tool that only reports (kubectl version, go env) and
	// returns its standard output.
	Output func(name string, args ...string) ([]byte, error)
	// IPTablesBackend is the backend behind the iptables binaries, as the
	// iptables package detects it ("nf_tables" or "legacy").
	IPTablesBackend func() (string, error)
	// Sysctl reads /proc/sys/NAME (name with slashes) as seen from the
	// network namespace at path netns ("" is the doctor's own).
	Sysctl func(netns, name string) (string, error)
	// Writable reports whether dir is a directory that can be written to
	// (access(2) W_OK: a read-only mount says EROFS even to root).
	Writable func(dir string) error
	// Probe tries the kernel's features in a throwaway network namespace.
	Probe func() Probe
}

// Feature is one kernel feature the probe tries.
type Feature string

// The features the probe tries, in the order it tries them. A feature the
// probe could not get to (because an earlier step failed) is absent from
// its Probe.
const (
	FeatureNetNS     Feature = "netns"     // unshare(CLONE_NEWNET)
	FeatureVeth      Feature = "veth"      // a veth pair
	FeatureBridge    Feature = "bridge"    // a bridge
	FeatureVXLAN     Feature = "vxlan"     // a VXLAN device on flannel's port
	FeatureNFTables  Feature = "nf_tables" // a table and a nat chain
	FeatureNumgen    Feature = "numgen"    // numgen random mod N
	FeatureNAT       Feature = "nat"       // dnat to ADDR
	FeatureCt        Feature = "ct"        // ct state
	FeatureFib       Feature = "fib"       // fib daddr type
	FeatureConntrack Feature = "conntrack" // nf_conntrack's sysctls, once ct is in use
	FeatureIPSet     Feature = "ipset"     // ipsets of the types NetworkPolicy uses
)

// Probe is what the kernel said to each feature: nil is "works", an error
// is the kernel's answer, and an absent feature was not tried.
type Probe map[Feature]error

// Host is the real machine.
func Host() System {
	return System{
		Geteuid:         os.Geteuid,
		ReadFile:        os.ReadFile,
		LookPath:        exec.LookPath,
		Output:          output,
		IPTablesBackend: iptablesBackend,
		Sysctl:          sysctl,
		Writable:        writable,
		Probe:           probeKernel,
	}
}

// output runs a reporting tool with a deadline, so that a hung tool cannot
// hang a lab up.
func output(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).Output()
}

// iptablesBackend asks the iptables package, the one place that runs the
// iptables binaries.
func iptablesBackend() (string, error) {
	ipt, err := iptables.New()
	if err != nil {
		return "", err
	}
	return string(ipt.Backend()), nil
}

// sysctl reads /proc/sys/NAME. /proc/sys/net shows the network namespace of
// the thread that opens it, hence netns.DoPath for another namespace.
func sysctl(ns, name string) (string, error) {
	path := filepath.Join("/proc/sys", name)
	read := func() (string, error) {
		b, err := os.ReadFile(path)
		return strings.TrimSpace(string(b)), err
	}
	if ns == "" {
		return read()
	}
	// A namespace that is not there is not a sysctl that is not there: %v
	// keeps its ENOENT from reading as "no such setting".
	if _, err := os.Stat(ns); err != nil {
		return "", fmt.Errorf("opening network namespace %s: %v", ns, err)
	}
	var v string
	err := netns.DoPath(ns, func() error {
		var err error
		v, err = read()
		return err
	})
	return v, err
}

// writable is System.Writable.
func writable(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return unix.ENOTDIR
	}
	return unix.Access(dir, unix.W_OK)
}
