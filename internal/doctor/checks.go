package doctor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	goversion "go/version"
	"io/fs"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// checks is every check, in the order the report lists them. required
// checks can find something missing (and fail the report); the others only
// warn.
var checks = []check{
	{"root", true, checkRoot},
	{"netns", true, checkNetNS},
	{"veth", true, probed(FeatureVeth, "a veth pair", "veth", "CONFIG_VETH")},
	{"bridge", true, probed(FeatureBridge, "a bridge", "bridge", "CONFIG_BRIDGE")},
	{"vxlan", true, probed(FeatureVXLAN, "a VXLAN device", "vxlan", "CONFIG_VXLAN")},
	{"nftables", true, checkNFTables},
	{"conntrack", true, checkConntrack},
	{"ipset", true, probed(FeatureIPSet, "the ipsets NetworkPolicy uses", "ip_set_hash_net ip_set_hash_ipport",
		"CONFIG_IP_SET_HASH_NET and CONFIG_IP_SET_HASH_IPPORT")},
	{"br_netfilter", false, checkBrNetfilter},
	{"ipv6", false, checkIPv6},
	{"iptables", true, checkIPTables},
	{"iptables-restore", true, tool("iptables-restore", "iptables", "minikit's service proxy applies its rules with it")},
	{"iptables-save", true, tool("iptables-save", "iptables", "minikit reads the rules with it")},
	{"ip", true, tool("ip", "iproute2", "the examples and the tour run it")},
	{"nft", true, tool("nft", "nftables", "minikit trace and the examples read nftables rules with it")},
	{"nsenter", true, tool("nsenter", "util-linux", "minikit lab runs the nodes' processes with it")},
	{"kubectl", false, checkKubectl},
	{"cgroup", false, checkCgroup},
	{"/run", true, checkRun},
	{"go", false, checkGo},
}

// Capability bits of CapEff in /proc/self/status.
const (
	capNetAdmin = 12
	capSysAdmin = 21
)

func checkRoot(e *env) (Status, string, string) {
	sudo := "run as root: sudo " + e.opts.Command
	euid := e.sys.Geteuid()
	caps, capsErr := effectiveCaps(e.sys)
	var lacks []string
	if capsErr == nil {
		if caps&(1<<capNetAdmin) == 0 {
			lacks = append(lacks, "CAP_NET_ADMIN")
		}
		if caps&(1<<capSysAdmin) == 0 {
			lacks = append(lacks, "CAP_SYS_ADMIN")
		}
	}
	switch {
	case euid == 0 && len(lacks) == 0:
		return OK, "running as root", ""
	case euid == 0:
		return Missing, "running as root but without " + strings.Join(lacks, " and ") + " (in a container?)",
			"give it CAP_NET_ADMIN and CAP_SYS_ADMIN (docker run --privileged)"
	case capsErr == nil && len(lacks) == 0:
		return OK, fmt.Sprintf("running as uid %d with CAP_NET_ADMIN and CAP_SYS_ADMIN", euid), ""
	default:
		return Missing, fmt.Sprintf("running as uid %d, without root or CAP_NET_ADMIN and CAP_SYS_ADMIN", euid), sudo
	}
}

