package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// CollectLogs copies every host's log and each embedded etcd member's, named
// for CI artifacts, and nothing else of the lab's directory.
func TestCollectLogs(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"node1.log":              "server\n",
		"node2.log":              "agent\n",
		"client.log":             "client\n",
		"forwarder.log":          "forwarder\n",
		"node1/etcd/etcd.log":    "etcd of node1\n",
		"node2/etcd/etcd.log":    "etcd of node2\n",
		"lab.json":               "{}",
		"node1/token":            "secret",
		"node1/agent/pods/x.log": "not a host log",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "artifacts", "lab-logs")
	wrote, err := CollectLogs(dir, out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range wrote {
		names = append(names, filepath.Base(p))
	}
	want := []string{"client.log", "forwarder.log", "node1-etcd.log", "node1.log", "node2-etcd.log", "node2.log"}
	if !slices.Equal(names, want) {
		t.Errorf("collected %v, want %v", names, want)
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != len(want) {
		t.Errorf("%d files in %s, want %d", len(entries), out, len(want))
	}
	if b, _ := os.ReadFile(filepath.Join(out, "node2-etcd.log")); string(b) != "etcd of node2\n" {
		t.Errorf("node2-etcd.log holds %q", b)
	}
	if _, err := CollectLogs(t.TempDir(), out); err == nil || !strings.Contains(err.Error(), "no log in") {
		t.Errorf("collecting from a directory without logs: %v, want an error saying so", err)
	}
}
