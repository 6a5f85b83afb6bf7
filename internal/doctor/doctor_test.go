package doctor_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/doctor"
	"github.com/minikit/minikit/internal/doctor/doctortest"

	"golang.org/x/sys/unix"
)

// allChecks is every check, in report order.
var allChecks = []string{"root", "netns", "veth", "bridge", "vxlan", "nftables", "conntrack", "ipset", "br_netfilter", "ipv6",
	"iptables", "iptables-restore", "iptables-save", "ip", "nft", "nsenter", "kubectl", "cgroup", "/run", "go"}

// requiredChecks are the ones lab up, server and agent run.
var requiredChecks = []string{"root", "netns", "veth", "bridge", "vxlan", "nftables", "conntrack", "ipset",
	"iptables", "iptables-restore", "iptables-save", "ip", "nft", "nsenter", "/run"}

func names(r doctor.Report) []string {
	var out []string
	for _, c := range r.Checks {
		out = append(out, c.Name)
	}
	return out
}

func TestHealthyMachine(t *testing.T) {
	m := doctortest.Healthy()
	r := doctor.Run(m.System(), doctor.Options{ServerVersion: "v1.32.0"})
	if !r.OK || len(r.Failed()) != 0 {
		t.Errorf("a healthy machine fails: %v", r.Failed())
	}
	if got := names(r); !slices.Equal(got, allChecks) {
		t.Errorf("checks = %v, want %v", got, allChecks)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	want := `ok       root             running as root
ok       netns            network namespaces
ok       veth             the kernel creates a veth pair
ok       bridge           the kernel creates a bridge
ok       vxlan            the kernel creates a VXLAN device
ok       nftables         nf_tables with numgen, nat, ct, fib
ok       conntrack        nf_conntrack tracks connections
ok       ipset            the kernel creates the ipsets NetworkPolicy uses
ok       br_netfilter     loaded (net.bridge.bridge-nf-call-iptables = 1)
ok       ipv6             IPv6 is enabled
ok       iptables         iptables uses the nf_tables backend
ok       iptables-restore /usr/sbin/iptables-restore
ok       iptables-save    /usr/sbin/iptables-save
ok       ip               /usr/sbin/ip
ok       nft              /usr/sbin/nft
ok       nsenter          /usr/bin/nsenter
ok       kubectl          kubectl v1.32.4 (/usr/bin/kubectl)
ok       cgroup           cgroup v2 at /sys/fs/cgroup
ok       /run             /run and /run/netns are writable
ok       go               not on PATH (only needed to build minikit from source)
`
	if text.String() != want {
		t.Errorf("text report:\n%s\nwant:\n%s", text.String(), want)
	}
	if err := r.Err("minikit lab up"); err != nil {
		t.Errorf("Err = %v, want nil", err)
	}
	if n := m.Probes(); n != 1 {
		t.Errorf("probed the kernel %d times, want once", n)
	}
}

// TestTakeOneAway takes one thing away from a healthy machine at a time and
// checks the one line that names it, and whether the report fails.
func TestTakeOneAway(t *testing.T) {
	for _, tc := range []struct {
		name string
		take func(m *doctortest.Machine)
		opts doctor.Options
		want string // the line of the check that names what was taken
		fail bool   // the report fails (something required is missing)
	}{
		{"not root", func(m *doctortest.Machine) {
			m.Euid = 1000
			m.Files["/proc/self/status"] = "CapEff:\t0000000000000000\n"
		}, doctor.Options{}, "missing  root             running as uid 1000, without root or CAP_NET_ADMIN and CAP_SYS_ADMIN: run as root: sudo minikit doctor", true},
		{"not root, the fix names the command", func(m *doctortest.Machine) {
			m.Euid = 1000
			m.Files["/proc/self/status"] = "CapEff:\t0000000000000000\n"
		}, doctor.Options{Command: "minikit lab up"}, "missing  root             running as uid 1000, without root or CAP_NET_ADMIN and CAP_SYS_ADMIN: run as root: sudo minikit lab up", true},
		{"not root but both capabilities", func(m *doctortest.Machine) {
			m.Euid = 1000
			m.Files["/proc/self/status"] = fmt.Sprintf("CapEff:\t%016x\n", 1<<12|1<<21)
		}, doctor.Options{}, "ok       root             running as uid 1000 with CAP_NET_ADMIN and CAP_SYS_ADMIN", false},
		{"root in a container without CAP_SYS_ADMIN", func(m *doctortest.Machine) {
			m.Files["/proc/self/status"] = fmt.Sprintf("CapEff:\t%016x\n", 1<<12)
		}, doctor.Options{}, "missing  root             running as root but without CAP_SYS_ADMIN (in a container?): give it CAP_NET_ADMIN and CAP_SYS_ADMIN (docker run --privileged)", true},
		{"no network namespaces", func(m *doctortest.Machine) {
			m.Probe = doctor.Probe{doctor.FeatureNetNS: unix.EINVAL}
		}, doctor.Options{}, "missing  netns            the kernel cannot create a network namespace (invalid argument): a kernel with CONFIG_NET_NS", true},
		{"no namespace, so veth is not checked", func(m *doctortest.Machine) {
			m.Probe = doctor.Probe{doctor.FeatureNetNS: unix.EINVAL}
		}, doctor.Options{}, "warn     veth             not checked: no throwaway network namespace to try it in: run as root: sudo minikit doctor", true},
		{"unshare refused", func(m *doctortest.Machine) {
			m.Probe = doctor.Probe{doctor.FeatureNetNS: unix.EPERM}
		}, doctor.Options{}, "warn     netns            not checked: creating a network namespace needs CAP_SYS_ADMIN: run as root: sudo minikit doctor", false},
		{"no veth", func(m *doctortest.Machine) { m.Probe[doctor.FeatureVeth] = unix.EOPNOTSUPP },
			doctor.Options{}, "missing  veth             the kernel cannot create a veth pair (operation not supported): modprobe veth, or a kernel with CONFIG_VETH", true},
		{"no bridge", func(m *doctortest.Machine) { m.Probe[doctor.FeatureBridge] = unix.EOPNOTSUPP },
			doctor.Options{}, "missing  bridge           the kernel cannot create a bridge (operation not supported): modprobe bridge, or a kernel with CONFIG_BRIDGE", true},
		{"no vxlan", func(m *doctortest.Machine) { m.Probe[doctor.FeatureVXLAN] = unix.EOPNOTSUPP },
			doctor.Options{}, "missing  vxlan            the kernel cannot create a VXLAN device (operation not supported): modprobe vxlan, or a kernel with CONFIG_VXLAN", true},
		{"no nf_tables", func(m *doctortest.Machine) {
			m.Probe = doctor.Probe{doctor.FeatureNetNS: nil, doctor.FeatureNFTables: unix.EPROTONOSUPPORT}
		}, doctor.Options{}, "missing  nftables         the kernel cannot create an nf_tables table with a nat chain (protocol not supported): modprobe nf_tables nft_chain_nat, or a kernel with CONFIG_NF_TABLES and CONFIG_NFT_NAT", true},
		{"no numgen nor fib", func(m *doctortest.Machine) {
			m.Probe[doctor.FeatureNumgen], m.Probe[doctor.FeatureFib] = unix.ENOENT, unix.ENOENT
		}, doctor.Options{}, "missing  nftables         nf_tables lacks numgen, fib (no such file or directory): modprobe nft_numgen nft_fib_ipv4, or a kernel with the nft expressions kube-proxy uses", true},
		{"no ct", func(m *doctortest.Machine) {
			m.Probe[doctor.FeatureCt] = unix.ENOENT
			delete(m.Probe, doctor.FeatureConntrack)
		}, doctor.Options{}, "missing  nftables         nf_tables lacks ct (no such file or directory): modprobe nft_ct, or a kernel with the nft expressions kube-proxy uses", true},
		{"no ct, so conntrack is not checked", func(m *doctortest.Machine) {
			m.Probe[doctor.FeatureCt] = unix.ENOENT
			delete(m.Probe, doctor.FeatureConntrack)
		}, doctor.Options{}, "warn     conntrack        not checked: an earlier step of the kernel probe failed", true},
		{"no conntrack sysctls", func(m *doctortest.Machine) { m.Probe[doctor.FeatureConntrack] = unix.ENOENT },
			doctor.Options{}, "missing  conntrack        connection tracking has no nf_conntrack sysctls (no such file or directory): modprobe nf_conntrack, or a kernel with CONFIG_NF_CONNTRACK", true},
		{"no ipset", func(m *doctortest.Machine) {
			m.Probe[doctor.FeatureIPSet] = fmt.Errorf("creating an ipset of type hash:net: %w", unix.EPROTONOSUPPORT)
		}, doctor.Options{}, "missing  ipset            the kernel cannot create the ipsets NetworkPolicy uses (creating an ipset of type hash:net: protocol not supported): modprobe ip_set_hash_net ip_set_hash_ipport, or a kernel with CONFIG_IP_SET_HASH_NET and CONFIG_IP_SET_HASH_IPPORT", true},
		{"br_netfilter not loaded, a module", func(m *doctortest.Machine) {
			delete(m.Sysctls[""], "net/bridge/bridge-nf-call-iptables")
		}, doctor.Options{}, "ok       br_netfilter     not loaded yet: a module, which minikit loads when a node starts", false},
		{"br_netfilter built in, no modules.dep", func(m *doctortest.Machine) {
			delete(m.Sysctls[""], "net/bridge/bridge-nf-call-iptables")
			delete(m.Files, "/lib/modules/6.1.0-test/modules.dep")
			m.Files["/lib/modules/6.1.0-test/modules.builtin"] = "kernel/net/bridge/br_netfilter.ko\n"
		}, doctor.Options{}, "ok       br_netfilter     not loaded yet: a module, which minikit loads when a node starts", false},
		{"br_netfilter nowhere", func(m *doctortest.Machine) {
			delete(m.Sysctls[""], "net/bridge/bridge-nf-call-iptables")
			delete(m.Files, "/lib/modules/6.1.0-test/modules.dep")
		}, doctor.Options{}, "warn     br_netfilter     br_netfilter is not loaded nor a module of this kernel: pod-to-pod traffic on a node's bridge bypasses iptables: modprobe br_netfilter, or a kernel with CONFIG_BRIDGE_NETFILTER", false},
		{"br_netfilter a module, no modprobe", func(m *doctortest.Machine) {
			delete(m.Sysctls[""], "net/bridge/bridge-nf-call-iptables")
			delete(m.Tools, "modprobe")
		}, doctor.Options{}, "warn     br_netfilter     br_netfilter is not loaded, and modprobe, which minikit loads it with, is not on PATH: apt-get install --no-install-recommends kmod", false},
		{"IPv6 off", func(m *doctortest.Machine) { m.Sysctls[""]["net/ipv6/conf/all/disable_ipv6"] = "1" },
			doctor.Options{}, "warn     ipv6             IPv6 is disabled (net.ipv6.conf.all.disable_ipv6 = 1): sysctl -w net.ipv6.conf.all.disable_ipv6=0", false},
		{"IPv6 off in the given namespace", func(m *doctortest.Machine) {
			m.Sysctls["/run/netns/n1"] = map[string]string{"net/ipv6/conf/all/disable_ipv6": "1"}
		}, doctor.Options{NetNS: "/run/netns/n1"}, "warn     ipv6             IPv6 is disabled (net.ipv6.conf.all.disable_ipv6 = 1 in /run/netns/n1): nsenter --net=/run/netns/n1 sysctl -w net.ipv6.conf.all.disable_ipv6=0", false},
		{"no IPv6 in the kernel", func(m *doctortest.Machine) { delete(m.Sysctls[""], "net/ipv6/conf/all/disable_ipv6") },
			doctor.Options{}, "warn     ipv6             the kernel has no IPv6 (no /proc/sys/net/ipv6): remove ipv6.disable=1 from the kernel command line, or a kernel with CONFIG_IPV6", false},
		{"the given namespace is gone", func(m *doctortest.Machine) {},
			doctor.Options{NetNS: "/run/netns/gone"}, "warn     ipv6             cannot read net.ipv6.conf.all.disable_ipv6 in /run/netns/gone (opening network namespace /run/netns/gone: no such file or directory)", false},
		{"no iptables", func(m *doctortest.Machine) { delete(m.Tools, "iptables") },
			doctor.Options{}, "missing  iptables         iptables is not on PATH: apt-get install --no-install-recommends iptables", true},
		{"iptables legacy", func(m *doctortest.Machine) { m.Backend = "legacy" },
			doctor.Options{}, "warn     iptables         iptables uses the legacy backend: nft list ruleset does not show minikit's iptables rules: update-alternatives --set iptables /usr/sbin/iptables-nft", false},
		{"iptables broken", func(m *doctortest.Machine) { m.BackendErr = fmt.Errorf("finding iptables: exit status 1") },
			doctor.Options{}, "missing  iptables         iptables does not run (finding iptables: exit status 1): apt-get install --reinstall iptables", true},
		{"no iptables-restore", func(m *doctortest.Machine) { delete(m.Tools, "iptables-restore") },
			doctor.Options{}, "missing  iptables-restore iptables-restore is not on PATH (minikit's service proxy applies its rules with it): apt-get install --no-install-recommends iptables", true},
		{"no iptables-save", func(m *doctortest.Machine) { delete(m.Tools, "iptables-save") },
			doctor.Options{}, "missing  iptables-save    iptables-save is not on PATH (minikit reads the rules with it): apt-get install --no-install-recommends iptables", true},
		{"no ip", func(m *doctortest.Machine) { delete(m.Tools, "ip") },
			doctor.Options{}, "missing  ip               ip is not on PATH (the examples and the tour run it): apt-get install --no-install-recommends iproute2", true},
		{"no nft", func(m *doctortest.Machine) { delete(m.Tools, "nft") },
			doctor.Options{}, "missing  nft              nft is not on PATH (minikit trace and the examples read nftables rules with it): apt-get install --no-install-recommends nftables", true},
		{"no nsenter", func(m *doctortest.Machine) { delete(m.Tools, "nsenter") },
			doctor.Options{}, "missing  nsenter          nsenter is not on PATH (minikit lab runs the nodes' processes with it): apt-get install --no-install-recommends util-linux", true},
		{"no kubectl", func(m *doctortest.Machine) { delete(m.Tools, "kubectl") },
			doctor.Options{}, "warn     kubectl          kubectl is not on PATH (the student's client; minikit get, apply, ... run it): apt-get install --no-install-recommends kubernetes-client, or see https://kubernetes.io/docs/tasks/tools/", false},
		{"kubectl too old", func(m *doctortest.Machine) {
			m.Outputs["/usr/bin/kubectl version --client -o json"] = `{"clientVersion":{"gitVersion":"v1.20.15"}}`
		}, doctor.Options{ServerVersion: "v1.32.0"}, "warn     kubectl          kubectl v1.20.15 is more than one minor version from minikit's API (v1.32.0): install kubectl v1.31 to v1.33: https://kubernetes.io/docs/tasks/tools/", false},
		{"kubectl one minor newer", func(m *doctortest.Machine) {
			m.Outputs["/usr/bin/kubectl version --client -o json"] = `{"clientVersion":{"gitVersion":"v1.33.1"}}`
		}, doctor.Options{ServerVersion: "v1.32.0"}, "ok       kubectl          kubectl v1.33.1 (/usr/bin/kubectl)", false},
		{"kubectl does not run", func(m *doctortest.Machine) { delete(m.Outputs, "/usr/bin/kubectl version --client -o json") },
			doctor.Options{}, "warn     kubectl          /usr/bin/kubectl version --client fails (fork/exec /usr/bin/kubectl: no such file or directory): apt-get install --no-install-recommends kubernetes-client, or see https://kubernetes.io/docs/tasks/tools/", false},
		{"cgroup v1 with v2 aside", func(m *doctortest.Machine) {
			m.Files["/proc/self/mounts"] = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
		}, doctor.Options{}, "warn     cgroup           cgroup v1 at /sys/fs/cgroup, v2 only at /sys/fs/cgroup/unified (minikit sets no resource limits, so it runs without v2): boot with systemd.unified_cgroup_hierarchy=1", false},
		{"no cgroup", func(m *doctortest.Machine) { m.Files["/proc/self/mounts"] = "tmpfs /run tmpfs rw 0 0\n" },
			doctor.Options{}, "warn     cgroup           no cgroup file system is mounted (minikit sets no resource limits, so it runs without): mount -t cgroup2 cgroup2 /sys/fs/cgroup", false},
		{"/run read-only", func(m *doctortest.Machine) { m.Dirs["/run"] = unix.EROFS },
			doctor.Options{}, "missing  /run             /run is not writable (read-only file system): network namespaces are pinned under /run/netns: mount -t tmpfs tmpfs /run", true},
		{"/run not ours", func(m *doctortest.Machine) { m.Dirs["/run"] = unix.EACCES },
			doctor.Options{Command: "minikit agent"}, "missing  /run             /run is not writable (permission denied): network namespaces are pinned under /run/netns: run as root: sudo minikit agent", true},
		{"/run/netns a file", func(m *doctortest.Machine) { m.Dirs["/run/netns"] = unix.ENOTDIR },
			doctor.Options{}, "missing  /run             /run/netns is not usable (not a directory): remove the file /run/netns (ip netns add makes it a directory again)", true},
		{"/run/netns not made yet", func(m *doctortest.Machine) { delete(m.Dirs, "/run/netns") },
			doctor.Options{}, "ok       /run             /run is writable (/run/netns is made on first use)", false},
		{"source tree without go", func(m *doctortest.Machine) {
			m.Files["go.mod"] = "module github.com/minikit/minikit\n\ngo 1.26.8\n"
		}, doctor.Options{}, "warn     go               go is not on PATH, and this source tree's go.mod needs go 1.26.8: install Go 1.26.8 or later: https://go.dev/dl/", false},
		{"source tree with an old go", func(m *doctortest.Machine) {
			m.Files["go.mod"] = "module github.com/minikit/minikit\n\ngo 1.26.8\n"
			m.Tools["go"] = "/usr/local/go/bin/go"
			m.Outputs["/usr/local/go/bin/go env GOVERSION"] = "go1.24.3\n"
		}, doctor.Options{}, "warn     go               go1.24.3 is older than go 1.26.8, which go.mod needs: install Go 1.26.8 or later: https://go.dev/dl/", false},
		{"source tree with a newer go", func(m *doctortest.Machine) {
			m.Files["go.mod"] = "module github.com/minikit/minikit\n\ngo 1.26.8\n"
			m.Tools["go"] = "/usr/local/go/bin/go"
			m.Outputs["/usr/local/go/bin/go env GOVERSION"] = "go1.27rc1\n"
		}, doctor.Options{}, "ok       go               go1.27rc1 (go.mod needs go 1.26.8)", false},
		{"another module's tree", func(m *doctortest.Machine) {
			m.Files["go.mod"] = "module example.com/other\n\ngo 1.30\n"
			m.Tools["go"] = "/usr/local/go/bin/go"
		}, doctor.Options{}, "ok       go               /usr/local/go/bin/go (only needed to build minikit from source)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := doctortest.Healthy()
			tc.take(m)
			r := doctor.Run(m.System(), tc.opts)
			name := strings.Fields(tc.want)[1]
			c, ok := r.Check(name)
			if !ok {
				t.Fatalf("no %s check in %v", name, names(r))
			}
			if got := c.Line(); got != tc.want {
				t.Errorf("line:\n got %q\nwant %q", got, tc.want)
			}
			if r.OK == tc.fail {
				t.Errorf("report OK = %v, want %v (failed: %v)", r.OK, !tc.fail, r.Failed())
			}
			err := r.Err("minikit lab up")
			if tc.fail != (err != nil) {
				t.Fatalf("Err = %v, want an error: %v", err, tc.fail)
			}
			if tc.fail && c.Status == doctor.Missing && !strings.Contains(err.Error(), "\n"+tc.want) {
				t.Errorf("Err does not carry the line:\n%v", err)
			}
		})
	}
}

