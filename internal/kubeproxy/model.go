package kubeproxy

import (
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// servicePort is one port of one Service, the unit kube-proxy writes chains for.
type servicePort struct {
	svc      types.NamespacedName
	name     string // "ns/name:port" (ServicePortName.String)
	portName string
	protocol string // lower case: tcp, udp, sctp

	clusterIP    netip.Addr
	port         int
	nodePort     int
	externalIPs  []netip.Addr
	lbIPs        []netip.Addr
	sourceRanges []netip.Prefix

	externalLocal bool // externalTrafficPolicy: Local
	internalLocal bool // internalTrafficPolicy: Local
	hcNodePort    int
	affinity      int // sessionAffinity ClientIP timeout in seconds; 0 = no affinity

	// Chain names; they share one hash.
	svcChain, svlChain, extChain, fwChain string
}

// externallyAccessible is ServicePort.ExternallyAccessible.
func (sp *servicePort) externallyAccessible() bool {
	return sp.nodePort != 0 || len(sp.lbIPs) > 0 || len(sp.externalIPs) > 0
}

// usesClusterEndpoints and usesLocalEndpoints are kube-proxy's serviceport.go selectors.
func (sp *servicePort) usesClusterEndpoints() bool {
	return !sp.internalLocal || sp.externallyAccessible()
}

func (sp *servicePort) usesLocalEndpoints() bool {
	return sp.internalLocal || (sp.externalLocal && sp.externallyAccessible())
}

// endpoint is one backend address of a service port.
type endpoint struct {
	ip          string
	port        int
	addr        string // net.JoinHostPort(ip, port): the sort key and the hash input
	ready       bool
	serving     bool
	terminating bool
	local       bool   // on this node
	chain       string // KUBE-SEP-...
	// otherTopology: the service's hints send this node's cluster traffic
	// to other endpoints (topologyModeFromHints), so this one is left out
	// of its cluster endpoints.
	otherTopology bool
}

// servicePorts is servicePortsOf for IPv4, the nftables mode's only family.
func servicePorts(svc *corev1.Service) []*servicePort { return servicePortsOf(svc, false) }

// servicePortsOf turns a Service into its ports of one IP family (ipv6 or
// IPv4), as one of kube-proxy's per-family proxiers sees it
// (newBaseServiceInfo): the ClusterIP of that family from spec.clusterIPs
// (GetClusterIPByFamily), and the external IPs, load-balancer IPs and source
// ranges of that family. Headless and ExternalName services, and services
// without a ClusterIP of the family, get no rules, as in kube-proxy.
func servicePortsOf(svc *corev1.Service, ipv6 bool) []*servicePort {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	ofFamily := func(a netip.Addr) bool { return a.Is4() != ipv6 && !a.Is4In6() && a.Zone() == "" }
	cip, ok := clusterIPByFamily(svc, ofFamily)
	if !ok {
		return nil // "None" (headless), empty, or not of this family
	}
	var out []*servicePort
	for _, p := range svc.Spec.Ports {
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		if proto != "tcp" && proto != "udp" && proto != "sctp" {
			// The API rejects any other protocol; the renderer writes the
			// protocol into rules, so it never trusts that.
			continue
		}
		name := servicePortName(svc.Namespace, svc.Name, p.Name)
		h := portProtoHash(name, proto)
		sp := &servicePort{
			svc:       types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name},
			name:      name,
			portName:  p.Name,
			protocol:  proto,
			clusterIP: cip,
			port:      int(p.Port),
			svcChain:  prefixSVC + h,
			svlChain:  prefixSVL + h,
			extChain:  prefixEXT + h,
			fwChain:   prefixFW + h,
		}
		if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			sp.nodePort = int(p.NodePort)
		}
		for _, s := range svc.Spec.ExternalIPs {
			if a, err := netip.ParseAddr(s); err == nil && ofFamily(a) {
				sp.externalIPs = append(sp.externalIPs, a)
			}
		}
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				// ipMode Proxy means the load balancer itself proxies to the
				// nodes: kube-proxy must not capture the LB IP then.
				if ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy {
					continue
				}
				if a, err := netip.ParseAddr(ing.IP); err == nil && ofFamily(a) {
					sp.lbIPs = append(sp.lbIPs, a)
				}
			}
			for _, r := range svc.Spec.LoadBalancerSourceRanges {
				if pfx, err := netip.ParsePrefix(strings.TrimSpace(r)); err == nil && ofFamily(pfx.Addr()) {
					sp.sourceRanges = append(sp.sourceRanges, pfx.Masked())
				}
			}
		}
		ext := sp.externallyAccessible()
		sp.externalLocal = ext && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
		sp.internalLocal = svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
		if sp.externalLocal && svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			sp.hcNodePort = int(svc.Spec.HealthCheckNodePort)
		}
		if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			sp.affinity = int(corev1.DefaultClientIPServiceAffinitySeconds)
			if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
				sp.affinity = int(*c.ClientIP.TimeoutSeconds)
			}
		}
		out = append(out, sp)
	}
	return out
}

