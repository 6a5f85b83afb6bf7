// Package loadbalancer is minikit's LoadBalancer implementation for labs, the
// part of a cloud provider that a bare-metal or VM cluster lacks, modelled on
// MetalLB's layer-2 mode:
//
//   - The Controller (server side, "service-controller") gives each
//     `type: LoadBalancer` Service of its class an address of each of its
//     IP families (spec.ipFamilies, ipFamilyPolicy) from the pool
//     (--lb-pool, IPv4 and IPv6 ranges), honouring spec.loadBalancerIP and
//     MetalLB's loadBalancerIPs annotations, writes
//     status.loadBalancer.ingress (ipMode VIP) and records Events, including
//     why a Service stays <pending>. It keeps no state of its own: the
//     allocations are the Services' statuses, so a restart re-reads them and
//     never hands an address out twice.
//
//   - The Announcer (one per node, "speaker") makes the addresses reachable
//     on the lab or VM network: exactly one node answers for each Service's
//     addresses, ARP for IPv4 and NDP for IPv6, from user-space responders
//     on the interface that holds the node's InternalIP. The address is never
//     configured on an interface: the proxier's load-balancer rules (ipMode
//     VIP) catch packets to it in PREROUTING, as with MetalLB. A responder
//     that dies takes its answers with it, so a crashed node leaves nothing
//     behind in the kernel.
//
// Which node answers is decided by every announcer on its own, with no
// coordination beyond the API, as MetalLB's speakers do: the candidates are
// the Ready nodes whose announcer is alive (and, for externalTrafficPolicy
// Local, that have a ready endpoint of the Service), and the winner is the
// first of them sorted by sha256(node + "#" + IP), IP being the Service's
// first address, so both of a dual-stack Service's addresses are announced by
// one node. Announcer liveness is a
// per-node lease (a ConfigMap in kube-system, renewed every second); a peer
// whose lease has not changed for LeaseDuration (3 s) is gone. That is far
// faster than the node lifecycle's 40 s NotReady, which is why failover does
// not wait for it. See lease.go for how staleness is judged without
// trusting clocks.
package loadbalancer
