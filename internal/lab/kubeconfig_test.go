package lab

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/minikit/minikit/internal/proc"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A user's kubeconfig with a cluster of their own, current.
func userConfig() *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kind-dev"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:38001"}
	cfg.AuthInfos["kind-dev"] = &clientcmdapi.AuthInfo{Token: "theirs"}
	cfg.Contexts["kind-dev"] = &clientcmdapi.Context{Cluster: "kind-dev", AuthInfo: "kind-dev"}
	cfg.CurrentContext = "kind-dev"
	return cfg
}

func load(t *testing.T, path string) *clientcmdapi.Config {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func names[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestMergeAndUnmergeKubeconfig(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	src := labKubeconfig("lab", "https://127.0.0.1:40001", "secret", []byte("CA"))
	for _, tc := range []struct {
		name         string
		existing     *clientcmdapi.Config // nil: no ~/.kube/config yet
		wantNames    []string             // after merge
		wantAfter    []string             // after unmerge
		wantRestored string               // current context after unmerge
	}{
		{name: "no kubeconfig yet", existing: nil,
			wantNames: []string{"minikit-lab"}, wantAfter: nil, wantRestored: ""},
		{name: "a kubeconfig with another cluster", existing: userConfig(),
			wantNames: []string{"kind-dev", "minikit-lab"}, wantAfter: []string{"kind-dev"}, wantRestored: "kind-dev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "home", ".kube", "config")
			os.MkdirAll(filepath.Dir(filepath.Dir(path)), 0o755)
			if tc.existing != nil {
				os.MkdirAll(filepath.Dir(path), 0o755)
				if err := clientcmd.WriteToFile(*tc.existing, path); err != nil {
					t.Fatal(err)
				}
			}
			prev, err := MergeKubeconfig(path, src, "lab", uid, gid)
			if err != nil {
				t.Fatal(err)
			}
			got := load(t, path)
			if got.CurrentContext != "minikit-lab" {
				t.Errorf("current context after merge %q, want minikit-lab (kind's convention)", got.CurrentContext)
			}
			for what, m := range map[string][]string{"clusters": names(got.Clusters), "users": names(got.AuthInfos), "contexts": names(got.Contexts)} {
				if !reflect.DeepEqual(m, tc.wantNames) {
					t.Errorf("%s after merge %v, want %v", what, m, tc.wantNames)
				}
			}
			if c := got.Clusters["minikit-lab"]; c == nil || c.Server != "https://127.0.0.1:40001" || string(c.CertificateAuthorityData) != "CA" {
				t.Errorf("merged cluster %+v", c)
			}
			if a := got.AuthInfos["minikit-lab"]; a == nil || a.Token != "secret" {
				t.Errorf("merged user %+v", a)
			}
			if tc.existing != nil && (got.AuthInfos["kind-dev"] == nil || got.AuthInfos["kind-dev"].Token != "theirs") {
				t.Errorf("the user's own entries changed: %+v", got.AuthInfos["kind-dev"])
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 || int(st.Sys().(*syscall.Stat_t).Uid) != uid {
				t.Errorf("kubeconfig mode %v owner %d, want 0600 and %d", st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Uid, uid)
			}
			// Merging again (lab up after a crash) keeps one entry and the
			// context it first replaced.
			if prev2, err := MergeKubeconfig(path, src, "lab", uid, gid); err != nil || prev2 != "" {
				t.Fatalf("second merge: prev %q err %v", prev2, err)
			}
			if err := UnmergeKubeconfig(path, "lab", prev, uid); err != nil {
				t.Fatal(err)
			}
			got = load(t, path)
			for what, m := range map[string][]string{"clusters": names(got.Clusters), "users": names(got.AuthInfos), "contexts": names(got.Contexts)} {
				if !reflect.DeepEqual(m, tc.wantAfter) {
					t.Errorf("%s after unmerge %v, want %v", what, m, tc.wantAfter)
				}
			}
			if got.CurrentContext != tc.wantRestored {
				t.Errorf("current context after unmerge %q, want %q", got.CurrentContext, tc.wantRestored)
			}
			// Unmerging again is not an error and changes nothing.
			if err := UnmergeKubeconfig(path, "lab", prev, uid); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The user switched to another context after lab up: unmerge leaves that
// current, and a previous context deleted meanwhile is not restored.
func TestUnmergeKeepsAnotherCurrentContext(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	path := filepath.Join(t.TempDir(), "config")
	if err := clientcmd.WriteToFile(*userConfig(), path); err != nil {
		t.Fatal(err)
	}
	src := labKubeconfig("a", "https://127.0.0.1:40001", "t", nil)
	prev, err := MergeKubeconfig(path, src, "a", uid, gid)
	if err != nil || prev != "kind-dev" {
		t.Fatalf("merge: prev %q, err %v", prev, err)
	}
	cfg := load(t, path)
	cfg.CurrentContext = "kind-dev"
	clientcmd.WriteToFile(*cfg, path)
	if err := UnmergeKubeconfig(path, "a", prev, uid); err != nil {
		t.Fatal(err)
	}
	if got := load(t, path).CurrentContext; got != "kind-dev" {
		t.Errorf("current context %q, want kind-dev", got)
	}

	// Merged again, then kind-dev deleted: unmerge leaves no current context.
	prev, _ = MergeKubeconfig(path, src, "a", uid, gid)
	cfg = load(t, path)
	delete(cfg.Contexts, "kind-dev")
	clientcmd.WriteToFile(*cfg, path)
	if err := UnmergeKubeconfig(path, "a", prev, uid); err != nil {
		t.Fatal(err)
	}
	if got := load(t, path).CurrentContext; got != "" {
		t.Errorf("current context %q, want none", got)
	}
}

// Root never writes a kubeconfig that is not the user's.
func TestMergeRefusesAnotherUsersFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	if err := clientcmd.WriteToFile(*userConfig(), path); err != nil {
		t.Fatal(err)
	}
	other := os.Getuid() + 4242
	_, err := MergeKubeconfig(path, labKubeconfig("a", "https://127.0.0.1:1", "t", nil), "a", other, other)
	if err == nil {
		t.Fatalf("merged into a file owned by uid %d for uid %d", os.Getuid(), other)
	}
	if got := load(t, path); len(got.Contexts) != 1 {
		t.Errorf("the file changed: contexts %v", names(got.Contexts))
	}
}

func TestLabFromContext(t *testing.T) {
	for ctx, want := range map[string]string{"minikit-lab": "lab", "minikit-a-b": "a-b", "minikit-": "", "kind-lab": "", "minikit": ""} {
		got, ok := LabFromContext(ctx)
		if got != want || ok != (want != "") {
			t.Errorf("LabFromContext(%q) = %q, %v; want %q", ctx, got, ok, want)
		}
	}
}

func TestRegistry(t *testing.T) {
	RegistryDir = filepath.Join(t.TempDir(), "registry")
	DefaultDir = filepath.Join(t.TempDir(), "default")
	t.Cleanup(func() { RegistryDir, DefaultDir = "/run/minikit-lab", "/var/lib/minikit-lab" })
	if _, ok := Lookup("a"); ok {
		t.Fatal("found lab a in an empty registry")
	}
	e := Entry{Name: "a", Dir: "/somewhere/a", Kubeconfig: "/somewhere/a/kubeconfig", APIPort: 40001}
	if err := register(e); err != nil {
		t.Fatal(err)
	}
	// A lab left in its default directory, not registered (after a reboot).
	os.MkdirAll(filepath.Join(DefaultDir, "b"), 0o700)
	os.WriteFile(filepath.Join(DefaultDir, "b", "lab.json"), []byte(`{"name":"b","apiPort":40002}`), 0o644)
	if got, ok := Lookup("a"); !ok || got != e {
		t.Errorf("Lookup(a) = %+v, %v; want %+v", got, ok, e)
	}
	if got := Registered(); len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" || got[1].Dir != filepath.Join(DefaultDir, "b") {
		t.Errorf("Registered() = %+v; want a (registered) and b (default dir)", got)
	}
	if d := resolveDir("a", ""); d != "/somewhere/a" {
		t.Errorf("resolveDir(a) = %s", d)
	}
	if d := resolveDir("c", ""); d != filepath.Join(DefaultDir, "c") {
		t.Errorf("resolveDir(c) = %s", d)
	}
	if err := unregister("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(RegistryDir); !os.IsNotExist(err) {
		t.Errorf("the empty registry directory is left (%v)", err)
	}
	if err := unregister("a"); err != nil {
		t.Errorf("unregistering twice: %v", err)
	}
}

// What down finds left is named in its error: here the lab's directory and
// a process of the lab that still runs.
func TestLeftovers(t *testing.T) {
	dir := t.TempDir()
	st := State{Name: "mkleft", Nodes: 1, Dir: dir}
	self := procID{os.Getpid(), proc.StartTime(os.Getpid())}
	left := st.leftovers(map[procID]string{self: "host node1", {pid: os.Getpid(), start: self.start + 1}: "host gone"}, st.podPrefixes())
	want := []string{"directory " + dir, "process"}
	if len(left) != 2 || left[0] != want[0] || !strings.HasPrefix(left[1], "process ") || !strings.Contains(left[1], "of host node1") {
		t.Errorf("leftovers = %q; want the directory and this process (and not a process whose start time differs)", left)
	}
	os.RemoveAll(dir)
	if left := st.leftovers(nil, st.podPrefixes()); len(left) != 0 {
		t.Errorf("leftovers of nothing = %q", left)
	}
}
