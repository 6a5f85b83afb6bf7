package main

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestCLIReferenceIsCurrent regenerates the CLI reference and compares it with
// the committed docs/cli, so that the reference cannot drift from the commands.
func TestCLIReferenceIsCurrent(t *testing.T) {
	const committed = "../../docs/cli"
	dir := t.TempDir()
	if _, err := writeDocs(dir); err != nil {
		t.Fatal(err)
	}
	want := readDir(t, dir)
	got := readDir(t, committed)
	var stale []string
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			stale = append(stale, name+" is missing")
		case !bytes.Equal(g, w):
			stale = append(stale, name+" differs")
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			stale = append(stale, name+" documents no command")
		}
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		t.Fatalf("docs/cli is out of date (%s); regenerate it with: go run ./cmd/minikit __docs docs/cli", strings.Join(stale, ", "))
	}
}

// TestCLIReferenceShape checks what a reader relies on: a page per visible
// command, linked from its parent and the index, and no hidden command.
func TestCLIReferenceShape(t *testing.T) {
	docs := renderDocs(newRootCommand())
	for _, name := range []string{"README.md", "minikit.md", "minikit_lab.md", "minikit_lab_up.md", "minikit_exec.md", "minikit_get.md"} {
		if _, ok := docs[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
	for name := range docs {
		if strings.Contains(name, "__") || strings.Contains(name, "completion") {
			t.Errorf("%s documents a hidden or cobra-internal command", name)
		}
		if name != "README.md" && !bytes.Contains(docs["README.md"], []byte("("+name+")")) {
			t.Errorf("the index does not link %s", name)
		}
	}
	up := string(docs["minikit_lab_up.md"])
	for _, want := range []string{"## minikit lab up", "minikit lab up [flags]", "--nodes int", "* [minikit lab](minikit_lab.md)"} {
		if !strings.Contains(up, want) {
			t.Errorf("minikit_lab_up.md lacks %q:\n%s", want, up)
		}
	}
	if !strings.Contains(string(docs["minikit_lab.md"]), "(minikit_lab_up.md)") {
		t.Errorf("minikit_lab.md does not link its subcommand up")
	}
	if get := string(docs["minikit_get.md"]); !strings.Contains(get, "kubectl get --help") || strings.Contains(get, "### Options\n") {
		t.Errorf("minikit_get.md should send the reader to kubectl's flags:\n%s", get)
	}
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading %s: %v (generate it with: go run ./cmd/minikit __docs docs/cli)", dir, err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}
