// Package cni owns the kernel objects that make up a pod's network and
// process sandbox on a node: named network namespaces (/run/netns, as
// iproute2 makes them), the node's cni0 bridge, one veth pair per pod, the
// pod's persistent UTS and mount namespaces, and the pod IP allocator.
//
// It is the one place in minikit that enters namespaces. Everything that has
// to run "inside" a network namespace goes through Do or DoPath, which lock
// the OS thread and throw the thread away if it cannot be put back; nothing
// else calls setns. Netlink work is done through handles opened inside the
// target namespace (a netlink socket stays bound to the namespace it was
// created in), so the long-running code never sits on a switched thread.
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
