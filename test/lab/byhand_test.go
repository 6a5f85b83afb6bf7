package lab_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/test/testenv"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// student is the unprivileged user who ran `sudo minikit lab up`: nobody,
// whose home does not exist, so the kubeconfig to merge into is named with
// `lab up --kubeconfig`, in a directory of the test's that nobody owns.
const studentUID, studentGID = 65534, 65534

// asStudent runs argv as the student, with an environment of its own.
func asStudent(env []string, argv ...string) *exec.Cmd {
	cmd := exec.Command("setpriv", append([]string{"--reuid", fmt.Sprint(studentUID), "--regid", fmt.Sprint(studentGID), "--clear-groups", "--"}, argv...)...)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...)
	return cmd
}

// asSudo runs argv as root the way `sudo` started by the student would: with
// SUDO_USER and no KUBECONFIG.
func asSudo(argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "SUDO_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "SUDO_USER=nobody", fmt.Sprintf("SUDO_UID=%d", studentUID), fmt.Sprintf("SUDO_GID=%d", studentGID))
	return cmd
}

func listed(t *testing.T, bin, name string) (lab.Info, bool) {
	t.Helper()
	out, err := exec.Command(bin, "lab", "list", "-o", "json").Output()
	if err != nil {
		t.Fatalf("lab list -o json: %v: %s", err, out)
	}
	var infos []lab.Info
	if err := json.Unmarshal(out, &infos); err != nil {
		t.Fatalf("lab list -o json: %v: %s", err, out)
	}
	for _, in := range infos {
		if in.Name == name {
			return in, true
		}
	}
	return lab.Info{}, false
}

func owner(t *testing.T, path string) (uid int, mode os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Uid), st.Mode().Perm()
}