// effectiveCaps reads CapEff from /proc/self/status.
func effectiveCaps(sys System) (uint64, error) {
	b, err := sys.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// kernelSays is a kernel error as one short line.
func kernelSays(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

func checkNetNS(e *env) (Status, string, string) {
	err, tried := e.kernel()[FeatureNetNS]
	switch {
	case !tried:
		return Warn, "not checked", "run as root: sudo " + e.opts.Command
	case errors.Is(err, unix.EPERM):
		return Warn, "not checked: creating a network namespace needs CAP_SYS_ADMIN", "run as root: sudo " + e.opts.Command
	case err != nil:
		return Missing, "the kernel cannot create a network namespace (" + kernelSays(err) + ")", "a kernel with CONFIG_NET_NS"
	}
	return OK, "network namespaces", ""
}

// notProbed is the status of a feature the probe did not get to.
func notProbed(e *env) (Status, string, string) {
	if err := e.kernel()[FeatureNetNS]; err != nil {
		return Warn, "not checked: no throwaway network namespace to try it in", "run as root: sudo " + e.opts.Command
	}
	return Warn, "not checked: an earlier step of the kernel probe failed", ""
}

// probed checks a feature the probe tries on its own: what is the object
// the kernel was asked for, module and config say how to get it.
func probed(f Feature, what, module, config string) func(e *env) (Status, string, string) {
	return func(e *env) (Status, string, string) {
		err, tried := e.kernel()[f]
		if !tried {
			return notProbed(e)
		}
		if err != nil {
			return Missing, "the kernel cannot create " + what + " (" + kernelSays(err) + ")",
				"modprobe " + module + ", or a kernel with " + config
		}
		return OK, "the kernel creates " + what, ""
	}
}

// nftExpressions are the nf_tables expressions kube-proxy's nftables mode
// uses, with the module of each.
var nftExpressions = []struct {
	f      Feature
	module string
}{
	{FeatureNumgen, "nft_numgen"},
	{FeatureNAT, "nft_nat"},
	{FeatureCt, "nft_ct"},
	{FeatureFib, "nft_fib_ipv4"},
}

func checkNFTables(e *env) (Status, string, string) {
	p := e.kernel()
	err, tried := p[FeatureNFTables]
	switch {
	case !tried:
		return notProbed(e)
	case err != nil:
		return Missing, "the kernel cannot create an nf_tables table with a nat chain (" + kernelSays(err) + ")",
			"modprobe nf_tables nft_chain_nat, or a kernel with CONFIG_NF_TABLES and CONFIG_NFT_NAT"
	}
	var names, lacks, modules []string
	var first error
	for _, x := range nftExpressions {
		names = append(names, string(x.f))
		if err, tried := p[x.f]; !tried || err != nil {
			lacks, modules = append(lacks, string(x.f)), append(modules, x.module)
			if first == nil {
				first = err
			}
		}
	}
	if len(lacks) > 0 {
		msg := "nf_tables lacks " + strings.Join(lacks, ", ")
		if first != nil {
			msg += " (" + kernelSays(first) + ")"
		}
		return Missing, msg, "modprobe " + strings.Join(modules, " ") + ", or a kernel with the nft expressions kube-proxy uses"
	}
	return OK, "nf_tables with " + strings.Join(names, ", "), ""
}

func checkConntrack(e *env) (Status, string, string) {
	err, tried := e.kernel()[FeatureConntrack]
	switch {
	case !tried:
		return notProbed(e)
	case err != nil:
		return Missing, "connection tracking has no nf_conntrack sysctls (" + kernelSays(err) + ")",
			"modprobe nf_conntrack, or a kernel with CONFIG_NF_CONNTRACK"
	}
	return OK, "nf_conntrack tracks connections", ""
}

// in says where a per-namespace setting was read, and nsenter prefixes a
// fix that must run there.
func (e *env) in() string {
	if e.opts.NetNS == "" {
		return ""
	}
	return " in " + e.opts.NetNS
}

func (e *env) nsenter() string {
	if e.opts.NetNS == "" {
		return ""
	}
	return "nsenter --net=" + e.opts.NetNS + " "
}

func checkBrNetfilter(e *env) (Status, string, string) {
	v, err := e.sys.Sysctl(e.opts.NetNS, "net/bridge/bridge-nf-call-iptables")
	if err == nil {
		return OK, "loaded (net.bridge.bridge-nf-call-iptables = " + v + e.in() + ")", ""
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return Warn, "cannot read net.bridge.bridge-nf-call-iptables" + e.in() + " (" + kernelSays(err) + ")", ""
	}
	if !kernelModule(e.sys, "br_netfilter") {
		return Warn, "br_netfilter is not loaded nor a module of this kernel: pod-to-pod traffic on a node's bridge bypasses iptables",
			"modprobe br_netfilter, or a kernel with CONFIG_BRIDGE_NETFILTER"
	}
	if _, err := e.sys.LookPath("modprobe"); err != nil {
		return Warn, "br_netfilter is not loaded, and modprobe, which minikit loads it with, is not on PATH",
			"apt-get install --no-install-recommends kmod"
	}
	return OK, "not loaded yet: a module, which minikit loads when a node starts", ""
}

// kernelModule says whether the running kernel has the named module, built
// in or loadable, as modprobe would find it.
func kernelModule(sys System, name string) bool {
	release, err := sys.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return false
	}
	dir := "/lib/modules/" + strings.TrimSpace(string(release)) + "/"
	for _, f := range []string{"modules.builtin", "modules.dep"} {
		b, err := sys.ReadFile(dir + f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			path, _, _ := strings.Cut(sc.Text(), ":")
			base := path[strings.LastIndexByte(path, '/')+1:]
			if base == name+".ko" || strings.HasPrefix(base, name+".ko.") {
				return true
			}
		}
	}
	return false
}

func checkIPv6(e *env) (Status, string, string) {
	v, err := e.sys.Sysctl(e.opts.NetNS, "net/ipv6/conf/all/disable_ipv6")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Warn, "the kernel has no IPv6 (no /proc/sys/net/ipv6" + e.in() + ")",
			"remove ipv6.disable=1 from the kernel command line, or a kernel with CONFIG_IPV6"
	case err != nil:
		return Warn, "cannot read net.ipv6.conf.all.disable_ipv6" + e.in() + " (" + kernelSays(err) + ")", ""
	case v != "0":
		return Warn, "IPv6 is disabled (net.ipv6.conf.all.disable_ipv6 = " + v + e.in() + ")",
			e.nsenter() + "sysctl -w net.ipv6.conf.all.disable_ipv6=0"
	}
	return OK, "IPv6 is enabled" + e.in(), ""
}

