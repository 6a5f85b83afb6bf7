package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// checkOutput fails unless format is one of allowed ("" being the text
// default), naming the flag and the formats it takes.
func checkOutput(format string, allowed ...string) error {
	if slices.Contains(allowed, format) {
		return nil
	}
	var names []string
	for _, a := range allowed {
		if a != "" {
			names = append(names, a)
		}
	}
	return fmt.Errorf("invalid value %q for -o/--output: allowed values are %s", format, strings.Join(names, ", "))
}

// printStructured writes v as JSON or YAML. YAML is rendered from the JSON,
// so both have the same field names and structure.
func printStructured(w io.Writer, format string, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	if format == "yaml" {
		y, err := yaml.JSONToYAML(b.Bytes())
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// versionInfo is `minikit version -o json|yaml`.
type versionInfo struct {
	Version    string `json:"version"`
	KubeAPI    string `json:"kubernetesAPI"`
	GoVersion  string `json:"goVersion"`
	Module     string `json:"module,omitempty"`
	ModVersion string `json:"moduleVersion,omitempty"`
	// GitCommit and GitModified are the build's vcs.revision and
	// vcs.modified, when the binary was built from a git checkout.
	GitCommit   string `json:"gitCommit,omitempty"`
	GitTime     string `json:"gitCommitTime,omitempty"`
	GitModified *bool  `json:"gitModified,omitempty"`
}

func buildVersion(bi *debug.BuildInfo, ok bool) versionInfo {
	v := versionInfo{Version: version, KubeAPI: "v1.37"}
	if !ok || bi == nil {
		return v
	}
	v.GoVersion = bi.GoVersion
	v.Module, v.ModVersion = bi.Main.Path, bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.GitCommit = s.Value
		case "vcs.time":
			v.GitTime = s.Value
		case "vcs.modified":
			m := s.Value == "true"
			v.GitModified = &m
		}
	}
	return v
}

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the minikit version",
		Example: `  minikit version
  minikit version -o json
  minikit version -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "", "json", "yaml"); err != nil {
				return err
			}
			v := buildVersion(debug.ReadBuildInfo())
			w := cmd.OutOrStdout()
			if output != "" {
				return printStructured(w, output, v)
			}
			fmt.Fprintf(w, "minikit %s (Kubernetes API %s", v.Version, v.KubeAPI)
			if v.GitCommit != "" {
				c := v.GitCommit
				if len(c) > 12 {
					c = c[:12]
				}
				if v.GitModified != nil && *v.GitModified {
					c += "-dirty"
				}
				fmt.Fprintf(w, ", commit %s", c)
			}
			if v.GoVersion != "" {
				fmt.Fprintf(w, ", %s", v.GoVersion)
			}
			fmt.Fprintln(w, ")")
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: text)")
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
