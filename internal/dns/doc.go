// Package dns is minikit's cluster DNS server: the records of the Kubernetes DNS
// specification (schema 1.1.0) for the cluster zone, answered the way CoreDNS's
// kubernetes plugin answers them, and forwarding of every other name to the node's
// upstream resolvers with a small cache.
//
// The server never reads another component's memory: it lists and watches Services,
// EndpointSlices and Namespaces (and Pods in "verified" pod mode) through a Lister it
// declares itself, and on every change rebuilds an immutable snapshot of the zone in
// full (reconcile, don't patch). Queries are answered from the current snapshot
// without locks. Because the cluster zone is answered from the snapshot, it is never
// put in the TTL cache: only upstream answers are cached, as kubeadm's Corefile does
// since Kubernetes PR #128359. Packed authoritative replies are memoised per
// snapshot (the memo is dropped with the snapshot it was computed from), which is
// not a cache in the DNS sense: it can never serve an answer the current snapshot
// would not give.
//
// Name handling follows reference/dns.md §3: names are parsed right to left (zone,
// svc|pod, namespace, service, then an endpoint or _port._proto), matched
// case-insensitively, owners echo the query's case, and negative answers carry the
// zone's SOA. Until the first sync every would-be NXDOMAIN is a SERVFAIL.
//
// The package also holds the Kubernetes wiring that has no better home: the
// kube-system/kube-dns Service and its Endpoints/EndpointSlices (Registrar), and
// the per-pod resolv.conf by dnsPolicy (ResolvConf).
package dns