func checkIPTables(e *env) (Status, string, string) {
	if _, err := e.sys.LookPath("iptables"); err != nil {
		return Missing, "iptables is not on PATH", "apt-get install --no-install-recommends iptables"
	}
	backend, err := e.sys.IPTablesBackend()
	switch {
	case err != nil:
		return Missing, "iptables does not run (" + kernelSays(err) + ")", "apt-get install --reinstall iptables"
	case backend == "legacy":
		return Warn, "iptables uses the legacy backend: nft list ruleset does not show minikit's iptables rules",
			"update-alternatives --set iptables /usr/sbin/iptables-nft"
	}
	return OK, "iptables uses the " + backend + " backend", ""
}

// tool checks that a tool is on PATH; pkg is its Debian package, why says
// what needs it.
func tool(name, pkg, why string) func(e *env) (Status, string, string) {
	return func(e *env) (Status, string, string) {
		path, err := e.sys.LookPath(name)
		if err != nil {
			return Missing, name + " is not on PATH (" + why + ")", "apt-get install --no-install-recommends " + pkg
		}
		return OK, path, ""
	}
}

const kubectlFix = "apt-get install --no-install-recommends kubernetes-client, or see https://kubernetes.io/docs/tasks/tools/"

func checkKubectl(e *env) (Status, string, string) {
	path, err := e.sys.LookPath("kubectl")
	if err != nil {
		return Warn, "kubectl is not on PATH (the student's client; minikit get, apply, ... run it)", kubectlFix
	}
	out, err := e.sys.Output(path, "version", "--client", "-o", "json")
	if err != nil {
		return Warn, path + " version --client fails (" + kernelSays(err) + ")", kubectlFix
	}
	var v struct {
		ClientVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"clientVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.ClientVersion.GitVersion == "" {
		return Warn, path + " version --client -o json says no version", kubectlFix
	}
	have := v.ClientVersion.GitVersion
	if e.opts.ServerVersion != "" {
		hm, ok1 := minor(have)
		sm, ok2 := minor(e.opts.ServerVersion)
		if ok1 && ok2 && (hm < sm-1 || hm > sm+1) {
			return Warn, fmt.Sprintf("kubectl %s is more than one minor version from minikit's API (%s)", have, e.opts.ServerVersion),
				fmt.Sprintf("install kubectl v1.%d to v1.%d: https://kubernetes.io/docs/tasks/tools/", sm-1, sm+1)
		}
	}
	return OK, "kubectl " + have + " (" + path + ")", ""
}

