package cni

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/minikit/minikit/internal/netns"
	"golang.org/x/sys/unix"
)

// PodNSDir holds the persistent UTS and mount namespaces of pods, one
// directory per pod: PodNSDir/NAME/uts and PodNSDir/NAME/mnt.
//
// PodNSDir is a private bind mount of itself. A mount namespace file may
// only be bind-mounted from a namespace older than the one it names (the
// kernel's mnt_ns_loop check), and it must not propagate anywhere: on a
// shared mount the bind would be copied into peer namespaces, possibly into
// the very namespace it pins, which then can never be freed. util-linux's
// unshare --mount=FILE documents the same recipe.
const PodNSDir = "/run/minikit/ns"

// PodUTSPath returns the UTS namespace file of the named pod.
func PodUTSPath(name string) string { return filepath.Join(PodNSDir, name, "uts") }

// PodMntPath returns the mount namespace file of the named pod.
func PodMntPath(name string) string { return filepath.Join(PodNSDir, name, "mnt") }

// PodNamespacesExist reports whether both of the pod's namespace files are
// live namespaces.
func PodNamespacesExist(name string) bool {
	return netns.ValidName(name) == nil && netns.IsNamespaceFile(PodUTSPath(name)) && netns.IsNamespaceFile(PodMntPath(name))
}

// CreatePodNamespaces creates the pod's persistent UTS namespace (hostname
// set to hostname) and mount namespace, and pins them at PodUTSPath and
// PodMntPath. The mount namespace is a copy of the node's with every mount
// made private (nothing a pod mounts leaks out, and it is not disturbed by
// the node's later mounts) and with the files at resolvConf and hosts
// bind-mounted over /etc/resolv.conf and /etc/hosts, as `ip netns exec`
// does with /etc/netns/NAME. Empty paths leave the node's file visible. The
// per-pod files should be rewritten in place, not replaced by rename: the
// bind mount holds the inode.
//
// If both namespaces already exist they are left as they are (call
// DeletePodNamespaces first to change the hostname or files); half-created
// leftovers are removed and recreated.
func CreatePodNamespaces(name, hostname, resolvConf, hosts string) error {
	return CreatePodNamespacesWith(name, hostname, resolvConf, hosts, nil)
}

// Bind is a directory of the node bind-mounted into a pod's mount namespace,
// as the kubelet mounts a pod's volumes into its containers.
type Bind struct {
	Source, Target string
	ReadOnly       bool
}

// CreatePodNamespacesWith is CreatePodNamespaces with extra bind mounts of
// directories or files (a pod's volumes). A Target missing on the node is
// created, as an empty directory (or an empty file, for a file Source) to
// mount on: pods share the node's file system, so it is visible on the node,
// but what is mounted on it is not. Such mount points are recorded and
// removed by ReleasePodNSDir once no pod on the machine remains (a pod's
// mount point may be another pod's too, and removing a directory that is a
// mount point in another mount namespace detaches that mount there).
// Files in a Source should be replaced by rename (atomically), which the
// directory bind shows at once. Binds are mounted in order: a later Target
// inside an earlier one's lands on the earlier mount.
func CreatePodNamespacesWith(name, hostname, resolvConf, hosts string, binds []Bind) error {
	if err := netns.ValidName(name); err != nil {
		return fmt.Errorf("creating namespaces of pod: %w", err)
	}
	if PodNamespacesExist(name) {
		return nil
	}
	wrap := func(err error) error { return fmt.Errorf("creating namespaces of pod %q: %w", name, err) }
	if err := DeletePodNamespaces(name); err != nil {
		return err
	}
	// The lock keeps ReleasePodNSDir (another agent's minikit down) from
	// unmounting the directory between its check and our mkdir.
	unlock, err := lockPodNSDir()
	if err != nil {
		return wrap(err)
	}
	if err := netns.EnsureMountPoint(PodNSDir, unix.MS_PRIVATE|unix.MS_REC); err != nil {
		unlock()
		return wrap(err)
	}
	dir := filepath.Join(PodNSDir, name)
	err = os.MkdirAll(dir, 0o755)
	unlock()
	if err != nil {
		return wrap(err)
	}
	for _, p := range []string{PodUTSPath(name), PodMntPath(name)} {
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE, 0)
		if err != nil {
			return wrap(err)
		}
		f.Close()
	}
	for _, b := range binds {
		if err := makeMountPoint(b.Source, b.Target); err != nil {
			DeletePodNamespaces(name)
			return wrap(err)
		}
	}
	if err := pinPodNamespaces(name, hostname, resolvConf, hosts, binds); err != nil {
		DeletePodNamespaces(name)
		return wrap(err)
	}
	return nil
}

