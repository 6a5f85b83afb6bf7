// Package cni is the pod network of a node, what the CNI bridge plugin and
// host-local IPAM do for a kubelet: the node's cni0 bridge, one veth pair per
// pod in the pod's named network namespace, the pod IP allocator, the routes
// to other nodes' pod CIDRs (host-gw) or Flannel's VXLAN backend, and the
// pod's persistent UTS and mount namespaces.
//
// Entering namespaces is package netns's (Do, DoPath, named namespaces);
// netlink work is done through handles opened inside the target namespace
// (a netlink socket stays bound to the namespace it was created in), so the
// long-running code never sits on a switched thread.
//
// All operations are idempotent and repair partial state, in the spirit of
// the containernetworking bridge plugin: the node agent calls SetupPod for
// every pod on every sync and PodOK to report what is broken. Kernel state is
// derived: deleting a pod's netns, its veth or the bridge by hand is undone
// by the next SetupPod / EnsureBridge.
//
// Kernel assumptions: Linux >= 4.11 (/proc/thread-self, nsfs), br_netfilter
// with per-namespace bridge-nf-call-* sysctls (>= 5.3) for the bridge
// netfilter setting, and util-linux nsenter for ExecArgv.
package cni