// TestRequiredOnly is what lab up, server and agent run: only the checks
// that can find something missing, none that runs kubectl or go, and the
// error is the failing lines, one per line.
func TestRequiredOnly(t *testing.T) {
	m := doctortest.Healthy()
	delete(m.Tools, "nft")
	delete(m.Tools, "kubectl")
	m.Probe[doctor.FeatureVXLAN] = unix.EOPNOTSUPP
	m.Files["go.mod"] = "module github.com/minikit/minikit\n\ngo 1.26.8\n"
	r := doctor.Run(m.System(), doctor.Options{Command: "minikit lab up", RequiredOnly: true})
	if got := names(r); !slices.Equal(got, requiredChecks) {
		t.Errorf("checks = %v, want %v", got, requiredChecks)
	}
	if runs := m.Runs(); len(runs) != 0 {
		t.Errorf("the required checks ran %v", runs)
	}
	want := `minikit lab up cannot run on this machine (sudo minikit doctor checks everything):
missing  vxlan            the kernel cannot create a VXLAN device (operation not supported): modprobe vxlan, or a kernel with CONFIG_VXLAN
missing  nft              nft is not on PATH (minikit trace and the examples read nftables rules with it): apt-get install --no-install-recommends nftables`
	if err := r.Err("minikit lab up"); err == nil || err.Error() != want {
		t.Errorf("Err:\n%v\nwant:\n%s", err, want)
	}
}