// clusterIPByFamily is kube-proxy's GetClusterIPByFamily: the service's ClusterIP
// of the family ofFamily accepts, from spec.clusterIPs, or from spec.clusterIP
// when clusterIPs is empty (an object written before dual-stack).
func clusterIPByFamily(svc *corev1.Service, ofFamily func(netip.Addr) bool) (netip.Addr, bool) {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err == nil && ofFamily(a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// endpointsFor collects the endpoints of one service port from the service's
// EndpointSlices of the port's family (its ClusterIP's): the slice port with
// the same name and protocol gives the target port; duplicates across slices are merged; the result is sorted by
// "ip:port" as kube-proxy's endpointslicecache sorts it.
func endpointsFor(sp *servicePort, slices []*discovery.EndpointSlice, nodeName, zone string) []*endpoint {
	seen := map[string]*endpoint{}
	hints := map[string]*discovery.EndpointHints{}
	ipv6 := sp.clusterIP.Is6()
	want := discovery.AddressTypeIPv4
	if ipv6 {
		want = discovery.AddressTypeIPv6
	}
	for _, s := range slices {
		if s.AddressType != want {
			continue
		}
		port := -1
		for _, p := range s.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			proto := "tcp"
			if p.Protocol != nil {
				proto = strings.ToLower(string(*p.Protocol))
			}
			if name == sp.portName && proto == sp.protocol && p.Port != nil {
				port = int(*p.Port)
			}
		}
		if port < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			ip := e.Addresses[0] // kube-proxy uses only the first address
			a, err := netip.ParseAddr(ip)
			if err != nil || a.Is4() == ipv6 || a.Is4In6() || a.Zone() != "" {
				continue
			}
			ip = a.String() // canonical, as the API validates it: the hash input and the DNAT target
			addr := net.JoinHostPort(ip, strconv.Itoa(port))
			if _, dup := seen[addr]; dup {
				continue
			}
			// nil conditions mean "unknown", which the API defines as ready.
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			serving := ready
			if e.Conditions.Serving != nil {
				serving = *e.Conditions.Serving
			}
			terminating := e.Conditions.Terminating != nil && *e.Conditions.Terminating
			seen[addr] = &endpoint{
				ip: ip, port: port, addr: addr,
				ready: ready, serving: serving, terminating: terminating,
				local: e.NodeName != nil && *e.NodeName == nodeName,
				chain: prefixSEP + endpointHash(sp.name, sp.protocol, addr),
			}
			hints[addr] = e.Hints
		}
	}
	out := make([]*endpoint, 0, len(seen))
	for _, e := range seen {
		out = append(out, e)
	}
	applyTopology(out, hints, nodeName, zone)
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// applyTopology is kube-proxy's topologyModeFromHints and
// availableForTopology: when every ready endpoint has node hints and one is
// for this node, cluster traffic goes to those (PreferSameNode); else when
// every ready endpoint has zone hints and one is for this node's zone, to
// those; otherwise hints are ignored.
func applyTopology(eps []*endpoint, hints map[string]*discovery.EndpointHints, nodeName, zone string) {
	allNode, forNode, allZone, forZone := true, false, true, false
	for _, e := range eps {
		if !e.ready {
			continue
		}
		h := hints[e.addr]
		if h == nil || len(h.ForNodes) == 0 {
			allNode = false
		} else if slices.ContainsFunc(h.ForNodes, func(n discovery.ForNode) bool { return n.Name == nodeName }) {
			forNode = true
		}
		if h == nil || len(h.ForZones) == 0 {
			allZone = false
		} else if zone != "" && slices.ContainsFunc(h.ForZones, func(z discovery.ForZone) bool { return z.Name == zone }) {
			forZone = true
		}
	}
	var keep func(h *discovery.EndpointHints) bool
	switch {
	case allNode && forNode:
		keep = func(h *discovery.EndpointHints) bool {
			return h != nil && slices.ContainsFunc(h.ForNodes, func(n discovery.ForNode) bool { return n.Name == nodeName })
		}
	case allZone && forZone:
		keep = func(h *discovery.EndpointHints) bool {
			return h != nil && slices.ContainsFunc(h.ForZones, func(z discovery.ForZone) bool { return z.Name == zone })
		}
	default:
		return
	}
	for _, e := range eps {
		e.otherTopology = !keep(hints[e.addr])
	}
}

// categorize is kube-proxy's CategorizeEndpoints (topology through
// endpoint.otherTopology, applyTopology):
// cluster endpoints are the ready ones (falling back to serving+terminating when
// none is ready), local endpoints the same among this node's, and reachable the
// union that needs KUBE-SEP chains.
func categorize(sp *servicePort, eps []*endpoint) (cluster, local, reachable []*endpoint, hasAny bool) {
	filter := func(f func(*endpoint) bool) []*endpoint {
		var r []*endpoint
		for _, e := range eps {
			if f(e) {
				r = append(r, e)
			}
		}
		return r
	}
	if sp.usesClusterEndpoints() {
		cluster = filter(func(e *endpoint) bool { return e.ready && !e.otherTopology })
		if len(cluster) == 0 {
			cluster = filter(func(e *endpoint) bool { return e.serving && e.terminating && !e.otherTopology })
		}
		hasAny = len(cluster) > 0
	}
	if !sp.usesLocalEndpoints() {
		return cluster, nil, cluster, hasAny
	}
	var localReady, localServingTerminating bool
	for _, e := range eps {
		if e.ready {
			hasAny = true
			localReady = localReady || e.local
		} else if e.serving && e.terminating {
			hasAny = true
			localServingTerminating = localServingTerminating || e.local
		}
	}
	servingTerminating := false
	if localReady {
		local = filter(func(e *endpoint) bool { return e.local && e.ready })
	} else if localServingTerminating {
		servingTerminating = true
		local = filter(func(e *endpoint) bool { return e.local && e.serving && e.terminating })
	}
	if !sp.usesClusterEndpoints() {
		return nil, local, local, hasAny
	}
	if !servingTerminating {
		// local holds only ready endpoints, all of which are in cluster.
		return cluster, local, cluster, hasAny
	}
	merged := map[string]*endpoint{}
	for _, e := range cluster {
		merged[e.addr] = e
	}
	for _, e := range local {
		merged[e.addr] = e
	}
	for _, e := range merged {
		reachable = append(reachable, e)
	}
	sort.Slice(reachable, func(i, j int) bool { return reachable[i].addr < reachable[j].addr })
	return cluster, local, reachable, hasAny
}
