// Command minikit is a mini-Kubernetes networking stack for labs: an API server,
// pods as network namespaces, kube-proxy's iptables or nftables rules, cluster
// DNS and an Ingress controller, on real kernel objects.
//
// This package is main and the command line (cobra commands and their flags)
// only: package cluster builds and starts the components a command runs, and
// package lab the labs.
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
