package validation

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps validation off the Ingress controller: it shares the
// annotation names through the leaf package annotations, never the
// controller's model (STYLE rule 3).
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const ingress = "github.com/minikit/minikit/internal/ingress"
	for _, dep := range strings.Fields(string(out)) {
		if (dep == ingress || strings.HasPrefix(dep, ingress+"/")) && dep != ingress+"/annotations" {
			t.Errorf("validation depends on %s", dep)
		}
	}
}
