package fsutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWriteFileAtomic(t *testing.T) {
	for _, tc := range []struct {
		name string
		old  []byte // nil: no file before
		data []byte
		perm os.FileMode
	}{
		{"creates", nil, []byte("token\n"), 0o600},
		{"replaces", []byte("a much longer old content than the new one"), []byte("new"), 0o644},
		{"empty", []byte("old"), []byte{}, 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if tc.old != nil {
				if err := os.WriteFile(path, tc.old, 0o666); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteFileAtomic(path, tc.data, tc.perm); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Errorf("content %q, %v; want %q", got, err, tc.data)
			}
			st, _ := os.Stat(path)
			if st.Mode().Perm() != tc.perm {
				t.Errorf("mode %v, want %v (whatever the umask or the old file's)", st.Mode().Perm(), tc.perm)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries, want only the file (no temporary left)", len(entries))
			}
		})
	}
}

// A failed write leaves the old content and no temporary file behind.
func TestWriteFileAtomicFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	// A directory in the way: the rename fails after the temporary is written.
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "inside"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := WriteFileAtomic(path, []byte("data"), 0o600)
	if err == nil || !strings.Contains(err.Error(), "writing "+path) {
		t.Fatalf("got %v, want an error naming %s", err, path)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after a failed write, want 1 (the temporary removed)", len(entries))
	}
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "f"), nil, 0o600); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

func TestWriteFileAtomicOwned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = 65534, 65534 // root gives the file away, as lab up does to the invoking user
	}
	if err := WriteFileAtomicOwned(path, []byte("secret"), 0o600, uid, gid); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if int(sys.Uid) != uid || int(sys.Gid) != gid || st.Mode().Perm() != 0o600 {
		t.Errorf("owner %d:%d mode %v, want %d:%d 0600", sys.Uid, sys.Gid, st.Mode().Perm(), uid, gid)
	}
}

// TestProcessTempDir: a directory left by a process that is gone is removed,
// one of a running process (this one) is kept, and the new one is named by
// this process's PID.
func TestProcessTempDir(t *testing.T) {
	prefix := fmt.Sprintf("fsutil-test-%d-", time.Now().UnixNano())
	t.Cleanup(func() {
		m, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
		for _, d := range m {
			os.RemoveAll(d)
		}
	})
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", prefix, gone.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dead, "minikit"), []byte("x"), 0o755)
	mine, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", prefix, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.MkdirTemp("", prefix+"nopid") // not named by a PID: not ours to judge
	if err != nil {
		t.Fatal(err)
	}
	dir, err := ProcessTempDir(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(dir), fmt.Sprintf("%s%d-", prefix, os.Getpid())) {
		t.Errorf("new directory %s is not named by this process's PID", dir)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the directory of process %d, which is gone, is still there (%v)", gone.Process.Pid, err)
	}
	for _, d := range []string{mine, other, dir} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
