package netpol

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the enforcer a component that meets the others only
// through the API (DESIGN rule 3): no store, apiserver or other component.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"apiserver", "store", "proxy", "dns", "ingress", "node", "sandbox", "controllers", "cluster", "lab"} {
			if dep == "github.com/minikit/minikit/"+banned || strings.HasPrefix(dep, "github.com/minikit/minikit/"+banned+"/") {
				t.Errorf("netpol depends on %s", dep)
			}
		}
	}
}
