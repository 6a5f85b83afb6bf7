package main

import (
	"fmt"

	"github.com/minikit/minikit/internal/ingress"
	"github.com/minikit/minikit/internal/ingress/config"
	"github.com/minikit/minikit/internal/ingress/nginxconf"

	"github.com/spf13/cobra"
)

// newIngressCommand prints what minikit's Ingress controller would configure, as
// the nginx.conf an ingress-nginx controller would use for the same objects.
func newIngressCommand() *cobra.Command {
	var kubeconfig string
	root := &cobra.Command{Use: "ingress", Short: "The Ingress controller",
		Example: `  minikit ingress nginx-conf`}
	conf := &cobra.Command{
		Use:   "nginx-conf",
		Short: "Print the nginx.conf an nginx Ingress controller would use for the cluster's Ingresses",
		Example: `  minikit ingress nginx-conf
  minikit ingress nginx-conf --kubeconfig /var/lib/minikit-lab/lab/kubeconfig | less`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, _, err := kubeClient(kubeconfig, "")
			if err != nil {
				return err
			}
			out, err := ingress.NginxConf(cmd.Context(), client, config.Class{}, nginxconf.Config{})
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), out.Conf())
			return nil
		},
	}
	conf.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig (default: KUBECONFIG, then the local server's)")
	root.AddCommand(conf)
	return root
}
