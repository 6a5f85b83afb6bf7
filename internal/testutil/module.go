package testutil

import (
	"encoding/json"
	"os/exec"
	"testing"
)

// ModuleDir is the directory of a Go module (path@version) in the module
// cache, which `go mod download` fills from the module proxy (a package
// registry, which CI reaches) when it is not there yet. A module that cannot
// be had fails the test: a skip would prove nothing.
func ModuleDir(t testing.TB, module string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", module).Output()
	var mod struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	if err != nil || mod.Error != "" || mod.Dir == "" {
		t.Fatalf("go mod download %s: %v %s\n%s", module, err, mod.Error, out)
	}
	return mod.Dir
}
