package fsutil

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
