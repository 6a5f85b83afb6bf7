// Package fsutil holds minikit's one durable file write, and the temporary
// directory of a test process (ProcessTempDir). Credentials, state
// files and rendered configs must survive a crash or power loss either whole
// or not at all: a reader (a restarting server, `lab down` after a crash,
// nginx reloading) must never see a half-written file. The standard library
// has no such write, and os.WriteFile plus a rename is not durable without
// the two fsyncs done here.
package fsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// WriteFileAtomic replaces path with data, mode perm, so that after a crash
// path holds either its old content or data, never a mix: data goes to a
// temporary file in the same directory (a rename is atomic only within one
// file system), which is synced, renamed over path, and then the directory
// is synced so that the rename itself is on disk.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return WriteFileAtomicOwned(path, data, perm, -1, -1)
}

// WriteFileAtomicOwned is WriteFileAtomic with the file owned by uid:gid (-1
// keeps the writer's), set before the rename: a file holding a user's secret
// is never visible at path with another owner.
func WriteFileAtomicOwned(path string, data []byte, perm os.FileMode, uid, gid int) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("writing %s: %w", path, err)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if (uid >= 0 || gid >= 0) && (uid != os.Geteuid() || gid != os.Getegid()) {
		if err := tmp.Chown(uid, gid); err != nil {
			return err
		}
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ProcessTempDir makes a new temporary directory, named prefix, this
// process's PID, a dash and a random suffix, for files that must outlive
// every test of a test process but not the process (the minikit binary a
// lab test builds once). A test process has no hook at its exit, so each
// call first removes the directories of the same prefix whose process is
// gone: what a finished or killed run left, the next run removes, and only
// running processes' directories exist.
func ProcessTempDir(prefix string) (string, error) {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, m := range matches {
		pid, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(m), prefix), "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || n <= 0 || processAlive(n) {
			continue
		}
		if err := os.RemoveAll(m); err != nil {
			return "", fmt.Errorf("removing %s, left by process %d: %w", m, n, err)
		}
	}
	return os.MkdirTemp("", prefix+strconv.Itoa(os.Getpid())+"-")
}

// processAlive reports whether a process with this PID exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
