// Package netpol is the NetworkPolicy enforcer that runs on every node, in
// the node's network namespace: it turns the networking.k8s.io/v1
// NetworkPolicies, Pods and Namespaces it sees through its listers into
// filter-table iptables rules and ipsets for the pods of this node, the way
// the book draws it (a per-pod firewall chain reached from FORWARD, jumping to
// per-policy chains). It owns, and touches nothing but:
//
//   - the hook chain KUBE-NWPLCY-FORWARD and the jump to it at the top of the
//     filter FORWARD chain (rule 1);
//   - the per-pod chains KUBE-POD-FW-<hash> (one per isolated local pod and
//     direction) and the per-policy chains KUBE-NWPLCY-<hash> (one per policy
//     and direction with selected local pods);
//   - the ipsets KUBE-NP-<hash> (one per policy rule with peers, and one per
//     egress rule port given by name), KUBE-NP6-<hash> for IPv6.
//
// # Packet path
//
// Pod traffic crosses FORWARD once per node: bridged between two pods of a
// node (cni0 with br_netfilter, bridge-nf-call-iptables=1 in the node's
// namespace, -m physdev --physdev-is-bridged would match it), routed to and
// from other nodes (host-gw routes), and routed back out of cni0 after a
// Service DNAT (the DNAT happens in PREROUTING, so FORWARD sees the endpoint's
// address and port: policy is judged after DNAT, as Kubernetes specifies).
// The hook chain lets replies and established flows through (conntrack), then
// sends a packet from an egress-isolated local pod to that pod's egress chain,
// clears the allow mark, and sends a packet to an ingress-isolated local pod
// to its ingress chain: one pass checks both ends of a same-node connection.
// Traffic the node sends itself does not cross FORWARD (OUTPUT), so the node's
// own access to its pods (probes) is never blocked; the ingress chain also
// lets through sources that are local addresses, for the hairpin case. A pod
// cannot block access to itself: its chains let its own address through.
//
// With more than 16 isolated pods in a direction, the hook chain first
// dispatches by /28 (/124 for IPv6) to a KUBE-NWPLCY- chain per group, so a packet walks at
// most a few dozen address matches before its pod's chain.
//
// A pod chain jumps to the chain of every policy that selects the pod for
// that direction; a policy chain sets mark bit 0x10000 on what one of its
// rules allows (the rule's comment names the policy and rule) and returns;
// the pod chain returns as soon as the mark is set and otherwise REJECTs
// (TCP with a reset, unless a Service DNATed it here: see podChainRules).
// Policies therefore add up (union).
//
// # Peer sets
//
// A rule's peers (podSelector, namespaceSelector, both, ipBlock) become one
// hash:net ipset of /32 (/128) pod addresses and CIDRs, so a packet costs one set
// lookup whatever the number of pods. ipBlock.except trims only its own peer:
// the CIDR minus its exceptions is computed here as a list of prefixes, since
// vishvananda/netlink's IPSetEntry cannot carry ipset's per-entry nomatch flag
// (it has no CADT flags on entries); the result is equivalent and exact. An
// egress port given by name resolves against each destination pod's ports, so
// such a rule becomes a hash:ip,port set of (pod address, protocol:port)
// pairs; an ingress port given by name resolves against each selected local
// pod, one rule per pod. A name no pod has allows nothing.
//
// # Syncing
//
// Events only ask for a sync; a sync computes the whole desired state from
// the listers, brings the ipsets in line (create, add and delete entries)
// over netlink, applies every chain in ONE iptables-restore --noflush through
// the iptables package (which deletes our stale chains in the same input),
// then destroys ipsets no longer used. A restarted enforcer (even after
// kill -9, which leaves the rules in place) converges to the same rules and
// never adds a second FORWARD jump. A monitor checks every SyncPeriod that the
// kernel still holds what the last sync wrote (the jump first in FORWARD, each
// chain with its rule count) and, when not, logs at WARN and resyncs. Sets
// are diffed against what the last sync wrote; the periodic sync (every
// FullSyncPeriod) and any sync after a failure or drift read them back from
// the kernel, so a set changed by hand is repaired within that period.
//
// # Dual-stack
//
// A dual-stack node runs one enforcer per IP family, as it runs one proxier
// per family (Config.Family): the IPv6 one writes the same chains, by the
// same names, with ip6tables, and its peer sets are KUBE-NP6-* of family
// inet6 (ipsets are not per family in the kernel, so the names differ and
// each enforcer lists, diffs and destroys only its own). Pod and namespace
// selectors match a pod by its address of each family (status.podIPs);
// an ipBlock, with its except, belongs to the family of its CIDR, so an
// IPv4 ipBlock never admits IPv6 traffic nor the reverse. Rejects answer
// with ICMPv6 port unreachable, and the IPv6 hook chain lets neighbour
// solicitations and advertisements through: conntrack does not track them,
// and between pods of a node they are bridged through FORWARD, where IPv4's
// ARP never goes. Ports, protocols and endPort render the same in both.
//
// SCTP rules are written as for TCP and UDP; if the kernel refuses them (no
// SCTP match), the enforcer leaves them out and logs that once.
package netpol