// pinPodNamespaces builds the namespaces on a throwaway thread and pins
// them from the calling goroutine's thread, which is still in the node's
// mount namespace: the bind mounts must land there, and mnt_ns_loop only
// allows binding a mount namespace newer than the caller's.
func pinPodNamespaces(name, hostname, resolvConf, hosts string, binds []Bind) error {
	type built struct {
		tid int
		err error
	}
	ready := make(chan built, 1)
	release := make(chan struct{})
	// The thread ends up in a private mount namespace with its own
	// fs_struct and must never run other goroutines.
	go netns.LockedThread(func() bool {
		ready <- built{tid: unix.Gettid(), err: buildPodNamespaces(hostname, resolvConf, hosts, binds)}
		<-release
		return false
	})
	b := <-ready
	defer close(release)
	if b.err != nil {
		return b.err
	}
	proc := "/proc/" + strconv.Itoa(os.Getpid()) + "/task/" + strconv.Itoa(b.tid) + "/ns/"
	if err := unix.Mount(proc+"uts", PodUTSPath(name), "none", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("pinning UTS namespace: %w", err)
	}
	if err := unix.Mount(proc+"mnt", PodMntPath(name), "none", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("pinning mount namespace: %w", err)
	}
	return nil
}

// buildPodNamespaces runs on a locked, throwaway thread. unshare of
// CLONE_NEWNS is allowed on one thread of a multithreaded process (it
// implies unsharing the thread's fs_struct); it is setns into a mount
// namespace that is not, which is why processes enter through nsenter.
func buildPodNamespaces(hostname, resolvConf, hosts string, binds []Bind) error {
	if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
		return fmt.Errorf("unsharing UTS namespace: %w", err)
	}
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		return fmt.Errorf("setting hostname %q: %w", hostname, err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unsharing mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "none", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	for _, m := range []struct{ src, dst string }{{resolvConf, "/etc/resolv.conf"}, {hosts, "/etc/hosts"}} {
		if m.src == "" {
			continue
		}
		if err := unix.Mount(m.src, m.dst, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s over %s: %w", m.src, m.dst, err)
		}
	}
	for _, b := range binds {
		// A Target inside an earlier bind is made inside that volume.
		if _, err := os.Stat(b.Target); err != nil {
			if err := os.MkdirAll(b.Target, 0o755); err != nil {
				return fmt.Errorf("creating mount point %s: %w", b.Target, err)
			}
		}
		if err := unix.Mount(b.Source, b.Target, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s on %s: %w", b.Source, b.Target, err)
		}
		if b.ReadOnly {
			if err := unix.Mount("", b.Target, "none", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("making %s read-only: %w", b.Target, err)
			}
		}
	}
	// The copy of PodNSDir would hold other pods' UTS namespaces alive and
	// is of no use inside a pod.
	if err := unix.Unmount(PodNSDir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("detaching %s: %w", PodNSDir, err)
	}
	return nil
}

// DeletePodNamespaces unpins and removes the pod's UTS and mount
// namespaces. Missing pieces are not errors.
func DeletePodNamespaces(name string) error {
	if err := netns.ValidName(name); err != nil {
		return fmt.Errorf("deleting namespaces of pod: %w", err)
	}
	for _, p := range []string{PodUTSPath(name), PodMntPath(name)} {
		if err := netns.UnmountAndRemove(p); err != nil {
			return fmt.Errorf("deleting namespaces of pod %q: %w", name, err)
		}
	}
	if err := os.Remove(filepath.Join(PodNSDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting namespaces of pod %q: %w", name, err)
	}
	return nil
}

// RemoveBindTargets removes the empty directories CreatePodNamespacesWith
// made on the node to mount on, from target up to (not including) stop,
// once no pod uses them. Directories that are not empty stay.
func RemoveBindTargets(target, stop string) {
	for d := filepath.Clean(target); d != filepath.Clean(stop) && d != "/" && d != "."; d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			return
		}
	}
}

// Nsenter is the util-linux program ExecArgv runs.
const Nsenter = "nsenter"

