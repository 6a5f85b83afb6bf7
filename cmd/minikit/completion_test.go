package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/minikit/minikit/internal/lab"

	"github.com/spf13/cobra"
)

// fakeLabs points the lab registry and default lab directory at temporary
// directories holding labs with the given hosts, and KUBECONFIG at an API
// that does not answer (port 1 on loopback), restoring everything after.
func fakeLabs(t *testing.T, labs map[string][]string) (registry string) {
	t.Helper()
	reg, def := t.TempDir(), t.TempDir()
	oldReg, oldDef := lab.RegistryDir, lab.DefaultDir
	lab.RegistryDir, lab.DefaultDir = reg, def
	t.Cleanup(func() { lab.RegistryDir, lab.DefaultDir = oldReg, oldDef })
	for name, hosts := range labs {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		st := lab.State{Name: name, Dir: dir, Nodes: 2, Subnet: "192.168.56.0/24", Addresses: map[string]string{}}
		for i, h := range hosts {
			st.Addresses[h] = "192.168.56." + string(rune('1'+i))
		}
		writeJSON(t, filepath.Join(dir, "lab.json"), st)
		writeJSON(t, filepath.Join(reg, name+".json"), lab.Entry{Name: name, Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig")})
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]
current-context: x
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	return reg
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// complete runs `minikit __complete ARGS...` as the shell scripts do and
// returns the completions and the directive.
func complete(t *testing.T, args ...string) ([]string, cobra.ShellCompDirective) {
	t.Helper()
	out, err := run(t, append([]string{cobra.ShellCompRequestCmd}, args...)...)
	if err != nil {
		t.Fatalf("__complete %q: %v", args, err)
	}
	comps, dir := parseCobraCompletion([]byte(out))
	if comps == nil {
		comps = []string{}
	}
	return comps, dir
}

func TestCompleteLabs(t *testing.T) {
	fakeLabs(t, map[string][]string{
		"lab": {"node1", "node2", "client", "external"},
		"np":  {"node1", "node2", "node3", "client", "external"},
	})
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"lab down --name", []string{"lab", "down", "--name", ""}, []string{"lab", "np"}},
		{"lab status --name prefix", []string{"lab", "status", "--name", "n"}, []string{"np"}},
		{"exec --lab", []string{"exec", "--lab", ""}, []string{"lab", "np"}},
		{"trace --lab", []string{"trace", "--lab", "l"}, []string{"lab"}},
		{"lab up --name is new", []string{"lab", "up", "--name", ""}, []string{}},
		{"lab exec hosts", []string{"lab", "exec", "--name", "np", ""}, []string{"node1", "node2", "node3", "client", "external"}},
		{"lab exec host prefix", []string{"lab", "exec", "--name", "lab", "c"}, []string{"client"}},
		{"lab stop nodes only", []string{"lab", "stop", "--name", "np", ""}, []string{"node1", "node2", "node3"}},
		{"lab start second arg", []string{"lab", "start", "--name", "np", "node1", ""}, []string{}},
		{"lab exec unknown lab", []string{"lab", "exec", "--name", "nope", ""}, []string{}},
		{"trace -o", []string{"trace", "-o", ""}, []string{"tree", "json", "yaml", "dot"}},
		{"lab list -o", []string{"lab", "list", "-o", "y"}, []string{"json", "yaml"}}, // the shell filters fixed lists
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dir := complete(t, tt.args...)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("completions %q, want %q", got, tt.want)
			}
			if dir&cobra.ShellCompDirectiveError != 0 {
				t.Errorf("directive %d has the error bit", dir)
			}
		})
	}
}

// TestCompleteWithoutAPI: names from an API that does not answer complete
// quietly to nothing (no error, no file names) but the lab's own hosts.
func TestCompleteWithoutAPI(t *testing.T) {
	fakeLabs(t, nil)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"exec POD", []string{"exec", ""}, []string{}},
		{"trace FROM", []string{"trace", ""}, []string{"client", "external"}},
		{"trace FROM prefix", []string{"trace", "e"}, []string{"external"}},
		{"trace TO", []string{"trace", "client", ""}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dir := complete(t, tt.args...)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("completions %q, want %q", got, tt.want)
			}
			if dir != cobra.ShellCompDirectiveNoFileComp {
				t.Errorf("directive %d, want NoFileComp", dir)
			}
		})
	}
}

// TestCompleteKubectl: the pass-through commands ask kubectl's own
// completion, without minikit's --lab, with the lab's kubeconfig. The kubectl
// here is a script that answers with what it was asked.
func TestCompleteKubectl(t *testing.T) {
	fakeLabs(t, map[string][]string{"np": {"node1"}, "lab": {"node1"}})
	t.Setenv("KUBECONFIG", "")
	bin := t.TempDir()
	script := "#!/bin/sh\necho \"args=[$*]\"\necho \"kubeconfig=$KUBECONFIG\"\necho ':4'\n"
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	got, dir := complete(t, "get", "--lab", "np", "po", "we")
	want := []string{"args=[__complete get po we]", "kubeconfig=" + filepath.Join(lookupDir(t, "np"), "kubeconfig")}
	if !reflect.DeepEqual(got, want) || dir != cobra.ShellCompDirectiveNoFileComp {
		t.Errorf("got %q, %d; want %q, %d", got, dir, want, cobra.ShellCompDirectiveNoFileComp)
	}
	got, _ = complete(t, "kubectl", "--lab=lab", "get", "")
	if len(got) == 0 || got[0] != "args=[__complete get ]" {
		t.Errorf("minikit kubectl: kubectl was asked %q", got)
	}
}

func lookupDir(t *testing.T, name string) string {
	e, ok := lab.Lookup(name)
	if !ok {
		t.Fatalf("lab %s not registered", name)
	}
	return e.Dir
}

func TestParseCobraCompletion(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want []string
		dir  cobra.ShellCompDirective
	}{
		{"names", "web-0\nweb-1\tRunning\n:4\n", []string{"web-0", "web-1\tRunning"}, cobra.ShellCompDirectiveNoFileComp},
		{"none", ":0\n", nil, cobra.ShellCompDirectiveDefault},
		{"no directive", "web-0\n", nil, cobra.ShellCompDirectiveDefault},
		{"bad directive", "web-0\n:x\n", nil, cobra.ShellCompDirectiveDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dir := parseCobraCompletion([]byte(tt.out))
			if !reflect.DeepEqual(got, tt.want) || dir != tt.dir {
				t.Errorf("got %q, %d; want %q, %d", got, dir, tt.want, tt.dir)
			}
		})
	}
}