// TestLabByHand follows a student by hand: `sudo minikit lab up --dir D
// --name X`, kubectl from their own shell (the kubeconfig lab up printed, and
// the context merged into their kubeconfig), minikit commands under sudo that
// find the lab without KUBECONFIG, then `sudo minikit lab down --name X`
// without --dir, which removes everything: the machine's namespace as before,
// the lab gone from `lab list`, its context gone from the kubeconfig and the
// student's own context current again.
func TestLabByHand(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Minikit(t)
	name := fmt.Sprintf("mkh%d", os.Getpid()%100000)
	// A directory the student can enter (t.TempDir's is root's, 0700).
	top, err := os.MkdirTemp("", "minikit-byhand-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	os.Chmod(top, 0o711)
	dir := filepath.Join(top, "lab")
	home := filepath.Join(top, "home")
	os.Mkdir(home, 0o700)
	os.Chown(home, studentUID, studentGID)
	userKC := filepath.Join(home, ".kube", "config")
	mine := func(n string) bool {
		return strings.HasPrefix(n, name+"-") || strings.HasPrefix(n, kubelet.SandboxPrefix("node1", filepath.Join(dir, "node1", "agent")))
	}
	before := testenv.RootSnapshot(t, mine)

	// The student's kubeconfig has a cluster of their own, current.
	own := clientcmdapi.NewConfig()
	own.Clusters["kind-dev"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	own.AuthInfos["kind-dev"] = &clientcmdapi.AuthInfo{Token: "theirs"}
	own.Contexts["kind-dev"] = &clientcmdapi.Context{Cluster: "kind-dev", AuthInfo: "kind-dev"}
	own.CurrentContext = "kind-dev"
	if out, err := asStudent(nil, "mkdir", "-m", "0700", filepath.Dir(userKC)).CombinedOutput(); err != nil {
		t.Fatalf("mkdir as the student: %v: %s", err, out)
	}
	if err := clientcmd.WriteToFile(*own, userKC); err != nil {
		t.Fatal(err)
	}
	os.Chown(userKC, studentUID, studentGID)

	// Not as root: lab up says to use sudo before doing anything.
	out, err := asStudent(nil, bin, "lab", "up", "--name", name, "--dir", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "run it with sudo") {
		t.Fatalf("lab up as the student: %v: %s; want a 'run it with sudo' error", err, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("lab up as the student made %s (%v)", dir, err)
	}

	downed := false
	t.Cleanup(func() {
		if !downed {
			exec.Command(bin, "lab", "down", "--name", name, "--dir", dir).Run()
		}
	})
	out, err = asSudo(bin, "lab", "up", "--name", name, "--nodes", "1", "--dir", dir, "--kubeconfig", userKC, "-o", "json").Output()
	if err != nil {
		t.Fatalf("sudo lab up: %v: %s", err, out)
	}
	var info lab.Info
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("lab up -o json: %v: %s", err, out)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if info.Kubeconfig != kc || info.UserKubeconfig != userKC || info.Context != "minikit-"+name || !info.Running {
		t.Errorf("lab up -o json: kubeconfig %q user kubeconfig %q context %q running %v", info.Kubeconfig, info.UserKubeconfig, info.Context, info.Running)
	}
	if !strings.HasPrefix(info.APIServer, "https://127.0.0.1:") || info.InternalAPIServer != "https://192.168.56.10:6443" || info.ServiceCIDR == "" || info.LoadBalancerPool == "" {
		t.Errorf("lab up -o json: API %q internal %q services %q pool %q", info.APIServer, info.InternalAPIServer, info.ServiceCIDR, info.LoadBalancerPool)
	}
	addrs := map[string]lab.HostInfo{}
	for _, h := range info.Hosts {
		addrs[h.Name] = h
	}
	if addrs["node1"].Address != "192.168.56.10" || addrs["node1"].PodCIDR == "" || addrs[lab.Client].Address != "192.168.56.100" || addrs[lab.External].Address != "192.168.56.200" {
		t.Errorf("lab up -o json hosts: %+v", info.Hosts)
	}

	// The kubeconfig lab up printed, and the merged one, are the student's.
	for _, p := range []string{kc, userKC} {
		if uid, mode := owner(t, p); uid != studentUID || mode != 0o600 {
			t.Errorf("%s: owner %d mode %v; want the student's (%d), 0600", p, uid, mode, studentUID)
		}
	}
	for _, env := range [][]string{{"KUBECONFIG=" + kc}, {"KUBECONFIG=" + userKC}} {
		out, err := asStudent(append(env, "HOME="+home), "kubectl", "get", "nodes", "-o", "name").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "node/node1" {
			t.Errorf("as the student, %s kubectl get nodes: %v: %s", env[0], err, out)
		}
	}
	merged, err := clientcmd.LoadFromFile(userKC)
	if err != nil {
		t.Fatal(err)
	}
	if merged.CurrentContext != "minikit-"+name || merged.Contexts["kind-dev"] == nil || merged.Clusters["minikit-"+name] == nil || merged.AuthInfos["minikit-"+name] == nil {
		t.Errorf("merged kubeconfig: current %q, contexts %v", merged.CurrentContext, merged.Contexts)
	}
	// Other users cannot read the token.
	out, err = exec.Command("setpriv", "--reuid", "1", "--regid", "1", "--clear-groups", "cat", kc).CombinedOutput()
	if err == nil {
		t.Errorf("another user read the lab's kubeconfig: %s", out)
	}

	// Under sudo, without KUBECONFIG, minikit finds the lab by name.
	out, err = asSudo(bin, "get", "nodes", "-o", "name", "--lab", name).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "node/node1" {
		t.Errorf("sudo minikit get nodes --lab %s: %v: %s", name, err, out)
	}
	if in, ok := listed(t, bin, name); !ok || in.Dir != dir || in.Kubeconfig != kc || in.Nodes != 1 || !in.Running {
		t.Errorf("lab list -o json: %+v (listed %v); want %s in %s, running", in, ok, name, dir)
	}

	out, err = asSudo(bin, "lab", "down", "--name", name).CombinedOutput()
	if err != nil {
		t.Fatalf("sudo lab down --name %s (no --dir): %v: %s", name, err, out)
	}
	downed = true
	if _, ok := listed(t, bin, name); ok {
		t.Errorf("lab list still shows %s after lab down", name)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("lab dir %s still exists (%v)", dir, err)
	}
	if out, _ := exec.Command("pgrep", "-af", dir).CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("processes of the lab still run: %s", out)
	}
	for _, h := range info.Hosts {
		if h.PID != 0 && processRuns(h.PID) {
			t.Errorf("%s's process %d still runs after lab down", h.Name, h.PID)
		}
	}
	after, err := clientcmd.LoadFromFile(userKC)
	if err != nil {
		t.Fatal(err)
	}
	if after.CurrentContext != "kind-dev" || after.Contexts["minikit-"+name] != nil || after.Clusters["minikit-"+name] != nil || after.AuthInfos["minikit-"+name] != nil || after.AuthInfos["kind-dev"] == nil {
		t.Errorf("after lab down the kubeconfig has current %q, contexts %v, clusters %v", after.CurrentContext, after.Contexts, after.Clusters)
	}
	if uid, mode := owner(t, userKC); uid != studentUID || mode != 0o600 {
		t.Errorf("%s after lab down: owner %d mode %v", userKC, uid, mode)
	}
	if a := testenv.RootSnapshot(t, mine); a != before {
		t.Fatalf("root namespace changed by lab up/down:\n--- before\n%s\n--- after\n%s", before, a)
	}
}

func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}
