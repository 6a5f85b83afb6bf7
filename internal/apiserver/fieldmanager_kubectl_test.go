package apiserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerSideApplyWithKubectl: the real kubectl moves a ConfigMap from
// client-side to server-side apply (its fields become kubectl's), removes a
// field it stops applying, reports another manager's conflict by field and
// manager, and takes the field with --force-conflicts.
func TestServerSideApplyWithKubectl(t *testing.T) {
	a := newTestAPI(t)
	k := newKubectlCLI(t, a, kubectlBinaries(t)[0])
	dir := t.TempDir()
	write := func(data string) string {
		f := filepath.Join(dir, "cm.yaml")
		if err := os.WriteFile(f, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n"+data), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := k.run(t, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	run("apply", "-f", write("  a: '1'\n  b: '2'\n"))
	run("apply", "--server-side", "-f", write("  a: '1'\n"))
	if got := run("get", "cm", "cfg", "-o", "jsonpath={.data}"); got != `{"a":"1"}` {
		t.Errorf("after the move to server-side apply without b: data %s", got)
	}
	if got := run("get", "cm", "cfg", "-o", "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation} {end}"); !strings.Contains(got, "kubectl/Apply") {
		t.Errorf("managedFields %q", got)
	}
	// Another manager changes a; kubectl's apply then conflicts.
	run("patch", "cm", "cfg", "--field-manager", "editor", "--type", "merge", "-p", `{"data":{"a":"x"}}`)
	out, errOut, err := k.run(t, "apply", "--server-side", "-f", write("  a: '1'\n"))
	if err == nil || !strings.Contains(errOut, `conflict with "editor"`) || !strings.Contains(errOut, ".data.a") {
		t.Fatalf("apply over editor's field: %v\n%s%s", err, out, errOut)
	}
	run("apply", "--server-side", "--force-conflicts", "-f", write("  a: '1'\n"))
	if got := run("get", "cm", "cfg", "-o", "jsonpath={.data.a}"); got != "1" {
		t.Errorf("after --force-conflicts: a=%s", got)
	}
	// kubectl diff and --dry-run=server ask the server what a write would do
	// (dryRun=All) and change nothing.
	out, errOut, err = k.run(t, "diff", "--server-side", "-f", write("  a: '2'\n"))
	if err == nil || !strings.Contains(out, "-  a: \"1\"") || !strings.Contains(out, "+  a: \"2\"") {
		t.Errorf("kubectl diff: %v\n%s%s", err, out, errOut)
	}
	run("apply", "--server-side", "--dry-run=server", "-f", write("  a: '3'\n"))
	run("delete", "cm", "cfg", "--dry-run=server")
	if got := run("get", "cm", "cfg", "-o", "jsonpath={.data.a}"); got != "1" {
		t.Errorf("after kubectl diff and dry runs: a=%s", got)
	}
}
