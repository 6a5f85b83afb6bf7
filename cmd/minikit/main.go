// Command minikit is a mini-Kubernetes networking stack for labs: an API server,
// pods as network namespaces, kube-proxy's iptables rules, cluster DNS and an
// Ingress controller, on real kernel objects.
package main

import (
	"os"
)

func main() {
	root := newRootCommand()
	addCompletionExamples(root)
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
