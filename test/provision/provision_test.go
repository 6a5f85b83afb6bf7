// Package provision_test checks the Vagrant path without a hypervisor: the
// Vagrantfile validates in every layout it offers, and scripts/provision.sh, run
// as Vagrant runs it but on "VMs" made of fresh Debian 12 roots (debootstrap),
// gets from a bare system to a cluster: a `minikit server` answering /readyz,
// an agent that joined it, client and external hosts, and the examples'
// check.sh scripts passing unchanged from the client.
//
// Each VM is a root entered with pivot_root in namespaces of its own (mount,
// PID, UTS, and a network namespace the test creates): the servers listen
// there, never in the root namespace, and killing the VM's init ends every
// process it ran, hence its mounts. The VMs' network has no route off the
// machine; provision.sh reaches its two registries as a VM behind a proxy
// would: apt through an HTTP proxy the test serves inside the namespace (it
// forwards only to the Debian mirror), the Go module proxy as GOPROXY=file://
// over the host's module download cache (the toolchain zip is put there first
// by `go mod download`, from the real module proxy, and provision.sh checks it
// against the hash it pins, as it does on a VM).
package provision_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"
)

// goVersion is the Go provision.sh pins (its go_version).
const goVersion = "1.26.8"

// debianMirror is where debootstrap and the root's apt fetch Debian 12 from.
const debianMirror = "deb.debian.org"

// serverIP is node1's address on the Vagrant network, in the test's namespace.
const serverIP = "192.168.56.10"

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env %s: %v %q", name, err, out)
	}
	return strings.TrimSpace(string(out))
}

func suffix() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestVagrantfileValidates runs `vagrant validate` (Debian's vagrant, with
// --ignore-provider: no hypervisor or provider plugin here) on every layout the
// Vagrantfile offers, and checks that a wrong setting is refused with
// a message naming it.
func TestVagrantfileValidates(t *testing.T) {
	root := repoRoot(t)
	home := t.TempDir()
	if _, err := os.Stat(filepath.Join(root, ".vagrant")); err == nil {
		t.Logf("%s/.vagrant exists already (a vagrant of yours): not checking that validate leaves none", root)
	} else {
		t.Cleanup(func() {
			if _, err := os.Stat(filepath.Join(root, ".vagrant")); err == nil {
				t.Errorf("vagrant validate left %s/.vagrant", root)
			}
		})
	}
	run := func(env ...string) (string, error) {
		cmd := exec.Command("vagrant", "validate", "--ignore-provider")
		cmd.Dir = root
		// VAGRANT_HOME, VAGRANT_DOTFILE_PATH: no state in ~/.vagrant.d or the
		// repository (.vagrant, where the hosts' SSH key is made); no checkpoint: nothing
		// is fetched (there is no network here but the registries').
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "VAGRANT_HOME=" + filepath.Join(home, "vagrant.d"),
			"VAGRANT_DOTFILE_PATH=" + filepath.Join(home, "dot"), "VAGRANT_CHECKPOINT_DISABLE=1", "VAGRANT_DISABLE_VBOXSYMLINKCREATE=1"}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"default: 1 server, 1 agent, client, external", nil},
		{"ha: 3 servers and an agent", []string{"MINIKIT_NODES=4", "MINIKIT_SERVERS=3"}},
		{"arm64 box", []string{"MINIKIT_ARCH=arm64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(tc.env...)
			if err != nil || !strings.Contains(out, "Vagrantfile validated successfully") {
				t.Fatalf("vagrant validate %v: %v\n%s", tc.env, err, out)
			}
		})
	}
	// The hosts' SSH key, made by the Vagrantfile in Vagrant's state directory:
	// its public half is the private key's.
	key := filepath.Join(home, "dot", "minikit", "id_rsa")
	derived, err := exec.Command("ssh-keygen", "-y", "-f", key).Output()
	if err != nil {
		t.Fatalf("ssh-keygen -y -f %s (the key the Vagrantfile made): %v", key, err)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(pub)); len(f) < 2 || f[0]+" "+f[1] != strings.TrimSpace(string(derived)) {
		t.Errorf("%s.pub = %q, want the public half of %s: %q", key, pub, key, derived)
	}
	for _, tc := range []struct {
		env  string
		want string
	}{
		{"MINIKIT_SERVERS=3", "MINIKIT_SERVERS=3: want 1 to MINIKIT_NODES (2)"},
		{"MINIKIT_NODES=4 MINIKIT_SERVERS=2", "MINIKIT_SERVERS=2: want an odd number (1, 3, 5, 7)"},
		{"MINIKIT_NODES=two", `MINIKIT_NODES="two" is not a number`},
		{"MINIKIT_ARCH=riscv64", `MINIKIT_ARCH="riscv64": want amd64 or arm64`},
	} {
		t.Run("refuses "+tc.env, func(t *testing.T) {
			out, err := run(strings.Fields(tc.env)...)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("vagrant validate with %s: err %v, want a failure saying %q:\n%s", tc.env, err, tc.want, out)
			}
		})
	}
}