// TestOnlyRequiredChecksFail: whatever is taken from a check that is not
// required, it warns and the report does not fail.
func TestOnlyRequiredChecksFail(t *testing.T) {
	m := doctortest.Healthy()
	for _, tool := range []string{"kubectl", "modprobe"} {
		delete(m.Tools, tool)
	}
	m.Sysctls[""] = map[string]string{}
	m.Files = map[string]string{"/proc/self/status": "CapEff:\t" + doctortest.CapEff + "\n", "go.mod": "module github.com/minikit/minikit\ngo 1.26.8\n"}
	r := doctor.Run(m.System(), doctor.Options{})
	if !r.OK {
		t.Errorf("report fails: %v", r.Failed())
	}
	for _, name := range []string{"br_netfilter", "ipv6", "kubectl", "cgroup", "go"} {
		if c, _ := r.Check(name); c.Status != doctor.Warn || c.Required {
			t.Errorf("%s: %+v, want a warning of a check that is not required", name, c)
		}
	}
}

func TestJSON(t *testing.T) {
	m := doctortest.Healthy()
	delete(m.Tools, "nft")
	b, err := json.Marshal(doctor.Run(m.System(), doctor.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		OK     bool `json:"ok"`
		Checks []map[string]any
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.OK || len(got.Checks) != len(allChecks) {
		t.Fatalf("ok=%v with %d checks: %s", got.OK, len(got.Checks), b)
	}
	want := map[string]any{"name": "nft", "status": "missing", "required": true,
		"message": "nft is not on PATH (minikit trace and the examples read nftables rules with it)",
		"fix":     "apt-get install --no-install-recommends nftables"}
	for _, c := range got.Checks {
		if c["name"] != "nft" {
			if c["status"] == "ok" && c["fix"] != nil {
				t.Errorf("%v: an ok check has a fix", c)
			}
			continue
		}
		for k, v := range want {
			if c[k] != v {
				t.Errorf("nft %s = %v, want %v", k, c[k], v)
			}
		}
	}
}
