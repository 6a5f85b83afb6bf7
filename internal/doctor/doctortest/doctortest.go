// Package doctortest is a fake machine for the doctor's checks: a model of
// everything doctor.System reads (files, tools on PATH, sysctls per network
// namespace, the kernel probe's answers) that starts healthy and from which a
// test takes one thing away. It counts what the doctor asked of it, so that a
// test can tell that a check ran (or did not) and that the probe ran once.
package doctortest

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/minikit/minikit/internal/doctor"

	"golang.org/x/sys/unix"
)

// Machine is the fake machine. Its fields are the machine's state; change
// them before calling System.
type Machine struct {
	// Euid is the effective user id.
	Euid int
	// Files are the readable files by path (/proc/self/status, ...).
	Files map[string]string
	// Tools are the tools on PATH, by name, with their full path.
	Tools map[string]string
	// Outputs are what running a tool prints, keyed by its path and
	// arguments joined by spaces; a missing key fails the run.
	Outputs map[string]string
	// Backend is what the iptables package says its backend is;
	// BackendErr, if set, is its error instead.
	Backend    string
	BackendErr error
	// Sysctls are the values under /proc/sys (name with slashes) per
	// network namespace path ("" is the doctor's own); a missing name
	// does not exist.
	Sysctls map[string]map[string]string
	// Dirs are the directories that exist, with what access(2) W_OK says
	// of each (nil: writable).
	Dirs map[string]error
	// Probe is what the kernel says to each feature.
	Probe doctor.Probe

	mu     sync.Mutex
	probes int
	runs   []string
}

// CapEff is the effective capability set of root: every capability.
const CapEff = "000001ffffffffff"

// Healthy returns a machine that has everything minikit needs: root, every
// kernel feature, every tool, kubectl v1.32.4, cgroup v2 and a writable /run.
func Healthy() *Machine {
	tools := map[string]string{}
	for _, t := range []string{"ip", "iptables", "iptables-restore", "iptables-save", "nft", "nsenter", "kubectl", "modprobe"} {
		dir := "/usr/sbin/"
		if t == "nsenter" || t == "kubectl" {
			dir = "/usr/bin/"
		}
		tools[t] = dir + t
	}
	return &Machine{
		Euid: 0,
		Files: map[string]string{
			"/proc/self/status":          "Name:\tminikit\nCapInh:\t0000000000000000\nCapEff:\t" + CapEff + "\n",
			"/proc/self/mounts":          "sysfs /sys sysfs rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\ntmpfs /run tmpfs rw 0 0\n",
			"/proc/sys/kernel/osrelease": "6.1.0-test\n",
			"/lib/modules/6.1.0-test/modules.dep": "kernel/net/bridge/br_netfilter.ko.xz: kernel/net/bridge/bridge.ko.xz\n" +
				"kernel/drivers/net/vxlan/vxlan.ko.xz:\n",
		},
		Tools: tools,
		Outputs: map[string]string{
			"/usr/bin/kubectl version --client -o json": `{"clientVersion":{"major":"1","minor":"32","gitVersion":"v1.32.4"}}`,
		},
		Backend: "nf_tables",
		Sysctls: map[string]map[string]string{"": {
			"net/ipv6/conf/all/disable_ipv6":     "0",
			"net/bridge/bridge-nf-call-iptables": "1",
		}},
		Dirs: map[string]error{"/run": nil, "/run/netns": nil},
		Probe: doctor.Probe{
			doctor.FeatureNetNS: nil, doctor.FeatureVeth: nil, doctor.FeatureBridge: nil, doctor.FeatureVXLAN: nil,
			doctor.FeatureNFTables: nil, doctor.FeatureNumgen: nil, doctor.FeatureNAT: nil, doctor.FeatureCt: nil,
			doctor.FeatureFib: nil, doctor.FeatureConntrack: nil, doctor.FeatureIPSet: nil,
		},
	}
}

// Probes is how many times the doctor probed the kernel.
func (m *Machine) Probes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.probes
}

// Runs are the tools the doctor ran, as "PATH ARGS...".
func (m *Machine) Runs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.runs...)
}

// System is the doctor's view of the machine.
func (m *Machine) System() doctor.System {
	notExist := func(op, name string) error { return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist} }
	return doctor.System{
		Geteuid: func() int { return m.Euid },
		ReadFile: func(name string) ([]byte, error) {
			s, ok := m.Files[name]
			if !ok {
				return nil, notExist("open", name)
			}
			return []byte(s), nil
		},
		LookPath: func(file string) (string, error) {
			p, ok := m.Tools[file]
			if !ok {
				return "", fmt.Errorf("exec: %q: executable file not found in $PATH", file)
			}
			return p, nil
		},
		Output: func(name string, args ...string) ([]byte, error) {
			key := strings.Join(append([]string{name}, args...), " ")
			m.mu.Lock()
			m.runs = append(m.runs, key)
			m.mu.Unlock()
			out, ok := m.Outputs[key]
			if !ok {
				return nil, fmt.Errorf("fork/exec %s: %w", name, unix.ENOENT)
			}
			return []byte(out), nil
		},
		IPTablesBackend: func() (string, error) {
			if _, ok := m.Tools["iptables"]; !ok {
				return "", errors.New(`finding iptables: exec: "iptables": executable file not found in $PATH`)
			}
			return m.Backend, m.BackendErr
		},
		Sysctl: func(ns, name string) (string, error) {
			vals, ok := m.Sysctls[ns]
			if !ok {
				return "", fmt.Errorf("opening network namespace %s: %v", ns, unix.ENOENT)
			}
			v, ok := vals[name]
			if !ok {
				return "", notExist("open", "/proc/sys/"+name)
			}
			return v, nil
		},
		Writable: func(dir string) error {
			err, ok := m.Dirs[dir]
			if !ok {
				return notExist("stat", dir)
			}
			return err
		},
		Probe: func() doctor.Probe {
			m.mu.Lock()
			m.probes++
			m.mu.Unlock()
			p := doctor.Probe{}
			for f, err := range m.Probe {
				p[f] = err
			}
			return p
		},
	}
}