// TestProvisionFreshDebianRoot runs scripts/provision.sh as Vagrant runs it
// on the Vagrantfile's four hosts, made of fresh Debian 12 roots on one bridge
// (the Vagrant network, 192.168.56.0/24): node1 (`provision.sh server
// 192.168.56.10 192.168.56.10`, nothing built on the host) must install the Go
// it pins (checksum-verified), build minikit with it and leave a server
// answering /readyz; node2 (agent), client and external, given a binary built
// elsewhere as from a host, must fetch node1's token, CA and kubeconfig over
// SSH, node2 join the cluster; then examples/lib.sh reaches the hosts over SSH
// and the examples' checks pass unchanged from the client.
func TestProvisionFreshDebianRoot(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"debootstrap", "chroot", "unshare", "nsenter", "ip", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (scripts/deps.sh installs it): %v", tool, err)
		}
	}
	removeStale(t)
	repo := repoRoot(t)
	arch := runtime.GOARCH
	nsBase := nsPrefix + suffix()
	mine := func(name string) bool { return strings.HasPrefix(name, nsBase) }
	before := testenv.RootSnapshot(t, mine)

	// The host's module download cache is the roots' GOPROXY: the repository's
	// modules (the test binary was built from them) and the toolchain zip.
	cache := goCaches{mod: goEnv(t, "GOMODCACHE"), build: goEnv(t, "GOCACHE")}
	toolchain := "golang.org/toolchain@v0.0.1-go" + goVersion + ".linux-" + arch
	if out, err := exec.Command("go", "mod", "download", toolchain).CombinedOutput(); err != nil {
		t.Fatalf("go mod download %s: %v\n%s", toolchain, err, out)
	}
	dl := exec.Command("go", "mod", "download")
	dl.Dir = repo
	if out, err := dl.CombinedOutput(); err != nil {
		t.Fatalf("go mod download (the repository's modules): %v\n%s", err, out)
	}

	tmp := t.TempDir()
	node1 := &vm{name: "node1", ip: serverIP, root: filepath.Join(tmp, "node1"), ns: nsBase + "-1"}
	node2 := &vm{name: "node2", ip: "192.168.56.11", root: filepath.Join(tmp, "node2"), ns: nsBase + "-2"}
	client := &vm{name: "client", ip: "192.168.56.100", root: filepath.Join(tmp, "client"), ns: nsBase + "-c"}
	external := &vm{name: "external", ip: "192.168.56.200", root: filepath.Join(tmp, "external"), ns: nsBase + "-e"}
	vms := []*vm{node1, node2, client, external}
	// The Vagrant network: a bridge in a namespace of its own, each VM's eth1 plugged into it.
	sw := nsBase + "-sw"

	start := time.Now()
	deb := exec.Command("debootstrap", "--variant=minbase", "bookworm", node1.root, "http://"+debianMirror+"/debian")
	// Dies with the test process (go test's -timeout panics without Cleanup).
	deb.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := deb.CombinedOutput(); err != nil {
		t.Fatalf("debootstrap: %v\n%s", err, tail(out, 40))
	}
	t.Logf("debootstrap: %s", time.Since(start).Round(time.Second))
	// As in any chroot a package is installed in: services are not started by
	// their packages (openssh-server's postinst); a VM has no such file.
	if err := os.WriteFile(filepath.Join(node1.root, "usr/sbin/policy-rc.d"), []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The hosts' shared SSH key, where the Vagrantfile's file provisioner puts it.
	if err := os.MkdirAll(filepath.Join(node1.root, "tmp/minikit-ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "rsa", "-b", "3072", "-N", "", "-C", "minikit-lab", "-f", filepath.Join(node1.root, "tmp/minikit-ssh/id_rsa")).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	// The other VMs start from the same fresh root (another debootstrap would fetch the same).
	for _, v := range vms[1:] {
		if out, err := exec.Command("cp", "-a", node1.root, v.root).CombinedOutput(); err != nil {
			t.Fatalf("copying the fresh root: %v: %s", err, out)
		}
	}

	for _, ns := range []string{sw, node1.ns, node2.ns, client.ns, external.ns} {
		if err := netns.CreateNamed(ns); err != nil {
			t.Fatalf("creating network namespace %s: %v", ns, err)
		}
		t.Cleanup(func() {
			if err := netns.DeleteNamed(ns); err != nil {
				t.Errorf("deleting network namespace %s: %v", ns, err)
			}
		})
	}
	in := func(ns string, argv ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...).CombinedOutput(); err != nil {
			t.Fatalf("in %s: %v: %v: %s", ns, argv, err, out)
		}
	}
	in(sw, "ip", "link", "add", "br0", "type", "bridge")
	in(sw, "ip", "link", "set", "br0", "up")
	for _, v := range vms {
		in(sw, "ip", "link", "add", v.name, "type", "veth", "peer", "name", "eth1", "netns", v.ns)
		in(sw, "ip", "link", "set", v.name, "master", "br0", "up")
		for _, argv := range [][]string{
			{"ip", "link", "set", "lo", "up"},
			{"ip", "addr", "add", v.ip + "/24", "dev", "eth1"},
			{"ip", "link", "set", "eth1", "up"},
			{"ip", "route", "add", "default", "via", "192.168.56.1", "dev", "eth1", "onlink"},
		} {
			if out, err := exec.Command("ip", append([]string{"netns", "exec", v.ns}, argv...)...).CombinedOutput(); err != nil {
				t.Fatalf("in %s: %v: %v: %s", v.ns, argv, err, out)
			}
		}
		v.proxy = startAptProxy(t, v.nsPath())
		// Registered after the namespace's removal, so it runs before it.
		v.boot(t, repo, cache)
	}
	// The proxy is apt's way to the Debian mirror and nothing else's.
	viaProxy := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: node1.proxy}), DialContext: node1.dial}}
	for _, u := range []string{"http://example.com/", "http://" + debianMirror + ":8080/debian/"} {
		resp, err := viaProxy.Get(u)
		if err != nil {
			t.Fatalf("GET %s through the namespace's proxy: %v", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s through the namespace's proxy: %s, want 403 Forbidden", u, resp.Status)
		}
	}
	viaProxy.CloseIdleConnections()

	hostsEnv := "MINIKIT_HOSTS=node1=" + node1.ip + " node2=" + node2.ip + " client=" + client.ip + " external=" + external.ip
	log := node1.provision(t, []string{"MINIKIT_BINARY=", hostsEnv}, "server", node1.ip, serverIP)

	// What it said and left: the pinned Go, verified, built minikit.
	for _, want := range []string{
		"installed go version go" + goVersion + " linux/" + arch,
		"provision: server node1 (" + serverIP + ") provisioned",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("provision.sh did not say %q", want)
		}
	}
	if !strings.Contains(log, "checksum h1:") {
		t.Errorf("provision.sh did not report the toolchain's checksum")
	}
	unit, err := os.ReadFile(filepath.Join(node1.root, "etc/systemd/system/minikit.service"))
	if err != nil {
		t.Fatal(err)
	}
	wantExec := "ExecStart=/usr/local/bin/minikit server --listen 0.0.0.0:6443 --advertise-address " + serverIP +
		" --node-name node1 --node-ip " + serverIP + " --lb-pool 192.168.56.240-192.168.56.250 --dns-upstream 192.168.56.200\n"
	if !strings.Contains(string(unit), wantExec) {
		t.Errorf("minikit.service: want line %q in:\n%s", wantExec, unit)
	}
	hosts, _ := os.ReadFile(filepath.Join(node1.root, "etc/hosts"))
	if !strings.Contains(string(hosts), "192.168.56.100\tclient # minikit\n") {
		t.Errorf("/etc/hosts names no client:\n%s", hosts)
	}
	examplesEnv, _ := os.ReadFile(filepath.Join(node1.root, "etc/minikit/examples.env"))
	if string(examplesEnv) != "MINIKIT_HOSTS_VIA=ssh\nKUBECONFIG=/etc/minikit/kubeconfig\n" {
		t.Errorf("/etc/minikit/examples.env = %q", examplesEnv)
	}
	for _, f := range []string{"srv/minikit-share/token", "srv/minikit-share/ca.crt", "srv/minikit-share/kubeconfig", "etc/minikit/kubeconfig", "root/.ssh/id_rsa"} {
		if st, err := os.Stat(filepath.Join(node1.root, f)); err != nil || st.Size() == 0 {
			t.Errorf("provision.sh left no %s: %v", f, err)
		}
	}
	// The other hosts reach this one with the shared key, and the server's URL
	// in the kubeconfig they fetch is its lab address.
	pub, _ := os.ReadFile(filepath.Join(node1.root, "tmp/minikit-ssh/id_rsa.pub"))
	authorized, _ := os.ReadFile(filepath.Join(node1.root, "root/.ssh/authorized_keys"))
	if len(pub) == 0 || !strings.Contains(string(authorized), strings.TrimSpace(string(pub))) {
		t.Errorf("root's authorized_keys does not hold the shared key:\n%s", authorized)
	}
	shared, _ := os.ReadFile(filepath.Join(node1.root, "srv/minikit-share/kubeconfig"))
	if !strings.Contains(string(shared), "server: https://"+serverIP+":6443\n") {
		t.Errorf("the shared kubeconfig does not name https://%s:6443:\n%s", serverIP, shared)
	}

	// The server answers /readyz on its lab address, in the namespace, over TLS
	// that the cluster CA provision.sh shared verifies.
	ca, err := os.ReadFile(filepath.Join(node1.root, "srv/minikit-share/ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("ca.crt holds no certificate")
	}
	api := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext:     node1.dial,
	}}
	defer api.CloseIdleConnections()
	testutil.Eventually(t, 60*time.Second, "minikit server answers https://"+serverIP+":6443/readyz", func() error {
		resp, err := api.Get("https://" + serverIP + ":6443/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "ok" {
			return fmt.Errorf("%s: %q", resp.Status, b)
		}
		return nil
	})

	// sshd, as the VM's systemd runs it.
	if out, err := node1.run(t, "mkdir -p /run/sshd && /usr/sbin/sshd"); err != nil {
		t.Fatalf("starting sshd on node1: %v\n%s", err, out)
	}

	// The others from a binary built elsewhere (node1's, as from the host's
	// bin/minikit): node2 an agent, the client and the external host.
	bin, err := os.ReadFile(filepath.Join(node1.root, "usr/local/bin/minikit"))
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []struct {
		v    *vm
		role string
	}{{node2, "agent"}, {client, "client"}, {external, "external"}} {
		v := host.v
		if err := os.WriteFile(filepath.Join(v.root, "tmp/minikit-bin"), bin, 0o755); err != nil {
			t.Fatal(err)
		}
		said := v.provision(t, []string{"MINIKIT_BINARY=/tmp/minikit-bin", hostsEnv}, host.role, v.ip, serverIP)
		for _, want := range []string{"provision: installed /tmp/minikit-bin", "provision: " + host.role + " " + v.name + " (" + v.ip + ") provisioned"} {
			if !strings.Contains(said, want) {
				t.Errorf("provision.sh on %s did not say %q", v.name, want)
			}
		}
		if _, err := os.Stat(filepath.Join(v.root, "usr/local/go")); err == nil {
			t.Errorf("provision.sh installed Go on %s, which was given a binary", v.name)
		}
		if out, err := v.run(t, "mkdir -p /run/sshd && /usr/sbin/sshd"); err != nil {
			t.Fatalf("starting sshd on %s: %v\n%s", v.name, err, out)
		}
	}
	for from, to := range map[string]string{"srv/minikit-share/token": "etc/minikit/token", "srv/minikit-share/ca.crt": "etc/minikit/ca.crt", "srv/minikit-share/kubeconfig": "etc/minikit/kubeconfig"} {
		a, _ := os.ReadFile(filepath.Join(node1.root, from))
		b, err := os.ReadFile(filepath.Join(node2.root, to))
		if err != nil || len(a) == 0 || string(a) != string(b) {
			t.Errorf("node2's /%s is not node1's /%s (fetched over SSH): %v", to, from, err)
		}
	}
	if a, b := readTail(filepath.Join(node1.root, "srv/minikit-share/kubeconfig"), 1000), readTail(filepath.Join(client.root, "etc/minikit/kubeconfig"), 1000); a != b {
		t.Errorf("the client's kubeconfig is not the one node1 shares")
	}

	// The examples reach the hosts as they do on the VMs: examples/lib.sh reads
	// /etc/minikit/examples.env and runs `on node1 ...` over SSH as root with the
	// shared key, words quoted as they were, from every host, node1 too;
	// kubectl finds the cluster through the kubeconfig it names.
	for _, v := range vms {
		out, err := v.run(t, `set -e; . /vagrant/examples/lib.sh; echo "via=$MINIKIT_HOSTS_VIA kubeconfig=$KUBECONFIG"; on node1 hostname; on node1 printf '%s|' 'a b' "it's" '$HOME'; echo; show on node1 true`)
		if err != nil {
			t.Fatalf("examples/lib.sh on %s: %v\n%s", v.name, err, out)
		}
		if want := "via=ssh kubeconfig=/etc/minikit/kubeconfig\nnode1\na b|it's|$HOME|\n$ ssh root@node1 -- true\n"; out != want {
			t.Errorf("examples/lib.sh on %s said:\n%s\nwant:\n%s", v.name, out, want)
		}
	}
	testutil.Eventually(t, 60*time.Second, "kubectl on node2 lists node1 and node2", func() error {
		out, err := node2.run(t, `. /vagrant/examples/lib.sh; kubectl get nodes -o name`)
		if err != nil || out != "node/node1\nnode/node2\n" {
			return fmt.Errorf("%v: %q", err, out)
		}
		return nil
	})

	// Examples' checks, unchanged, as a student runs them on the client VM
	// (`vagrant ssh client -c 'sudo /vagrant/examples/clusterip/check.sh'`): pods
	// on both nodes, node1's and node2's rules read over SSH, the client's
	// requests to NodePorts and LoadBalancer addresses over the Vagrant network
	// (ARP answered by the nodes), the external host's DNS and HTTP behind an
	// ExternalName Service: every example but the two that need a lab
	// (pod-network restarts nodes with `minikit lab stop/start`, networkpolicy runs
	// `minikit trace --lab`). About 45 s for the nine.
	for _, example := range []string{"clusterip", "nodeport", "loadbalancer", "externalname", "dns", "externalips", "headless", "ingress", "snat-and-local"} {
		start := time.Now()
		out, err := client.run(t, "/vagrant/examples/"+example+"/check.sh")
		t.Logf("examples/%s/check.sh on the client: %s", example, time.Since(start).Round(time.Second))
		if err != nil || !strings.Contains(out, "SHOWN: ") {
			t.Errorf("examples/%s/check.sh on the client: %v\n%s\nnode1's minikit log:\n%s\nnode2's:\n%s\nexternal's:\n%s", example, err, out,
				readTail(filepath.Join(node1.root, "var/log/minikit.log"), 30), readTail(filepath.Join(node2.root, "var/log/minikit.log"), 30),
				readTail(filepath.Join(external.root, "var/log/minikit.log"), 10))
			continue
		}
		t.Logf("examples/%s/check.sh on the client: %s", example, out[strings.LastIndex(out, "SHOWN: "):])
	}

	// `vagrant provision` again: nothing to install, the agent restarted (a new
	// process), node2 back in the cluster.
	agentPIDs := func() string {
		out, _ := node2.run(t, "pgrep -f '^/usr/local/bin/minikit agent'")
		return strings.TrimSpace(out)
	}
	old := agentPIDs()
	again := node2.provision(t, []string{"MINIKIT_BINARY=/tmp/minikit-bin", hostsEnv}, "agent", node2.ip, serverIP)
	if strings.Contains(again, "installing ") {
		t.Errorf("provisioning node2 again installed packages again")
	}
	if now := agentPIDs(); old == "" || now == "" || now == old || strings.Contains(now, "\n") {
		t.Errorf("provisioning node2 again: agent processes %q before, %q after; want one new one", old, now)
	}
	testutil.Eventually(t, 60*time.Second, "node2 is Ready again", func() error {
		out, err := client.run(t, `. /vagrant/examples/lib.sh; kubectl get node node2 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'`)
		if err != nil || out != "True" {
			return fmt.Errorf("%v: %q", err, out)
		}
		return nil
	})

	// Everything goes: the VMs' processes (hence their mounts), the namespaces.
	for _, v := range vms {
		v.halt(t)
	}
	for _, ns := range []string{sw, node1.ns, node2.ns, client.ns, external.ns} {
		if err := netns.DeleteNamed(ns); err != nil {
			t.Fatalf("deleting network namespace %s: %v", ns, err)
		}
	}
	if after := testenv.RootSnapshot(t, mine); after != before {
		t.Errorf("the root network namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// vm is one "VM" of the test: a Debian root in namespaces of its own.
type vm struct {
	name, ip string
	root     string // its root directory
	ns       string // its network namespace
	proxy    string // apt's proxy, on loopback in ns
	unshare  *exec.Cmd
	init     int // its init (PID 1 in its PID namespace) as the host sees it
}

// goCaches are the host's module and build caches, which the VMs share.
type goCaches struct{ mod, build string }

func (v *vm) nsPath() string { return netns.NetNSPath(v.ns) }

// dial dials from inside v's namespace, as its programs do.
func (v *vm) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.DoPath(v.nsPath(), func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// boot starts v: in v's network namespace, new mount, UTS and PID namespaces
// whose init mounts /proc, /sys, /dev, /run and the shared directories in the
// root, pivots into it and sleeps. The mounts are private to the VM: they end
// with its last process, and never show on the host. halt ends it, also when
// the test fails; if the test process dies, so does the VM (its unshare has a
// parent-death signal and kills its init when it goes).
func (v *vm) boot(t *testing.T, repo string, cache goCaches) {
	t.Helper()
	script := strings.Join([]string{
		"set -e",
		`r=` + shq(v.root),
		"hostname " + v.name,
		`mount --bind "$r" "$r"`,
		`mount -t proc proc "$r/proc"`,
		`mount -t sysfs sysfs "$r/sys"`,
		`mount --rbind /dev "$r/dev"`,
		`mount -t tmpfs tmpfs "$r/run"`,
		`mkdir -p "$r/vagrant" "$r/var/cache/hV-goproxy" "$r/root/.cache/go-build" "$r/.hV-oldroot"`,
		`mount --bind -o ro ` + shq(repo) + ` "$r/vagrant"`,
		`mount --bind -o ro ` + shq(filepath.Join(cache.mod, "cache", "download")) + ` "$r/var/cache/hV-goproxy"`,
		// The host's build cache: the same toolchain at the same GOROOT, so the
		// build reuses what it compiled before (cold, it compiles everything).
		`mount --bind ` + shq(cache.build) + ` "$r/root/.cache/go-build"`,
		`cd "$r"`,
		`pivot_root . .hV-oldroot`,
		`cd /`,
		`umount -l /.hV-oldroot`,
		`rmdir /.hV-oldroot`,
		`echo booted`,
		`exec sleep infinity`,
	}, "\n")
	cmd := exec.Command("ip", "netns", "exec", v.ns, "unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child",
		"--propagation", "private", "--", "/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("booting %s: %v", v.name, err)
	}
	v.unshare = cmd
	t.Cleanup(func() { v.halt(t) })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "booted\n" {
		t.Fatalf("booting %s: %q: %s", v.name, line, stderr.String())
	}
	// ip netns exec execs unshare, whose child is the init.
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if v.init, err = strconv.Atoi(strings.TrimSpace(string(children))); err != nil {
		t.Fatalf("the init of %s: children of %d: %q", v.name, cmd.Process.Pid, children)
	}
}

// halt kills v's init, which ends every process in v's PID namespace, and
// waits for them.
func (v *vm) halt(t *testing.T) {
	t.Helper()
	if v.unshare == nil {
		return
	}
	if v.init != 0 {
		syscall.Kill(v.init, syscall.SIGKILL)
	}
	v.unshare.Process.Kill()
	v.unshare.Wait()
	v.unshare = nil
	if v.init != 0 {
		testutil.Eventually(t, 30*time.Second, "the processes of "+v.name+" end", func() error {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", v.init)); err == nil {
				return fmt.Errorf("its init %d is still there", v.init)
			}
			return nil
		})
	}
}

// provision runs `provision.sh ARGS...` on v and returns what it said.
func (v *vm) provision(t *testing.T, env []string, args ...string) string {
	t.Helper()
	env = append([]string{
		"http_proxy=http://" + v.proxy, "GOPROXY=file:///var/cache/hV-goproxy",
		"MINIKIT_SRC=/vagrant", "MINIKIT_SHARE=/srv/minikit-share", "MINIKIT_SSH_KEY=/tmp/minikit-ssh/id_rsa",
	}, env...)
	start := time.Now()
	out, err := v.runEnv(t, env, "/bin/bash /vagrant/scripts/provision.sh "+strings.Join(quoteAll(args), " "))
	t.Logf("provision.sh %s on %s: %s", strings.Join(args, " "), v.name, time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("provision.sh %s on %s: %v\n%s\nminikit log:\n%s", strings.Join(args, " "), v.name, err, tail([]byte(out), 60), readTail(filepath.Join(v.root, "var/log/minikit.log"), 40))
	}
	t.Logf("provision.sh on %s said:\n%s", v.name, out)
	return out
}

// run runs a bash script on v as root logged in there would.
func (v *vm) run(t *testing.T, script string) (string, error) {
	t.Helper()
	return v.runEnv(t, nil, script)
}

func (v *vm) runEnv(t *testing.T, env []string, script string) (string, error) {
	t.Helper()
	argv := append([]string{"--target", strconv.Itoa(v.init), "--mount", "--uts", "--net", "--pid", "--root", "--wd",
		"/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}, env...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append(argv, "/bin/bash", "-c", script)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// nsPrefix names this test's network namespaces.
const nsPrefix = "hV-prov-"

// removeStale removes what an earlier run left when it could not clean up (go
// test's -timeout panics without running Cleanup; its VMs died with it): its
// network namespaces and roots (one run at a time on a machine).
func removeStale(t *testing.T) {
	t.Helper()
	names, err := netns.ListNamed(nsPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := netns.DeleteNamed(n); err != nil {
			t.Errorf("removing a stale network namespace %s: %v", n, err)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "TestProvisionFreshDebianRoot*"))
	for _, d := range dirs {
		os.RemoveAll(d)
	}
}

// startAptProxy serves an HTTP proxy on loopback inside the namespace at
// nsPath that forwards plain-HTTP requests for the Debian mirror (apt's) from
// the host, and refuses everything else. It returns the proxy's address.
func startAptProxy(t *testing.T, nsPath string) string {
	t.Helper()
	var ln net.Listener
	if err := netns.DoPath(nsPath, func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatalf("listening in %s: %v", nsPath, err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL = r.In.URL }}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead || r.URL.Scheme != "http" || r.URL.Hostname() != debianMirror || (r.URL.Port() != "" && r.URL.Port() != "80") {
			http.Error(w, "this proxy forwards only GET http://"+debianMirror+"/ (apt)", http.StatusForbidden)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = shq(s)
	}
	return out
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func readTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "(none)"
		}
		return err.Error()
	}
	return tail(b, n)
}

// TestProvisionChecksumIsGoSum checks provision.sh's go_h1, the hash it pins
// the toolchain by, against the go command's own: for a module the repository
// uses, go_h1 over the extracted zip is go.sum's h1 line, and one changed byte
// changes it (so a tampered toolchain is refused).
func TestProvisionChecksumIsGoSum(t *testing.T) {
	const mod = "golang.org/x/sync"
	repo := repoRoot(t)
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", mod)
	cmd.Dir = repo
	v, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", mod, err)
	}
	dl := exec.Command("go", "mod", "download", "-json", mod+"@"+strings.TrimSpace(string(v)))
	dl.Dir = repo
	out, err := dl.Output()
	if err != nil {
		t.Fatalf("go mod download -json %s: %v", mod, err)
	}
	var info struct{ Zip, Sum string }
	if err := json.Unmarshal(out, &info); err != nil || info.Zip == "" || !strings.HasPrefix(info.Sum, "h1:") {
		t.Fatalf("go mod download -json %s: %v: %s", mod, err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command("unzip", "-q", info.Zip, "-d", dir).CombinedOutput(); err != nil {
		t.Fatalf("unzip %s: %v: %s", info.Zip, err, out)
	}
	goH1 := func() string {
		t.Helper()
		script := `eval "$(sed -n '/^go_h1() {$/,/^}$/p' "$1")"; go_h1 "$2"`
		out, err := exec.Command("bash", "-c", script, "bash", filepath.Join(repo, "scripts/provision.sh"), dir).CombinedOutput()
		if err != nil {
			t.Fatalf("provision.sh's go_h1: %v: %s", err, out)
		}
		return string(out)
	}
	if got := goH1(); got != info.Sum {
		t.Fatalf("provision.sh's go_h1 of %s = %q, want go.sum's %q", mod, got, info.Sum)
	}
	f := filepath.Join(dir, mod+"@"+strings.TrimSpace(string(v)), "LICENSE")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := goH1(); got == info.Sum {
		t.Fatalf("go_h1 = %q after one byte of %s changed: the same as before", got, f)
	}
}
