package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

// newDocsCommand writes the CLI reference (docs/cli/) from the cobra commands.
func newDocsCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "__docs DIR",
		Short:  "Write the CLI reference as Markdown",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := writeDocs(args[0])
			if err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %d files to %s\n", len(files), args[0])
			}
			return err
		},
	}
}

// writeDocs writes the reference of a fresh command tree into dir (so it does
// not depend on what running the CLI added to the tree, such as cobra's
// completion command) and removes minikit*.md files there that no command
// produces any more. It returns the file names written.
func writeDocs(dir string) ([]string, error) {
	docs := renderDocs(newRootCommand())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "minikit*.md"))
	for _, f := range old {
		if _, ok := docs[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				return nil, err
			}
		}
	}
	var names []string
	for name := range docs {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		errs = append(errs, os.WriteFile(filepath.Join(dir, name), docs[name], 0o644))
	}
	return names, errors.Join(errs...)
}

// renderDocs renders one Markdown page per visible command (cobra/doc's layout:
// minikit_lab_up.md for `minikit lab up`) and README.md, an index. Hidden
// commands and cobra's help and completion commands are left out. The output
// depends only on the commands, never on the date or the machine.
func renderDocs(root *cobra.Command) map[string][]byte {
	out := map[string][]byte{}
	var index bytes.Buffer
	index.WriteString("# minikit CLI reference\n\n")
	index.WriteString("Generated from the cobra commands by `go run ./cmd/minikit __docs docs/cli`; do not edit by hand " +
		"(`go test ./cmd/minikit` fails when these pages differ from the commands).\n\n")
	index.WriteString("| command | what it does |\n|---|---|\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		out[docFile(c)] = renderCommand(c)
		fmt.Fprintf(&index, "| [`%s`](%s) | %s |\n", c.CommandPath(), docFile(c), c.Short)
		for _, sub := range visibleChildren(c) {
			walk(sub)
		}
	}
	walk(root)
	index.WriteString("\n`minikit help` and cobra's `minikit completion bash|zsh|fish|powershell` " +
		"(shell completion scripts) are not listed.\n")
	out["README.md"] = index.Bytes()
	return out
}

func docFile(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md"
}

func visibleChildren(c *cobra.Command) []*cobra.Command {
	var cs []*cobra.Command
	for _, sub := range c.Commands() {
		if sub.Hidden || sub.Deprecated != "" || sub.Name() == "help" || sub.Name() == "completion" {
			continue
		}
		cs = append(cs, sub)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name() < cs[j].Name() })
	return cs
}

func renderCommand(c *cobra.Command) []byte {
	c.InitDefaultHelpFlag()
	var b bytes.Buffer
	fmt.Fprintf(&b, "## %s\n\n%s\n\n", c.CommandPath(), c.Short)
	if c.Long != "" {
		fmt.Fprintf(&b, "### Synopsis\n\n%s\n\n", strings.TrimSpace(c.Long))
	}
	if c.Runnable() {
		fmt.Fprintf(&b, "```\n%s\n```\n\n", c.UseLine())
	}
	if c.DisableFlagParsing {
		verb := c.Name()
		if verb == "kubectl" {
			b.WriteString("Every argument is passed to kubectl, with `--kubeconfig` added when none is given " +
				"(kubectl's own lookup, then the kubeconfig a local `minikit server` wrote).\n\n")
		} else {
			fmt.Fprintf(&b, "Every argument is passed to `kubectl %s`, with `--kubeconfig` added when none is given "+
				"(kubectl's own lookup, then the kubeconfig a local `minikit server` wrote); "+
				"see `kubectl %s --help` for its flags.\n\n", verb, verb)
		}
	}
	if c.Example != "" {
		fmt.Fprintf(&b, "### Examples\n\n```\n%s\n```\n\n", strings.TrimRight(c.Example, "\n"))
	}
	if fs := c.NonInheritedFlags(); fs.HasAvailableFlags() && !c.DisableFlagParsing {
		fmt.Fprintf(&b, "### Options\n\n```\n%s```\n\n", fs.FlagUsages())
	}
	if fs := c.InheritedFlags(); fs.HasAvailableFlags() {
		fmt.Fprintf(&b, "### Options inherited from parent commands\n\n```\n%s```\n\n", fs.FlagUsages())
	}
	var see []string
	if p := c.Parent(); p != nil {
		see = append(see, fmt.Sprintf("* [%s](%s) - %s", p.CommandPath(), docFile(p), p.Short))
	}
	for _, sub := range visibleChildren(c) {
		see = append(see, fmt.Sprintf("* [%s](%s) - %s", sub.CommandPath(), docFile(sub), sub.Short))
	}
	if len(see) > 0 {
		fmt.Fprintf(&b, "### See also\n\n%s\n", strings.Join(see, "\n"))
	}
	return append(bytes.TrimRight(b.Bytes(), "\n"), '\n')
}
