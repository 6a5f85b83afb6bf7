package main

import (
	"fmt"
	"strings"

	"github.com/minikit/minikit/internal/apiserver"
	"github.com/minikit/minikit/internal/doctor"

	"github.com/spf13/cobra"
)

// hostSystem is the machine the doctor checks; tests replace it to take a
// feature away.
var hostSystem = doctor.Host

func newDoctorCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what minikit needs of this machine, and say how to get what is missing",
		Long: `Check what minikit needs of this machine, and say how to get what is missing.

One line per check: root or CAP_NET_ADMIN and CAP_SYS_ADMIN; the kernel's
features, each tried for real in a throwaway network namespace (network
namespaces, veth, bridge, VXLAN, nf_tables with numgen, nat, ct and fib,
conntrack, ipset); br_netfilter and IPv6; iptables and its backend; the tools
(iptables-restore, iptables-save, ip, nft, nsenter, kubectl and its version);
cgroup, /run, and Go in minikit's source tree.

A check is ok, warn (minikit runs, but something a student would miss) or
missing (minikit cannot run here); any missing makes the exit status 1.
minikit lab up, minikit server and minikit agent run the missing-able checks
first and stop with their lines.`,
		Example: `  sudo minikit doctor
  sudo minikit doctor -o json
  sudo minikit doctor -o json | jq -r '.checks[] | select(.status != "ok") | .name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "", "text", "json", "yaml"); err != nil {
				return err
			}
			r := doctor.Run(hostSystem(), doctor.Options{ServerVersion: apiserver.KubernetesVersion})
			w := cmd.OutOrStdout()
			var err error
			if output == "json" || output == "yaml" {
				err = printStructured(w, output, r)
			} else {
				err = r.WriteText(w)
			}
			if err != nil {
				return err
			}
			if failed := r.Failed(); len(failed) > 0 {
				names := make([]string, len(failed))
				for i, c := range failed {
					names[i] = c.Name
				}
				return fmt.Errorf("this machine lacks what minikit needs: %s (see the missing lines above)", strings.Join(names, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: text, json or yaml (default: text)")
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// preflight runs the doctor's required checks before a command that builds
// kernel objects, so that it stops with the doctor's lines rather than a
// netlink error deep inside its first sync.
func preflight(cmd *cobra.Command) error {
	r := doctor.Run(hostSystem(), doctor.Options{Command: cmd.CommandPath(), RequiredOnly: true})
	return r.Err(cmd.CommandPath())
}
