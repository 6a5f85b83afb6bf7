package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/store"
)

func runMigrate(args ...string) (string, error) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"store", "migrate"}, args...))
	err := root.Execute()
	return out.String(), err
}

// `minikit store migrate` between two bbolt files (etcd's side is tested in store):
// it copies, prints counts, refuses a non-empty destination without --force, and
// names the flag that is wrong.
func TestStoreMigrateCommand(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src.db"), filepath.Join(dir, "dst.db")
	s, err := store.OpenBolt(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		s.Update(func(tx store.Tx) error { return tx.Put(fmt.Sprintf("/registry/x/%d", i%3), []byte("v")) })
	}
	s.Close()

	out, err := runMigrate("--from", "bolt:"+src, "--to", "bolt:"+dst)
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("copied 3 keys from bolt:%s (revision 5) to bolt:%s (now at revision 6)", src, dst); !strings.Contains(out, want) {
		t.Fatalf("output %q, want %q", out, want)
	}
	d, err := store.OpenBolt(dst, 0)
	if err != nil {
		t.Fatal(err)
	}
	kvs, rev, _ := d.List("/registry/")
	d.Close()
	if len(kvs) != 3 || rev != 6 {
		t.Fatalf("destination holds %d keys at revision %d, want 3 at 6", len(kvs), rev)
	}
	if _, err := runMigrate("--from", "bolt:"+src, "--to", "bolt:"+dst); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second migrate: %v, want a refusal naming --force", err)
	}
	if out, err := runMigrate("--from", "bolt:"+src, "--to", "bolt:"+dst, "--force"); err != nil || !strings.Contains(out, "copied 3 keys") {
		t.Fatalf("forced migrate: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "etcd"}, "--from and --to are both required"},
		{[]string{"--from", "bolt:" + src, "--to", "bolt:" + src}, "same datastore"},
		{[]string{"--from", "postgres", "--to", "bolt:" + dst}, `--from "postgres": want bolt:PATH or etcd`},
		{[]string{"--from", "bolt:" + filepath.Join(dir, "missing.db"), "--to", "bolt:" + dst}, "missing.db"},
		{[]string{"--from", "bolt:" + src, "--to", "etcd"}, "no etcd endpoints (--etcd-endpoints)"},
	} {
		if _, err := runMigrate(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("migrate %v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
