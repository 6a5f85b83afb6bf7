package main

import (
	"fmt"

	"github.com/minikit/minikit/ingress"
	"github.com/minikit/minikit/ingress/config"
	"github.com/minikit/minikit/ingress/nginxconf"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// newIngressCommand prints what minikit's Ingress controller would configure, as
// the nginx.conf an ingress-nginx controller would use for the same objects.
func newIngressCommand() *cobra.Command {
	var kubeconfig string
	root := &cobra.Command{Use: "ingress", Short: "The Ingress controller"}
	conf := &cobra.Command{
		Use:   "nginx-conf",
		Short: "Print the nginx.conf an nginx Ingress controller would use for the cluster's Ingresses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			if kubeconfig == "" {
				kubeconfig = defaultKubeconfig(nil)
			}
			rules.ExplicitPath = kubeconfig
			rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
			if err != nil {
				return err
			}
			client, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			out, err := ingress.NginxConf(cmd.Context(), client, config.Class{}, nginxconf.Options{})
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
