package ingress

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the controller meeting the rest of minikit through the API
// only (STYLE rule 3), and its data plane free of client-go: the proxy and the
// renderer work from a config.Config, whoever built it.
func TestImports(t *testing.T) {
	for pkg, extra := range map[string][]string{
		".":           nil,
		"./config":    {"k8s.io/client-go/"},
		"./httpproxy": {"k8s.io/client-go/"},
		"./nginxconf": {"k8s.io/client-go/"},
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{"apiserver", "store", "kubeproxy", "dns", "kubelet", "cni", "controllers", "cluster", "lab", "iptables", "images", "loadbalancer"} {
				if dep == "github.com/minikit/minikit/internal/"+banned || strings.HasPrefix(dep, "github.com/minikit/minikit/internal/"+banned+"/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
			for _, b := range extra {
				if strings.HasPrefix(dep, b) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
