package cni

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	"github.com/minikit/minikit/internal/netns"
)

// newPodNamespaces creates a pod's UTS and mount namespaces owned by the
// test; cleanup checks that no mount of it is left in this process's mount
// namespace.
func newPodNamespaces(t *testing.T, hostname, resolv, hosts string) string {
	t.Helper()
	name := testName("podns")
	t.Cleanup(func() {
		if err := DeletePodNamespaces(name); err != nil {
			t.Errorf("DeletePodNamespaces: %v", err)
		}
		if left := mountsUnder(filepath.Join(PodNSDir, name)); len(left) > 0 {
			t.Errorf("mounts left after DeletePodNamespaces: %v", left)
		}
		if exists(filepath.Join(PodNSDir, name)) {
			t.Errorf("%s left behind", filepath.Join(PodNSDir, name))
		}
	})
	if err := CreatePodNamespaces(name, hostname, resolv, hosts); err != nil {
		t.Fatalf("CreatePodNamespaces: %v", err)
	}
	return name
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecArgv(t *testing.T) {
	for _, tc := range []struct {
		name            string
		netns, uts, mnt string
		want            []string
	}{
		{"all", "/run/netns/mk-a", "/run/minikit/ns/mk-a/uts", "/run/minikit/ns/mk-a/mnt",
			[]string{"nsenter", "--net=/run/netns/mk-a", "--uts=/run/minikit/ns/mk-a/uts", "--mount=/run/minikit/ns/mk-a/mnt", "--", "sh", "-c", "echo hi"}},
		{"net only", "/run/netns/mk-a", "", "",
			[]string{"nsenter", "--net=/run/netns/mk-a", "--", "sh", "-c", "echo hi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ExecArgv(tc.netns, tc.uts, tc.mnt, []string{"sh", "-c", "echo hi"})
			if !slices.Equal(got, tc.want) {
				t.Errorf("ExecArgv = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPodNamespacesExec(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath(Nsenter); err != nil {
		t.Skip("nsenter (util-linux) not installed")
	}
	hostResolvBefore, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	hostHostsBefore, _ := os.ReadFile("/etc/hosts")
	hostnameBefore, _ := os.Hostname()

	n := newTestNode(t, "10.244.11.0/24")
	p := newTestPod(t, n, "10.244.11.2")
	resolv := writeTemp(t, "resolv.conf", "nameserver 10.96.0.10\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n")
	hosts := writeTemp(t, "hosts", "127.0.0.1\tlocalhost\n10.244.11.2\tweb-0\n")
	name := newPodNamespaces(t, "web-0", resolv, hosts)

	if !PodNamespacesExist(name) {
		t.Fatalf("PodNamespacesExist(%q) = false", name)
	}
	// Idempotent: a second call keeps the existing namespaces.
	if err := CreatePodNamespaces(name, "other", "", ""); err != nil {
		t.Fatalf("second CreatePodNamespaces: %v", err)
	}

	script := `hostname; echo ---; cat /etc/resolv.conf; echo ---; cat /etc/hosts; echo ---; ip -4 -o addr show dev eth0`
	argv := ExecArgv(netns.NetNSPath(p.NetNS), PodUTSPath(name), PodMntPath(name), []string{"sh", "-c", script})
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v\n%s", argv, err, out)
	}
	parts := strings.Split(string(out), "---\n")
	if len(parts) != 4 {
		t.Fatalf("unexpected output:\n%s", out)
	}
	if got := strings.TrimSpace(parts[0]); got != "web-0" {
		t.Errorf("hostname in pod = %q, want web-0", got)
	}
	if want, _ := os.ReadFile(resolv); parts[1] != string(want) {
		t.Errorf("/etc/resolv.conf in pod =\n%s\nwant\n%s", parts[1], want)
	}
	if want, _ := os.ReadFile(hosts); parts[2] != string(want) {
		t.Errorf("/etc/hosts in pod =\n%s\nwant\n%s", parts[2], want)
	}
	if !strings.Contains(parts[3], "inet 10.244.11.2/24") {
		t.Errorf("pod eth0 = %q, want 10.244.11.2/24", parts[3])
	}

	// Rewriting the per-pod file in place shows through the bind mount.
	if err := os.WriteFile(resolv, []byte("nameserver 10.96.0.99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	argv = ExecArgv("", "", PodMntPath(name), []string{"cat", "/etc/resolv.conf"})
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil || string(out) != "nameserver 10.96.0.99\n" {
		t.Errorf("after rewrite: %v %q", err, out)
	}

	// The node is untouched.
	if after, _ := os.ReadFile("/etc/resolv.conf"); string(after) != string(hostResolvBefore) {
		t.Errorf("host /etc/resolv.conf changed")
	}
	if after, _ := os.ReadFile("/etc/hosts"); string(after) != string(hostHostsBefore) {
		t.Errorf("host /etc/hosts changed")
	}
	if after, _ := os.Hostname(); after != hostnameBefore {
		t.Errorf("host hostname changed to %q", after)
	}
	if m := mountsUnder("/etc"); len(m) > 0 {
		t.Errorf("mounts over /etc in the node's mount namespace: %v", m)
	}
}

func TestPodNamespacesTwoPods(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath(Nsenter); err != nil {
		t.Skip("nsenter (util-linux) not installed")
	}
	a := newPodNamespaces(t, "pod-a", writeTemp(t, "ra", "nameserver 10.0.0.1\n"), "")
	b := newPodNamespaces(t, "pod-b", writeTemp(t, "rb", "nameserver 10.0.0.2\n"), "")
	for _, tc := range []struct{ name, host, ns string }{{a, "pod-a", "10.0.0.1"}, {b, "pod-b", "10.0.0.2"}} {
		argv := ExecArgv("", PodUTSPath(tc.name), PodMntPath(tc.name), []string{"sh", "-c", "hostname; cat /etc/resolv.conf; grep -c ' " + PodNSDir + "' /proc/self/mountinfo || true"})
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		want := tc.host + "\nnameserver " + tc.ns + "\n0\n"
		if string(out) != want {
			t.Errorf("pod %s sees %q, want %q", tc.host, out, want)
		}
	}
	// Deleting one leaves the other working.
	if err := DeletePodNamespaces(a); err != nil {
		t.Fatal(err)
	}
	if PodNamespacesExist(a) || !PodNamespacesExist(b) {
		t.Errorf("after deleting a: exist(a)=%v exist(b)=%v", PodNamespacesExist(a), PodNamespacesExist(b))
	}
}

func TestCreatePodNamespacesBadSource(t *testing.T) {
	requireRoot(t)
	name := testName("podns")
	err := CreatePodNamespaces(name, "x", "/nonexistent/resolv.conf", "")
	if err == nil {
		DeletePodNamespaces(name)
		t.Fatal("CreatePodNamespaces with a missing resolv.conf succeeded")
	}
	if !strings.Contains(err.Error(), `creating namespaces of pod "`+name+`": bind-mounting /nonexistent/resolv.conf over /etc/resolv.conf`) {
		t.Errorf("error = %v", err)
	}
	if exists(filepath.Join(PodNSDir, name)) || len(mountsUnder(filepath.Join(PodNSDir, name))) > 0 {
		t.Errorf("failed create left state behind")
	}
}

// A pod's mount namespace is a private copy of the node's, including the
// /run/netns mounts that existed when it was made. Deleting a named netns
// (unmount, then unlink) must still free it: unlinking a mount point
// detaches the copies in other mount namespaces too.
func TestPodMountNamespaceDoesNotPinNetns(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath(Nsenter); err != nil {
		t.Skip("nsenter (util-linux) not installed")
	}
	victim := newNamedNS(t, "victim")
	pod := newPodNamespaces(t, "pin", "", "")
	mounted := func() bool {
		argv := ExecArgv("", "", PodMntPath(pod), []string{"cat", "/proc/self/mountinfo"})
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return strings.Contains(string(out), " "+netns.NetNSPath(victim)+" ")
	}
	if !mounted() {
		t.Fatalf("pod mount namespace has no copy of %s; test premise broken", netns.NetNSPath(victim))
	}
	if err := netns.DeleteNamed(victim); err != nil {
		t.Fatal(err)
	}
	if mounted() {
		t.Errorf("pod mount namespace still pins %s after DeleteNamed", victim)
	}
}

// A bind-mounted directory shows inside the pod's mount namespace, read-only,
// with files replaced by rename seen at once; on the node the mount point is
// an empty directory, removed again by RemoveBindTargets.
func TestPodNamespacesBind(t *testing.T) {
	requireRoot(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "token"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join("/run", testName("bindtest"), "secrets", "sa")
	t.Cleanup(func() { RemoveBindTargets(target, "/run") })
	name := testName("podns")
	t.Cleanup(func() { DeletePodNamespaces(name) })
	if err := CreatePodNamespacesWith(name, "web-0", "", "", []Bind{{Source: src, Target: target, ReadOnly: true}}); err != nil {
		t.Fatalf("CreatePodNamespacesWith: %v", err)
	}
	inPod := func(argv ...string) (string, error) {
		out, err := exec.Command(Nsenter, append([]string{"--mount=" + PodMntPath(name), "--"}, argv...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := inPod("cat", filepath.Join(target, "token")); err != nil || out != "one" {
		t.Fatalf("token in pod = %q, %v; want one", out, err)
	}
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Errorf("node's %s shows %d entries, want the empty mount point", target, len(entries))
	}
	tmp := filepath.Join(src, ".token.tmp")
	os.WriteFile(tmp, []byte("two"), 0o644)
	if err := os.Rename(tmp, filepath.Join(src, "token")); err != nil {
		t.Fatal(err)
	}
	if out, err := inPod("cat", filepath.Join(target, "token")); err != nil || out != "two" {
		t.Errorf("token in pod after rename = %q, %v; want two", out, err)
	}
	if out, err := inPod("touch", filepath.Join(target, "x")); err == nil || !strings.Contains(out, "Read-only") {
		t.Errorf("writing in the read-only bind: %v %q, want a read-only file system error", err, out)
	}
	if err := DeletePodNamespaces(name); err != nil {
		t.Fatal(err)
	}
	RemoveBindTargets(target, "/run")
	if exists(filepath.Dir(filepath.Dir(target))) {
		t.Errorf("%s left on the node", filepath.Dir(filepath.Dir(target)))
	}
}

// A file binds onto a file: the mount point made for it on the node is an
// empty file.
func TestPodNamespacesBindFile(t *testing.T) {
	requireRoot(t)
	src := writeTemp(t, "config", "from the volume")
	top := filepath.Join("/run", testName("bindfile"))
	target := filepath.Join(top, "etc", "app.conf")
	t.Cleanup(func() { removeMountPointsUnder(top, target) })
	name := testName("podns")
	t.Cleanup(func() { DeletePodNamespaces(name) })
	if err := CreatePodNamespacesWith(name, "web-0", "", "", []Bind{{Source: src, Target: target}}); err != nil {
		t.Fatalf("CreatePodNamespacesWith: %v", err)
	}
	out, err := exec.Command(Nsenter, "--mount="+PodMntPath(name), "--", "cat", target).CombinedOutput()
	if err != nil || string(out) != "from the volume" {
		t.Fatalf("file in pod = %q, %v", out, err)
	}
	if fi, err := os.Stat(target); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Fatalf("node's mount point %s: %v %v, want an empty file", target, fi, err)
	}
	if err := DeletePodNamespaces(name); err != nil {
		t.Fatal(err)
	}
	removeMountPointsUnder(top, target)
	if exists(top) {
		t.Errorf("%s left on the node", top)
	}
}

// removeMountPoints removes recorded directories and files it made, as far
// as they are empty, and nothing else.
func TestRemoveMountPoints(t *testing.T) {
	dir := t.TempDir()
	made := filepath.Join(dir, "made")
	kept := filepath.Join(dir, "kept")
	for _, d := range []string{filepath.Join(made, "a", "b"), filepath.Join(kept, "c")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(kept, "c", "data"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o644)
	// A file's mount point below a directory made for it, recorded after it.
	deep := filepath.Join(dir, "madefile", "etc", "app.conf")
	os.MkdirAll(filepath.Dir(deep), 0o755)
	os.WriteFile(deep, nil, 0o644)
	record := filepath.Join(dir, "record")
	os.WriteFile(record, []byte(made+"\n"+kept+"\n"+filepath.Join(dir, "file")+"\n"+filepath.Join(dir, "madefile")+"\n"+deep+"\n"), 0o644)
	removeMountPoints(record)
	if exists(made) || exists(filepath.Join(dir, "file")) || exists(filepath.Join(dir, "madefile")) || exists(record) {
		t.Errorf("left: made %v, file %v, madefile %v, record %v", exists(made), exists(filepath.Join(dir, "file")), exists(filepath.Join(dir, "madefile")), exists(record))
	}
	if !exists(filepath.Join(kept, "c", "data")) {
		t.Error("removed a directory that was not empty")
	}
}

// removeMountPointsUnder removes a test's mount points (and only those),
// recorded as makeMountPoint records them.
func removeMountPointsUnder(paths ...string) {
	rec := filepath.Join(os.TempDir(), filepath.Base(paths[0])+".record")
	os.WriteFile(rec, []byte(strings.Join(paths, "\n")+"\n"), 0o644)
	removeMountPoints(rec)
}

// Namespace work must never strand the main thread: the runtime cannot
// terminate it, so a discarded main thread would stay parked in the pod's
// namespaces and /proc/self/{mountinfo,ns,net} would show them.
func TestMainThreadNeverLeavesItsNamespaces(t *testing.T) {
	requireRoot(t)
	before := testutil.MainThreadNamespaces()
	for range 20 {
		name := testName("m0")
		if err := netns.CreateNamed(name); err != nil {
			t.Fatal(err)
		}
		netns.DoPath(netns.NetNSPath(name), func() error { return nil })
		if err := netns.DeleteNamed(name); err != nil {
			t.Fatal(err)
		}
		if err := CreatePodNamespaces(name, "m0", "", ""); err != nil {
			t.Fatal(err)
		}
		if err := DeletePodNamespaces(name); err != nil {
			t.Fatal(err)
		}
		if after := testutil.MainThreadNamespaces(); after != before {
			t.Fatalf("main thread namespaces changed from %s to %s", before, after)
		}
	}
}
