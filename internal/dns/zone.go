package dns

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// serviceKind is how a Service is answered.
type serviceKind int

const (
	kindClusterIP serviceKind = iota
	kindHeadless
	kindExternal
)

// svcPort is a port as DNS sees it: name and protocol lowercase; port -1 stands
// for "no ports" (an EndpointSlice without ports), which answers A but never SRV.
type svcPort struct {
	name, proto string
	port        int32
}

type endpoint struct {
	name  string // hostname, or the dashed IP
	addr  netip.Addr
	ports []svcPort
}

type service struct {
	name, ns   string
	kind       serviceKind
	clusterIPs []netip.Addr
	ports      []svcPort
	external   string // ExternalName target, fully qualified
	endpoints  []endpoint
}

// ptrTarget is one PTR answer, relative to the zone: "svc.ns.svc" or "ep.svc.ns.svc".
type ptrTarget string

// snapshot is the whole cluster zone at one moment. It is built in full from the
// listed objects and never changed afterwards, so readers need no locks.
type snapshot struct {
	synced     bool
	serial     uint32
	namespaces map[string]bool
	services   map[string]*service // "ns/name"
	clusterIP  map[netip.Addr]ptrTarget
	endpointIP map[netip.Addr][]ptrTarget
	podIPs     map[string]map[netip.Addr]bool // ns -> primary podIPs; only when pods are watched
	podNS      map[netip.Addr]string          // any pod IP -> namespace, for autopath
	dnsIPs     []netip.Addr                   // ClusterIPs of kube-system/kube-dns
}

func (s *snapshot) service(ns, name string) *service { return s.services[ns+"/"+name] }

// buildSnapshot computes the zone from the objects. Services are taken in
// namespace/name order so that "the first service" of a shared ClusterIP is stable.
func buildSnapshot(o Objects, synced bool, now time.Time, watchPods bool) *snapshot {
	s := &snapshot{synced: synced, serial: uint32(now.Unix()),
		namespaces: make(map[string]bool, len(o.Namespaces)),
		services:   make(map[string]*service, len(o.Services)),
		clusterIP:  make(map[netip.Addr]ptrTarget, len(o.Services)),
		endpointIP: map[netip.Addr][]ptrTarget{},
	}
	for _, ns := range o.Namespaces {
		s.namespaces[strings.ToLower(ns.Name)] = true
	}
	svcs := slices.Clone(o.Services)
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, in := range svcs {
		svc := &service{name: strings.ToLower(in.Name), ns: strings.ToLower(in.Namespace)}
		switch {
		case in.Spec.Type == corev1.ServiceTypeExternalName:
			svc.kind = kindExternal
			svc.external = strings.ToLower(in.Spec.ExternalName)
			if svc.external == "" {
				continue
			}
			if !strings.HasSuffix(svc.external, ".") {
				svc.external += "."
			}
		case in.Spec.ClusterIP == corev1.ClusterIPNone:
			svc.kind = kindHeadless
		default:
			ips := in.Spec.ClusterIPs
			if len(ips) == 0 && in.Spec.ClusterIP != "" {
				ips = []string{in.Spec.ClusterIP}
			}
			for _, ip := range ips {
				if a, err := netip.ParseAddr(ip); err == nil {
					svc.clusterIPs = append(svc.clusterIPs, a.Unmap())
				}
			}
		}
		for _, p := range in.Spec.Ports {
			svc.ports = append(svc.ports, svcPort{name: strings.ToLower(p.Name), proto: protoName(p.Protocol), port: p.Port})
		}
		s.services[svc.ns+"/"+svc.name] = svc
		for _, ip := range svc.clusterIPs {
			if _, taken := s.clusterIP[ip]; !taken {
				s.clusterIP[ip] = ptrTarget(svc.name + "." + svc.ns + ".svc")
			}
		}
		if svc.ns == "kube-system" && svc.name == "kube-dns" {
			s.dnsIPs = svc.clusterIPs
		}
	}
	sl := slices.Clone(o.EndpointSlices)
	slices.SortFunc(sl, func(a, b *discoveryv1.EndpointSlice) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, es := range sl {
		svc := s.service(strings.ToLower(es.Namespace), strings.ToLower(es.Labels[discoveryv1.LabelServiceName]))
		if svc == nil || svc.kind == kindExternal {
			continue
		}
		ports := make([]svcPort, 0, len(es.Ports))
		for _, p := range es.Ports {
			sp := svcPort{proto: "tcp", port: -1}
			if p.Name != nil {
				sp.name = strings.ToLower(*p.Name)
			}
			if p.Protocol != nil {
				sp.proto = protoName(*p.Protocol)
			}
			if p.Port != nil {
				sp.port = *p.Port
			}
			ports = append(ports, sp)
		}
		if len(ports) == 0 {
			ports = append(ports, svcPort{port: -1})
		}
		for _, ep := range es.Endpoints {
			// Kubernetes' EndpointSlice controller already folds
			// publishNotReadyAddresses into ready; nil means ready.
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				addr = addr.Unmap()
				name := dashedIP(addr)
				if ep.Hostname != nil && *ep.Hostname != "" {
					name = strings.ToLower(*ep.Hostname)
				}
				svc.endpoints = append(svc.endpoints, endpoint{name: name, addr: addr, ports: ports})
				s.endpointIP[addr] = append(s.endpointIP[addr], ptrTarget(name+"."+svc.name+"."+svc.ns+".svc"))
			}
		}
	}
	if watchPods {
		s.podIPs = map[string]map[netip.Addr]bool{}
		s.podNS = map[netip.Addr]string{}
		for _, p := range o.Pods {
			if p.DeletionTimestamp != nil {
				continue
			}
			ns := strings.ToLower(p.Namespace)
			// Verified pod records know the primary podIP only, as
			// CoreDNS's pod index holds status.podIP alone: a dual-stack
			// pod's address of the other family is NXDOMAIN there.
			if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
				if s.podIPs[ns] == nil {
					s.podIPs[ns] = map[netip.Addr]bool{}
				}
				s.podIPs[ns][a.Unmap()] = true
			}
			for _, ip := range p.Status.PodIPs {
				if a, err := netip.ParseAddr(ip.IP); err == nil {
					s.podNS[a.Unmap()] = ns
				}
			}
		}
	}
	return s
}

func protoName(p corev1.Protocol) string {
	if p == "" {
		return "tcp"
	}
	return strings.ToLower(string(p))
}

// dashedIP is CoreDNS's endpoint name for an address without a hostname:
// 172-0-0-2, and for IPv6 5678-abcd--1 (a trailing dash gets a 0 appended).
func dashedIP(a netip.Addr) string {
	if a.Is4() {
		return strings.ReplaceAll(a.String(), ".", "-")
	}
	s := strings.ReplaceAll(a.String(), ":", "-")
	if strings.HasSuffix(s, "-") {
		s += "0"
	}
	return s
}
