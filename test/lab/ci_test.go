package lab_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"
)

// TestCIRecipe runs docs/ci.md's shell path, command by command, as a CI job
// does: lab up --wait -o json, kubectl apply and rollout status, a check from
// a pod by the Service's DNS name, lab status -o json, lab logs, lab down.
func TestCIRecipe(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Minikit(t)
	dir := filepath.Join(t.TempDir(), "lab")
	name := fmt.Sprintf("mkci%d", os.Getpid()%100000)
	run := func(argv ...string) string {
		t.Helper()
		out, err := exec.Command(argv[0], argv[1:]...).Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("%s: %v: %s%s", strings.Join(argv, " "), err, out, stderr)
		}
		return string(out)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			exec.Command(bin, "lab", "down", "--name", name, "--dir", dir).Run()
		}
	})
	var info struct {
		Kubeconfig string `json:"kubeconfig"`
		ClusterDNS string `json:"clusterDNS"`
		Running    bool   `json:"running"`
		Hosts      []struct {
			Name    string `json:"name"`
			Address string `json:"address"`
			Running bool   `json:"running"`
		} `json:"hosts"`
	}
	out := run(bin, "lab", "up", "--name", name, "--dir", dir, "--nodes", "2", "--wait", "-o", "json", "--kubeconfig-merge=false")
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("lab up -o json: %v:\n%s", err, out)
	}
	if info.Kubeconfig != filepath.Join(dir, "kubeconfig") || info.ClusterDNS != "10.96.0.10" || len(info.Hosts) < 4 {
		t.Errorf("lab up -o json: %+v", info)
	}
	kc := info.Kubeconfig
	run("kubectl", "--kubeconfig", kc, "apply", "-f", "../../examples/clusterip/hostnames.yaml")
	run("kubectl", "--kubeconfig", kc, "rollout", "status", "deploy/hostnames", "--timeout=60s")
	// hostnames.yaml has a pod "client" to curl from.
	run("kubectl", "--kubeconfig", kc, "wait", "--for=condition=Ready", "pod/client", "--timeout=60s")
	testutil.Eventually(t, 30*time.Second, "hostnames.default.svc.cluster.local from pod client", func() error {
		out, err := exec.Command(bin, "--kubeconfig", kc, "exec", "client", "--", "curl", "-s", "--max-time", "2",
			"http://hostnames.default.svc.cluster.local/").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "hostnames-") {
			return fmt.Errorf("%v: %q", err, out)
		}
		return nil
	})
	out = run(bin, "lab", "status", "--name", name, "--dir", dir, "-o", "json")
	if err := json.Unmarshal([]byte(out), &info); err != nil || !info.Running {
		t.Errorf("lab status -o json: running %v, %v:\n%s", info.Running, err, out)
	}

	logs := filepath.Join(t.TempDir(), "lab-logs")
	run(bin, "lab", "logs", "--name", name, "--dir", dir, logs)
	for _, f := range []string{"node1.log", "node2.log"} {
		b, err := os.ReadFile(filepath.Join(logs, f))
		if err != nil || len(b) == 0 {
			t.Errorf("lab logs: %s: %v, %d bytes", f, err, len(b))
		}
	}
	run(bin, "lab", "down", "--name", name, "--dir", dir)
	downed = true
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("lab dir %s still exists after lab down", dir)
	}
	// The logs outlive the lab, for the CI's artifacts.
	if _, err := os.Stat(filepath.Join(logs, "node1.log")); err != nil {
		t.Errorf("collected logs gone with the lab: %v", err)
	}
}
