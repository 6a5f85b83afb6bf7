package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// run executes a fresh command tree with args and returns its stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	addCompletionExamples(root)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestVersionOutput(t *testing.T) {
	for _, format := range []string{"json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			out, err := run(t, "version", "-o", format)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			// sigs.k8s.io/yaml reads JSON too; json must also parse as JSON.
			if format == "json" {
				err = json.Unmarshal([]byte(out), &got)
			} else {
				err = yaml.Unmarshal([]byte(out), &got)
			}
			if err != nil {
				t.Fatalf("-o %s is not %s: %v\n%s", format, format, err, out)
			}
			for _, k := range []string{"version", "kubernetesAPI", "goVersion"} {
				if s, _ := got[k].(string); s == "" {
					t.Errorf("-o %s: %q is missing or empty in %v", format, k, got)
				}
			}
		})
	}
	out, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "minikit "+version+" (Kubernetes API v1.37") {
		t.Errorf("version = %q, %v", out, err)
	}
}

// TestBuildVersion checks the fields taken from the build info, with and
// without a git checkout.
func TestBuildVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "github.com/minikit/minikit", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-12-04T14:00:00Z"}}}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want map[string]any
	}{
		{"git checkout", bi, true, map[string]any{"version": version, "kubernetesAPI": "v1.37", "goVersion": "go1.99",
			"module": "github.com/minikit/minikit", "moduleVersion": "(devel)", "gitCommit": "0123456789abcdef",
			"gitCommitTime": "2026-12-04T14:00:00Z", "gitModified": true}},
		{"no vcs", &debug.BuildInfo{GoVersion: "go1.99"}, true, map[string]any{"version": version, "kubernetesAPI": "v1.37", "goVersion": "go1.99"}},
		{"no build info", nil, false, map[string]any{"version": version, "kubernetesAPI": "v1.37", "goVersion": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printStructured(&b, "json", buildVersion(tt.bi, tt.ok)); err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Errorf("got fields %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

// TestPrintStructuredSameShape: YAML has the JSON's field names and values.
func TestPrintStructuredSameShape(t *testing.T) {
	v := struct {
		Name  string   `json:"name"`
		Hosts []string `json:"hosts"`
		N     int      `json:"nodes"`
	}{"lab", []string{"node1", "client"}, 2}
	var j, y bytes.Buffer
	if err := printStructured(&j, "json", v); err != nil {
		t.Fatal(err)
	}
	if err := printStructured(&y, "yaml", v); err != nil {
		t.Fatal(err)
	}
	var fromJSON, fromYAML map[string]any
	if err := json.Unmarshal(j.Bytes(), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(y.Bytes(), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(t, fromJSON), mustJSON(t, fromYAML); a != b {
		t.Errorf("json %s != yaml %s", a, b)
	}
	if !strings.Contains(y.String(), "name: lab\n") {
		t.Errorf("yaml output is not YAML:\n%s", y.String())
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOutputFlagValues checks, without running anything, that each command
// with -o accepts its formats and rejects another with an error naming the
// flag and the allowed values.
func TestOutputFlagValues(t *testing.T) {
	tests := []struct {
		path []string
		args []string
		ok   []string
		want string
	}{
		{[]string{"version"}, nil, []string{"", "json", "yaml"}, "allowed values are json, yaml"},
		{[]string{"lab", "up"}, nil, []string{"", "json", "yaml"}, "allowed values are json, yaml"},
		{[]string{"lab", "status"}, nil, []string{"", "json", "yaml"}, "allowed values are json, yaml"},
		{[]string{"lab", "list"}, nil, []string{"", "json", "yaml"}, "allowed values are json, yaml"},
		{[]string{"trace"}, []string{"client", "svc/web"}, []string{"tree", "json", "yaml", "dot"}, "allowed values are tree, json, yaml, dot"},
	}
	for _, tt := range tests {
		name := strings.Join(tt.path, " ")
		check := func(format string) error {
			cmd, _, err := newRootCommand().Find(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.ParseFlags([]string{"-o", format}); err != nil {
				t.Fatal(err)
			}
			if cmd.PreRunE != nil {
				return cmd.PreRunE(cmd, tt.args)
			}
			// version checks in RunE, which with a valid format prints.
			cmd.SetOut(new(bytes.Buffer))
			return cmd.RunE(cmd, tt.args)
		}
		for _, f := range tt.ok {
			if err := check(f); err != nil {
				t.Errorf("%s -o %q: %v", name, f, err)
			}
		}
		err := check("xml")
		if err == nil || !strings.Contains(err.Error(), "-o/--output") || !strings.Contains(err.Error(), `"xml"`) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s -o xml: error %v, want one naming -o/--output, \"xml\" and %q", name, err, tt.want)
		}
	}
	if _, err := run(t, "version", "-o", "xml"); err == nil {
		t.Error("minikit version -o xml succeeded")
	}
}

// TestEveryCommandHasExamples walks the command tree: every visible command
// has an Examples section, and every example line parses against that
// command: its flags exist and its arguments are what the command accepts.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no Example", c.CommandPath())
		}
		for _, line := range strings.Split(c.Example, "\n") {
			checkExample(t, c, line)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRootCommand()
	addCompletionExamples(root)
	walk(root)
}

func checkExample(t *testing.T, c *cobra.Command, line string) {
	t.Helper()
	if !strings.HasPrefix(line, "  ") {
		t.Errorf("%s: example %q is not indented like cobra's", c.CommandPath(), line)
	}
	words := splitShell(line)
	for len(words) > 0 && strings.TrimPrefix(words[0], "<(") != "minikit" {
		words = words[1:] // sudo, source
	}
	if len(words) == 0 {
		t.Errorf("%s: example %q does not run minikit", c.CommandPath(), line)
		return
	}
	if !strings.Contains(line, c.CommandPath()) && c.Parent() != nil {
		t.Errorf("%s: example %q is about another command", c.CommandPath(), line)
	}
	args := words[1:]
	for i, w := range args {
		if w == "|" || w == ">" || w == "#" {
			args = args[:i]
			break
		}
	}
	args[len(args)-1] = strings.TrimSuffix(args[len(args)-1], ")")
	root := newRootCommand()
	addCompletionExamples(root)
	cmd, rest, err := root.Find(args)
	if err != nil {
		t.Errorf("%s: example %q: %v", c.CommandPath(), line, err)
		return
	}
	if cmd.DisableFlagParsing {
		return // kubectl parses these
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%s: example %q: %v", c.CommandPath(), line, err)
		return
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		t.Errorf("%s: example %q: %v", c.CommandPath(), line, err)
	}
}

// splitShell splits a shell line into words, keeping quoted strings whole
// and making |, > and # words of their own.
func splitShell(s string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	in := false
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case r == '|' || r == '>' || r == '#':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
			words = append(words, string(r))
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestCompletionScripts: cobra's completion command writes scripts the
// shells accept (bash -n parses the bash one).
func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, err := run(t, "completion", shell)
		if err != nil {
			t.Fatalf("completion %s: %v", shell, err)
		}
		if !strings.Contains(out, "minikit") || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s: not a completion script for minikit:\n%.300s", shell, out)
		}
		if shell == "bash" {
			f := filepath.Join(t.TempDir(), "minikit.bash")
			if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
				t.Errorf("bash -n: %v: %s", err, b)
			}
		}
	}
}
