package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/minikit/minikit/internal/fsutil"
)

// RegistryDir is where every lab on the machine is recorded by name, one
// NAME.json per lab giving its directory, so that `lab down --name X`, `lab
// status` and the commands that look for a cluster find a lab made with any
// --dir. It lives under /run, like the namespaces it describes: a reboot
// removes both. (A lab directory that outlives a reboot is still found by
// `lab down --name X` in its default place, and listed by `lab list`.)
// Tests point it elsewhere.
var RegistryDir = "/run/minikit-lab"

// DefaultDir is the parent of labs' default directories (/var/lib/minikit-lab/NAME).
var DefaultDir = "/var/lib/minikit-lab"

// Entry is a lab's record in the registry. It holds no secret: the files are
// world-readable so that `lab list` works without sudo.
type Entry struct {
	Name       string `json:"name"`
	Dir        string `json:"dir"`
	Kubeconfig string `json:"kubeconfig"`
	APIPort    int    `json:"apiPort,omitempty"`
}

func registryPath(name string) string { return filepath.Join(RegistryDir, name+".json") }

// register records a lab. The directory is made here and removed by
// unregister when empty; a concurrent unregister may remove it between the
// two, so the write is retried.
func register(e Entry) error {
	b, _ := json.MarshalIndent(e, "", "  ")
	var err error
	for i := 0; i < 5; i++ {
		if err = os.MkdirAll(RegistryDir, 0o755); err != nil {
			continue
		}
		if err = fsutil.WriteFileAtomic(registryPath(e.Name), b, 0o644); err == nil {
			return nil
		}
	}
	return fmt.Errorf("recording lab %q in %s: %w", e.Name, RegistryDir, err)
}

func unregister(name string) error {
	if err := os.Remove(registryPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing lab %q from %s: %w", name, RegistryDir, err)
	}
	os.Remove(RegistryDir) // only when no lab is left
	return nil
}

// Lookup finds a lab's record by name: the registry, then the lab's default
// directory. ok is false when neither knows the lab.
func Lookup(name string) (Entry, bool) {
	if b, err := os.ReadFile(registryPath(name)); err == nil {
		var e Entry
		if json.Unmarshal(b, &e) == nil && e.Dir != "" {
			return e, true
		}
	}
	dir := filepath.Join(DefaultDir, name)
	if st, err := readState(dir); err == nil {
		return Entry{Name: name, Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), APIPort: st.APIPort}, true
	}
	return Entry{}, false
}

// Registered lists the labs in the registry and those left in their default
// directories (after a reboot, say), by name.
func Registered() []Entry {
	byName := map[string]Entry{}
	entries, _ := os.ReadDir(RegistryDir)
	for _, f := range entries {
		name, ok := strings.CutSuffix(f.Name(), ".json")
		if !ok {
			continue
		}
		if e, ok := Lookup(name); ok {
			byName[name] = e
		}
	}
	dirs, _ := os.ReadDir(DefaultDir)
	for _, d := range dirs {
		if _, seen := byName[d.Name()]; seen || !d.IsDir() {
			continue
		}
		if e, ok := Lookup(d.Name()); ok && e.Dir == filepath.Join(DefaultDir, d.Name()) {
			byName[d.Name()] = e
		}
	}
	var out []Entry
	for _, e := range byName {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// resolveDir is the directory of lab name: dir when given, else the
// registry's, else the default one.
func resolveDir(name, dir string) string {
	if dir != "" {
		return dir
	}
	if e, ok := Lookup(name); ok {
		return e.Dir
	}
	return filepath.Join(DefaultDir, name)
}

// readState reads the state file of the lab in dir. A file that exists but
// does not parse is an error naming it (fs.ErrNotExist is only for none).
func readState(dir string) (State, error) {
	var st State
	b, err := os.ReadFile(stateFile(dir))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, fmt.Errorf("reading %s: %w", stateFile(dir), err)
	}
	return st, nil
}
