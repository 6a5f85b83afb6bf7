// Package dns is minikit's cluster DNS server, standing in for CoreDNS with
// its kubernetes plugin as kubeadm configures it: the records of the
// Kubernetes DNS specification (schema 1.1.0) for the cluster zone, and
// forwarding of every other name to the upstream resolvers with a small
// cache. It runs in the kube-system/coredns pods, as the kubernetes plugin of
// the built-in coredns image's Corefile (internal/images; the rest of the
// Corefile's chain reaches it through Config.Before), and the package keeps
// client-go's clientset and informer factory out
// (imports_test.go), whose init alone doubles a DNS-only process's memory.
// miekg/dns, CoreDNS's own DNS library, does the wire format and TCP.
//
// The server never reads another component's memory: it lists and watches
// Services, EndpointSlices and Namespaces (and Pods in "verified" pod mode or
// for autopath) through a Source it declares itself (InformerSource on the
// API, StaticSource in tests), and on every change rebuilds an immutable
// snapshot of the zone in full (reconcile, don't patch; zone.go). Queries are
// answered from the current snapshot without locks. Because the cluster zone is
// answered from the snapshot, it is never put in the TTL cache: only upstream
// answers are cached, as kubeadm's Corefile does since Kubernetes PR #128359.
// Packed authoritative replies are memoised per snapshot (memo.go; the memo is
// dropped with the snapshot it was computed from), which is not a cache in the
// DNS sense: it can never serve an answer the current snapshot would not give.
//
// The files split along one seam. transport.go is the transport: the UDP and
// TCP listeners, the memoised UDP fast path, message-level checks, truncation
// and forwarding upstream (forward.go holds the upstream client and its
// cache). answer.go is the answering rules: answerer.respond decides, from a
// question, a snapshot and the client's address alone, whether a name is
// answered (and with what) or forwarded, and is tested without sockets.
//
// Name handling follows docs/dns-conformance.md §3, which cites the upstream
// sources: names are parsed right to left (zone, svc|pod, namespace, service,
// then an endpoint or _port._proto), matched case-insensitively, owners echo
// the query's case, and negative answers carry the zone's SOA. Until the first
// sync every would-be NXDOMAIN is a SERVFAIL.
//
// In a dual-stack cluster the same records answer both families, as CoreDNS's
// do: A from a Service's IPv4 ClusterIP or IPv4 endpoints, AAAA from the IPv6
// ones (spec.clusterIPs, the EndpointSlice of each address type), IPv6
// endpoints and pods named by their address with dashes for colons, PTR
// under ip6.arpa in nibble form, and NODATA for a name whose records are all
// of the other family (dualstack_test.go). Verified pod records know a pod's
// primary podIP only, like CoreDNS's pod index.
//
// The package also renders the per-pod resolv.conf by dnsPolicy (ResolvConf),
// which the kubelet writes into each pod. The coredns Deployment and the
// kube-dns Service selecting its pods are installed by the server
// (internal/cluster/coredns.go).
package dns