// ExecArgv returns the argv that runs argv inside the given network, UTS
// and mount namespace files (empty paths are skipped):
//
//	nsenter --net=P --uts=P --mount=P -- argv...
//
// Go cannot do this itself: setns(CLONE_NEWNS) fails with EINVAL in a
// process whose threads share an fs_struct, which every Go process is.
// nsenter is single-threaded C, opens all the files before entering any,
// and then execs argv directly (no fork for these namespace types), so the
// process started by exec.Cmd is the pod process itself and signals and
// exit status go straight to it. Entering a mount namespace moves the
// working directory to its root, so exec.Cmd.Dir does not carry over.
func ExecArgv(netnsPath, utsPath, mntPath string, argv []string) []string {
	out := []string{Nsenter}
	if netnsPath != "" {
		out = append(out, "--net="+netnsPath)
	}
	if utsPath != "" {
		out = append(out, "--uts="+utsPath)
	}
	if mntPath != "" {
		out = append(out, "--mount="+mntPath)
	}
	out = append(out, "--")
	return append(out, argv...)
}

// podNSLock serializes the creation and release of PodNSDir across processes
// (every node agent of every lab on a machine shares it). It is a flock on /run
// itself: a lock file would have to outlive minikit down, or could be removed
// while another process waits on it.
const podNSLock = "/run"

func lockPodNSDir() (func(), error) {
	f, err := os.Open(podNSLock)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

// mountPointRecord lists the mount points CreatePodNamespacesWith created on
// the node, one path per line, for ReleasePodNSDir to remove.
var mountPointRecord = filepath.Join(filepath.Dir(PodNSDir), "mountpoints")

// makeMountPoint creates target (and its missing parents) on the node, a
// directory or, for a file source, an empty file, and records the topmost
// path it created.
func makeMountPoint(source, target string) error {
	st, err := os.Stat(source)
	if err != nil {
		return fmt.Errorf("volume source %s: %w", source, err)
	}
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	top := filepath.Clean(target)
	for d := filepath.Dir(top); d != "/" && d != "."; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		top = d
	}
	unlock, err := lockPodNSDir()
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.MkdirAll(filepath.Dir(mountPointRecord), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(mountPointRecord, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("recording mount point %s: %w", top, err)
	}
	// A file's mount point is recorded itself too when it lies below the
	// top: its removal must come before its directories'.
	rec := top + "\n"
	if !st.IsDir() && top != filepath.Clean(target) {
		rec += filepath.Clean(target) + "\n"
	}
	_, err = f.WriteString(rec)
	f.Close()
	if err != nil {
		return fmt.Errorf("recording mount point %s: %w", top, err)
	}
	if st.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		var tf *os.File
		if tf, err = os.OpenFile(target, os.O_RDONLY|os.O_CREATE, 0o644); err == nil {
			tf.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("creating mount point %s: %w", target, err)
	}
	return nil
}

// removeMountPoints removes the mount points recorded in record, as far as they are
// empty directories (or recorded empty files), and the record. The caller
// holds the lock.
func removeMountPoints(record string) {
	b, err := os.ReadFile(record)
	if err != nil {
		return
	}
	var tops []string
	for _, p := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if p == "" || !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
			continue
		}
		tops = append(tops, p)
		// Recorded empty files first, so their directories empty.
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
			os.Remove(p)
		}
	}
	for _, top := range tops {
		var paths []string
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil {
				paths = append(paths, p)
			}
			return nil
		})
		// Deepest first; os.Remove leaves anything not empty.
		for i := len(paths) - 1; i >= 0; i-- {
			if fi, err := os.Lstat(paths[i]); err == nil && fi.IsDir() {
				os.Remove(paths[i])
			}
		}
	}
	os.Remove(record)
}

// ReleasePodNSDir removes PodNSDir's bind mount, and the directories minikit made
// under /run, once no pod namespaces remain (minikit down). While any agent on the
// machine still has pods, it leaves everything in place.
func ReleasePodNSDir() error {
	unlock, err := lockPodNSDir()
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(PodNSDir)
	if err != nil && !os.IsNotExist(err) {
		unlock()
		return err
	}
	if len(entries) > 0 {
		unlock()
		return nil
	}
	if err := unix.Unmount(PodNSDir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		unlock()
		return fmt.Errorf("unmounting %s: %w", PodNSDir, err)
	}
	os.Remove(PodNSDir)
	removeMountPoints(mountPointRecord)
	unlock()
	os.Remove(filepath.Dir(PodNSDir))
	return nil
}
