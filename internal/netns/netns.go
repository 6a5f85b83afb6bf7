// Package netns enters and names network namespaces. It is the one place in
// minikit that calls setns: everything that has to run "inside" a namespace
// goes through Do or DoPath, which lock the OS thread and throw the thread
// away if it cannot be put back. Named namespaces live in /run/netns, as
// iproute2 makes them, so `ip netns exec NAME` works on ours and ours on its.
//
// Kernel assumptions: Linux >= 4.11 (/proc/thread-self, nsfs).
package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetNSDir is where named network namespaces live, shared with iproute2 so
// `ip netns exec NAME ...` works on ours and ours on its.
const NetNSDir = "/run/netns"

// NetNSPath returns the bind-mount path of the named network namespace.
func NetNSPath(name string) string { return filepath.Join(NetNSDir, name) }

// mountDirMu serialises making NetNSDir / PodNSDir mount points inside this
// process, so two goroutines cannot stack two bind mounts on the same dir.
// (Another process racing us can; iproute2 has the same window.)
var mountDirMu sync.Mutex

// createMu makes CreateNamed's check-then-mount atomic within the process.
var createMu sync.Mutex

// Do runs fn with the calling goroutine's view of the network switched to
// target. fn runs on a fresh goroutine locked to an OS thread (never the
// main thread); that thread is put back into its original namespace
// afterwards, and if that fails the thread is never unlocked, so the Go
// runtime terminates it instead of reusing a thread in the wrong namespace.
//
// Goroutines started by fn do not inherit the namespace: they run on other
// threads. Sockets and netlink handles opened inside fn stay bound to target
// and may be used after Do returns. A panic in fn is re-raised in the caller.
func Do(target vnetns.NsHandle, fn func() error) error {
	if !target.IsOpen() {
		return errors.New("entering network namespace: handle is closed")
	}
	var err error
	var panicked any
	LockedThread(func() (clean bool) {
		orig, gerr := vnetns.Get()
		if gerr != nil {
			err = fmt.Errorf("getting current network namespace: %w", gerr)
			return true
		}
		defer orig.Close()
		if serr := vnetns.Set(target); serr != nil {
			// setns failed, so the thread never left orig.
			err = fmt.Errorf("entering network namespace %s: %w", target, serr)
			return true
		}
		func() {
			defer func() { panicked = recover() }()
			err = fn()
		}()
		return vnetns.Set(orig) == nil
	})
	if panicked != nil {
		panic(panicked)
	}
	return err
}

// DoPath is Do for a namespace file such as /run/netns/NAME or
// /proc/PID/ns/net.
func DoPath(path string, fn func() error) error {
	h, err := vnetns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	defer h.Close()
	return Do(h, fn)
}

// LockedThread runs fn on a new goroutine locked to an OS thread and waits
// for it. If fn reports the thread clean it is unlocked and reused;
// otherwise the goroutine exits locked and the runtime terminates the
// thread.
//
// The process's main thread is never used: the runtime cannot terminate it,
// only park it forever, still in whatever namespaces fn left it in, and
// /proc/self (mountinfo, ns/*, /proc/net) shows the main thread's view. While
// a goroutine holds the main thread locked, a goroutine it starts cannot be
// scheduled there, so it hands fn on and releases the untouched thread.
func LockedThread(fn func() (clean bool)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			LockedThread(fn)
			runtime.UnlockOSThread()
			return
		}
		if fn() {
			runtime.UnlockOSThread()
		}
	}()
	<-done
}

// onThrowawayThread runs fn on a locked thread that is never reused: fn
// may unshare namespaces of that thread at will.
func onThrowawayThread(fn func() error) error {
	var err error
	LockedThread(func() bool {
		err = fn()
		return false
	})
	return err
}

// ValidName rejects names that would escape the namespace directory.
func ValidName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.ContainsRune(name, 0) {
		return fmt.Errorf("invalid namespace name %q", name)
	}
	return nil
}

// EnsureMountPoint makes dir a mount point with the given propagation
// (MS_SHARED or MS_PRIVATE, plus MS_REC), turning it into a bind mount of
// itself first if it is not one yet. This is iproute2's netns_add dance:
// changing propagation on a non-mount-point fails with EINVAL.
func EnsureMountPoint(dir string, propagation uintptr) error {
	mountDirMu.Lock()
	defer mountDirMu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", dir, "none", propagation, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("setting propagation of %s: %w", dir, err)
	}
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s onto itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", propagation, ""); err != nil {
		return fmt.Errorf("setting propagation of %s: %w", dir, err)
	}
	return nil
}

// IsNamespaceFile reports whether path is a live namespace file (an nsfs
// bind mount), not the empty placeholder file underneath one.
func IsNamespaceFile(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// UnmountAndRemove lazily unmounts path and removes it. Removing the file
// also detaches copies of the mount that other mount namespaces (pods' mount
// namespaces) made of it, so the namespace is really freed. Missing or
// unmounted files are not errors.
func UnmountAndRemove(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// CreateNamed creates a new network namespace and pins it at
// /run/netns/NAME, like `ip netns add NAME`. /run/netns is made a shared
// mount point so that unmounting a namespace propagates to mount namespaces
// that copied it. It fails with an error wrapping fs.ErrExist if the
// namespace already exists; a stale placeholder file left by a crash is
// reused.
func CreateNamed(name string) error {
	if err := ValidName(name); err != nil {
		return fmt.Errorf("creating network namespace: %w", err)
	}
	if err := EnsureMountPoint(NetNSDir, unix.MS_SHARED|unix.MS_REC); err != nil {
		return fmt.Errorf("creating network namespace %q: %w", name, err)
	}
	createMu.Lock()
	defer createMu.Unlock()
	path := NetNSPath(name)
	if IsNamespaceFile(path) {
		return fmt.Errorf("creating network namespace %q: %w", name, fs.ErrExist)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0)
	if err != nil {
		return fmt.Errorf("creating network namespace %q: %w", name, err)
	}
	f.Close()
	// unshare moves only this thread into the new namespace; the bind mount
	// happens in the process's mount namespace (the thread keeps it), and
	// the thread is then discarded rather than switched back.
	err = onThrowawayThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting namespace: %w", err)
		}
		return nil
	})
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("creating network namespace %q: %w", name, err)
	}
	return nil
}

// DeleteNamed unpins the named network namespace, like `ip netns delete`.
// The namespace itself disappears (with its interfaces) once no process or
// open file holds it. Deleting a namespace that does not exist is not an
// error.
func DeleteNamed(name string) error {
	if err := ValidName(name); err != nil {
		return fmt.Errorf("deleting network namespace: %w", err)
	}
	if err := UnmountAndRemove(NetNSPath(name)); err != nil {
		return fmt.Errorf("deleting network namespace %q: %w", name, err)
	}
	return nil
}

// ExistsNamed reports whether /run/netns/NAME is a live namespace (an nsfs
// mount, not just a leftover file).
func ExistsNamed(name string) bool {
	return ValidName(name) == nil && IsNamespaceFile(NetNSPath(name))
}

// ListNamed returns the sorted names under /run/netns that start with
// prefix, including leftover placeholder files so a caller can clean them
// up with DeleteNamed.
func ListNamed(prefix string) ([]string, error) {
	entries, err := os.ReadDir(NetNSDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing network namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}
