package dns

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the DNS server talking to the cluster through the API
// only, and lean: the clientset and informer factory (every API group) stay
// out of the package, since their init alone doubles a DNS-only process's RSS.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"apiserver", "store", "proxy", "ingress", "node", "sandbox", "controllers", "cluster", "lab"} {
			if dep == "github.com/minikit/minikit/"+banned || strings.HasPrefix(dep, "github.com/minikit/minikit/"+banned+"/") {
				t.Errorf("dns depends on %s", dep)
			}
		}
		if dep == "k8s.io/client-go/kubernetes" || dep == "k8s.io/client-go/informers" {
			t.Errorf("dns depends on %s", dep)
		}
	}
}