// minor is the minor version of "v1.32.4-x": 32.
func minor(v string) (int, bool) {
	pv, err := utilversion.ParseGeneric(v)
	if err != nil {
		return 0, false
	}
	return int(pv.Minor()), true
}

func checkCgroup(e *env) (Status, string, string) {
	b, err := e.sys.ReadFile("/proc/self/mounts")
	if err != nil {
		return Warn, "cannot read /proc/self/mounts (" + kernelSays(err) + ")", "mount -t proc proc /proc"
	}
	var atRoot, v2 string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		if f[1] == "/sys/fs/cgroup" {
			atRoot = f[2]
		}
		if f[2] == "cgroup2" && v2 == "" {
			v2 = f[1]
		}
	}
	switch {
	case atRoot == "cgroup2":
		return OK, "cgroup v2 at /sys/fs/cgroup", ""
	case atRoot == "" && v2 == "":
		return Warn, "no cgroup file system is mounted (minikit sets no resource limits, so it runs without)",
			"mount -t cgroup2 cgroup2 /sys/fs/cgroup"
	case v2 != "":
		return Warn, "cgroup v1 at /sys/fs/cgroup, v2 only at " + v2 + " (minikit sets no resource limits, so it runs without v2)",
			"boot with systemd.unified_cgroup_hierarchy=1"
	}
	return Warn, "cgroup v1 at /sys/fs/cgroup, no v2 (minikit sets no resource limits, so it runs without v2)",
		"boot with systemd.unified_cgroup_hierarchy=1"
}

func checkRun(e *env) (Status, string, string) {
	runFix := func(err error) string {
		switch {
		case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
			return "run as root: sudo " + e.opts.Command
		case errors.Is(err, unix.EROFS):
			return "mount -t tmpfs tmpfs /run"
		case errors.Is(err, unix.ENOTDIR):
			return "remove the file /run/netns (ip netns add makes it a directory again)"
		}
		return "make /run a writable tmpfs (mount -t tmpfs tmpfs /run)"
	}
	if err := e.sys.Writable("/run"); err != nil {
		return Missing, "/run is not writable (" + kernelSays(err) + "): network namespaces are pinned under /run/netns", runFix(err)
	}
	err := e.sys.Writable("/run/netns")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return OK, "/run is writable (/run/netns is made on first use)", ""
	case err != nil:
		return Missing, "/run/netns is not usable (" + kernelSays(err) + ")", runFix(err)
	}
	return OK, "/run and /run/netns are writable", ""
}

const ourModule = "github.com/minikit/minikit"

// checkGo reports Go only where it matters: in minikit's source tree, which
// needs the go.mod's Go to build.
func checkGo(e *env) (Status, string, string) {
	want := sourceTreeGo(e.sys)
	path, err := e.sys.LookPath("go")
	if want == "" {
		if err != nil {
			return OK, "not on PATH (only needed to build minikit from source)", ""
		}
		return OK, path + " (only needed to build minikit from source)", ""
	}
	fix := "install Go " + want + " or later: https://go.dev/dl/"
	if err != nil {
		return Warn, "go is not on PATH, and this source tree's go.mod needs go " + want, fix
	}
	out, err := e.sys.Output(path, "env", "GOVERSION")
	have := strings.TrimSpace(string(out))
	if err != nil || have == "" {
		return Warn, path + " env GOVERSION fails", fix
	}
	if goversion.Compare(have, "go"+want) < 0 {
		return Warn, have + " is older than go " + want + ", which go.mod needs", fix
	}
	return OK, have + " (go.mod needs go " + want + ")", ""
}

// sourceTreeGo is the go directive of ./go.mod when the working directory is
// minikit's source tree, else "".
func sourceTreeGo(sys System) string {
	b, err := sys.ReadFile("go.mod")
	if err != nil {
		return ""
	}
	var mod, goVer string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "module" {
			mod = f[1]
		}
		if len(f) == 2 && f[0] == "go" {
			goVer = f[1]
		}
	}
	if mod != ourModule {
		return ""
	}
	return goVer
}
