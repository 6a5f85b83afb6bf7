package nft

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
	"time"
)

// The corpus: transactions in the shapes kube-proxy v1.37.2's nftables
// proxier writes (pkg/proxy/nftables/proxier.go), built by hand here from its
// rule texts so the backends can be checked against each other without the
// proxy.

func hashed(prefix, name string) string {
	h := sha256.Sum256([]byte(name))
	return prefix + base32.StdEncoding.EncodeToString(h[:])[:8] + "-" + name
}

const (
	masqMark    = "0x00004000"
	masqRule    = "mark set mark or " + masqMark
	serviceCIDR = "10.96.0.0/12"
	clusterCIDR = "10.244.0.0/16"
	nodeIP      = "192.168.56.10"
)

// baseTx is the setup part of a full sync (setupNFTables + the flushes).
func baseTx(tx *Transaction, first bool) {
	tx.Add(&Table{Family: IPv4Family, Name: "kube-proxy", Comment: "rules for kube-proxy"})
	type bc struct {
		name, typ, hook string
		prio            int
	}
	bases := []bc{
		{"filter-prerouting-pre-dnat", "filter", "prerouting", -110},
		{"filter-output-pre-dnat", "filter", "output", -110},
		{"filter-input", "filter", "input", 0},
		{"filter-forward", "filter", "forward", 0},
		{"filter-output", "filter", "output", 0},
		{"nat-prerouting", "nat", "prerouting", -100},
		{"nat-output", "nat", "output", -100},
		{"nat-postrouting", "nat", "postrouting", 100},
	}
	if first {
		for _, b := range bases {
			tx.Add(&Chain{Name: b.name})
			tx.Delete(&Chain{Name: b.name})
		}
	}
	for _, b := range bases {
		c := &Chain{Name: b.name, Type: b.typ, Hook: b.hook, Priority: b.prio}
		tx.Add(c)
		tx.Flush(c)
	}
	jumps := []struct{ dst, src, extra string }{
		{"nodeport-endpoints-check", "filter-input", "ct state new"},
		{"service-endpoints-check", "filter-input", "ct state new"},
		{"service-endpoints-check", "filter-forward", "ct state new"},
		{"service-endpoints-check", "filter-output", "ct state new"},
		{"firewall-check", "filter-prerouting-pre-dnat", "ct state new"},
		{"firewall-check", "filter-output-pre-dnat", "ct state new"},
		{"services", "nat-output", ""},
		{"services", "nat-prerouting", ""},
		{"masquerading", "nat-postrouting", ""},
		{"cluster-ips-check", "filter-forward", "ct state new"},
		{"cluster-ips-check", "filter-output", "ct state new"},
	}
	created := map[string]bool{}
	ensure := func(name string) {
		if created[name] {
			return
		}
		created[name] = true
		tx.Add(&Chain{Name: name})
		tx.Flush(&Chain{Name: name})
	}
	for _, j := range jumps {
		ensure(j.dst)
		tx.Add(&Rule{Chain: j.src, Rule: strings.TrimSpace(j.extra + " jump " + j.dst)})
	}
	for _, c := range []string{"services", "cluster-ips-check", "masquerading"} {
		ensure(c)
	}
	tx.Add(&Set{Name: "hairpin-connections", Type: "ipv4_addr . ipv4_addr . inet_proto . inet_service", Comment: "service hairpin connections"})
	tx.Add(&Rule{Chain: "masquerading", Rule: "mark and " + masqMark + " != 0 mark set mark xor " + masqMark + " masquerade fully-random"})
	tx.Add(&Rule{Chain: "masquerading", Rule: "ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random"})
	tx.Add(&Set{Name: "cluster-ips", Type: "ipv4_addr", Comment: "Active ClusterIPs"})
	tx.Add(&Rule{Chain: "cluster-ips-check", Rule: "ip daddr @cluster-ips reject", Comment: "Reject traffic to invalid ports of ClusterIPs"})
	tx.Add(&Rule{Chain: "cluster-ips-check", Rule: "ip daddr { " + serviceCIDR + " } drop", Comment: "Drop traffic to unallocated ClusterIPs"})
	tx.Add(&Set{Name: "nodeport-ips", Type: "ipv4_addr", Comment: "IPs that accept NodePort traffic"})
	tx.Flush(&Set{Name: "nodeport-ips"})
	tx.Add(&Element{Set: "nodeport-ips", Key: []string{nodeIP}})
	tx.Add(&Map{Name: "no-endpoint-services", Type: "ipv4_addr . inet_proto . inet_service : verdict", Comment: "vmap to drop or reject packets to services with no endpoints"})
	tx.Add(&Map{Name: "no-endpoint-nodeports", Type: "inet_proto . inet_service : verdict", Comment: "vmap to drop or reject packets to service nodeports with no endpoints"})
	tx.Add(&Chain{Name: "reject-chain", Comment: "helper for @no-endpoint-services / @no-endpoint-nodeports"})
	tx.Flush(&Chain{Name: "reject-chain"})
	tx.Add(&Rule{Chain: "reject-chain", Rule: "reject"})
	tx.Add(&Rule{Chain: "service-endpoints-check", Rule: "ip daddr . meta l4proto . th dport vmap @no-endpoint-services"})
	tx.Add(&Rule{Chain: "nodeport-endpoints-check", Rule: "ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports"})
	tx.Add(&Map{Name: "localhost-nodeport-reject-ports", Type: "inet_proto . inet_service : verdict", Comment: "localhost NodePorts rejected by kube-proxy"})
	tx.Delete(&Map{Name: "localhost-nodeport-reject-ports"})
	tx.Add(&Map{Name: "firewall-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict", Comment: "destinations that are subject to LoadBalancerSourceRanges"})
	ensure("firewall-check")
	tx.Add(&Rule{Chain: "firewall-check", Rule: "ip daddr . meta l4proto . th dport vmap @firewall-ips"})
	tx.Add(&Map{Name: "service-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict", Comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic"})
	tx.Add(&Map{Name: "service-nodeports", Type: "inet_proto . inet_service : verdict", Comment: "NodePort traffic"})
	tx.Add(&Rule{Chain: "services", Rule: "ip daddr @cluster-ips ip saddr != " + clusterCIDR + " " + masqRule, Comment: "masquerade clusterIP traffic from outside cluster"})
	tx.Add(&Rule{Chain: "services", Rule: "ip daddr . meta l4proto . th dport vmap @service-ips"})
	tx.Add(&Rule{Chain: "services", Rule: "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"})
	for _, s := range []string{"cluster-ips", "service-ips", "firewall-ips", "no-endpoint-services", "no-endpoint-nodeports", "service-nodeports", "hairpin-connections"} {
		if strings.Contains(s, "ips") && s != "cluster-ips" || strings.HasPrefix(s, "no-") || s == "service-nodeports" {
			tx.Flush(&Map{Name: s})
		} else {
			tx.Flush(&Set{Name: s})
		}
	}
}

// svcSpec describes one service port of the synthetic cluster.
type svcSpec struct {
	ns, name, proto, port string
	clusterIP             string
	svcPort               int
	endpoints             []string // ip:port
	nodePort              int      // 0: none
	local                 bool     // externalTrafficPolicy Local
	affinity              bool     // ClientIP
	lbIP                  string
	sourceRanges          []string
	noEndpoints           bool
}

func (s svcSpec) portName() string { return s.ns + "/" + s.name + "/" + s.proto + "/" + s.port }

// serviceTx writes one service port as the proxier does.
func serviceTx(tx *Transaction, s svcSpec) {
	pn := s.portName()
	svcChain := hashed("service-", pn)
	extChain := hashed("external-", pn)
	fwChain := hashed("firewall-", pn)
	localChain := hashed("local-", pn)
	port := fmt.Sprint(s.svcPort)
	tx.Add(&Element{Set: "cluster-ips", Key: []string{s.clusterIP}})
	if s.noEndpoints {
		tx.Add(&Element{Set: "no-endpoint-services", Key: []string{s.clusterIP, s.proto, port}, Value: "goto reject-chain", Comment: pn})
		if s.nodePort != 0 {
			tx.Add(&Element{Set: "no-endpoint-nodeports", Key: []string{s.proto, fmt.Sprint(s.nodePort)}, Value: "goto reject-chain", Comment: pn})
		}
		return
	}
	tx.Add(&Chain{Name: svcChain})
	tx.Flush(&Chain{Name: svcChain})
	external := s.nodePort != 0 || s.lbIP != ""
	if external {
		tx.Add(&Chain{Name: extChain})
		tx.Flush(&Chain{Name: extChain})
	}
	if s.local {
		tx.Add(&Chain{Name: localChain})
		tx.Flush(&Chain{Name: localChain})
	}
	if len(s.sourceRanges) > 0 {
		tx.Add(&Chain{Name: fwChain})
		tx.Flush(&Chain{Name: fwChain})
	}
	var epChains []string
	for _, ep := range s.endpoints {
		if s.affinity {
			c := hashed("endpoint-", pn+"__"+strings.Replace(ep, ":", "/", 1))
			epChains = append(epChains, c)
			tx.Add(&Chain{Name: c})
			tx.Flush(&Chain{Name: c})
		}
		ip, p, _ := strings.Cut(ep, ":")
		tx.Add(&Element{Set: "hairpin-connections", Key: []string{ip, ip, s.proto, p}})
	}
	tx.Add(&Element{Set: "service-ips", Key: []string{s.clusterIP, s.proto, port}, Value: "goto " + svcChain})
	if s.nodePort != 0 {
		tx.Add(&Element{Set: "service-nodeports", Key: []string{s.proto, fmt.Sprint(s.nodePort)}, Value: "goto " + extChain})
	}
	if s.lbIP != "" {
		tx.Add(&Element{Set: "service-ips", Key: []string{s.lbIP, s.proto, port}, Value: "goto " + extChain})
		if len(s.sourceRanges) > 0 {
			tx.Add(&Element{Set: "firewall-ips", Key: []string{s.lbIP, s.proto, port}, Value: "goto " + fwChain, Comment: pn})
		}
	}
	if external {
		if !s.local {
			tx.Add(&Rule{Chain: extChain, Rule: masqRule, Comment: "masquerade"})
			tx.Add(&Rule{Chain: extChain, Rule: "goto " + svcChain})
		} else {
			tx.Add(&Rule{Chain: extChain, Rule: "ip saddr " + clusterCIDR + " goto " + svcChain, Comment: "short-circuit pod traffic"})
			tx.Add(&Rule{Chain: extChain, Rule: "fib saddr type local " + masqRule, Comment: "masquerade local traffic"})
			tx.Add(&Rule{Chain: extChain, Rule: "fib saddr type local goto " + svcChain, Comment: "short-circuit local traffic"})
			tx.Add(&Rule{Chain: extChain, Rule: "goto " + localChain})
		}
	}
	if len(s.sourceRanges) > 0 {
		tx.Add(&Rule{Chain: fwChain, Rule: "ip saddr != { " + strings.Join(s.sourceRanges, ", ") + " } drop"})
	}
	dnatChains := []string{svcChain}
	if s.local {
		dnatChains = append(dnatChains, localChain)
	}
	for _, ch := range dnatChains {
		switch {
		case s.affinity:
			var elems []string
			for i, ep := range s.endpoints {
				set := hashed("affinity-", pn+"__"+strings.Replace(ep, ":", "/", 1))
				if ch == svcChain {
					tx.Add(&Set{Name: set, Type: "ipv4_addr", Flags: []string{"dynamic", "timeout"}, Timeout: 10800 * time.Second})
				}
				tx.Add(&Rule{Chain: ch, Rule: "ip saddr @" + set + " goto " + epChains[i]})
				elems = append(elems, fmt.Sprintf("%d : goto %s", i, epChains[i]))
			}
			tx.Add(&Rule{Chain: ch, Rule: fmt.Sprintf("numgen random mod %d vmap { %s }", len(s.endpoints), strings.Join(elems, " , "))})
		case len(s.endpoints) == 1:
			tx.Add(&Rule{Chain: ch, Rule: "meta l4proto " + s.proto + " dnat to " + s.endpoints[0]})
		default:
			var elems []string
			for i, ep := range s.endpoints {
				elems = append(elems, fmt.Sprintf("%d : %s", i, strings.Replace(ep, ":", " . ", 1)))
			}
			tx.Add(&Rule{Chain: ch, Rule: fmt.Sprintf("meta l4proto %s dnat ip addr . port to numgen random mod %d map { %s }", s.proto, len(s.endpoints), strings.Join(elems, " , "))})
		}
	}
	if s.affinity {
		for i, ep := range s.endpoints {
			set := hashed("affinity-", pn+"__"+strings.Replace(ep, ":", "/", 1))
			tx.Add(&Rule{Chain: epChains[i], Rule: "update @" + set + " { ip saddr }"})
			tx.Add(&Rule{Chain: epChains[i], Rule: "meta l4proto " + s.proto + " dnat to " + ep})
		}
	}
}

// shapesServices covers every rule shape once.
func shapesServices() []svcSpec {
	return []svcSpec{
		{ns: "default", name: "one", proto: "tcp", port: "http", clusterIP: "10.96.0.10", svcPort: 80, endpoints: []string{"10.244.1.5:8080"}},
		{ns: "default", name: "many", proto: "tcp", port: "", clusterIP: "10.96.0.11", svcPort: 443, endpoints: []string{"10.244.1.5:8443", "10.244.2.7:8443", "10.244.3.9:8443"}, nodePort: 30443},
		{ns: "kube-system", name: "dns", proto: "udp", port: "dns", clusterIP: "10.96.0.53", svcPort: 53, endpoints: []string{"10.244.0.2:53", "10.244.0.3:53"}},
		{ns: "web", name: "sticky", proto: "tcp", port: "http", clusterIP: "10.96.1.1", svcPort: 8080, endpoints: []string{"10.244.1.8:80", "10.244.2.8:80"}, affinity: true},
		{ns: "web", name: "lb", proto: "tcp", port: "https", clusterIP: "10.96.1.2", svcPort: 443, endpoints: []string{"10.244.1.9:443", "10.244.2.9:443"}, nodePort: 31443, local: true, lbIP: "192.168.56.200", sourceRanges: []string{"192.168.0.0/16", "10.0.0.0/8", "203.0.113.7"}},
		{ns: "web", name: "empty", proto: "tcp", port: "http", clusterIP: "10.96.1.3", svcPort: 80, nodePort: 30080, noEndpoints: true},
		{ns: "sctp", name: "assoc", proto: "sctp", port: "s", clusterIP: "10.96.1.4", svcPort: 9999, endpoints: []string{"10.244.1.10:9999"}},
	}
}

// genServices makes n services with eps endpoints each (every tenth with a
// NodePort).
func genServices(n, eps int) []svcSpec {
	out := make([]svcSpec, 0, n)
	for i := 0; i < n; i++ {
		s := svcSpec{ns: fmt.Sprintf("ns%d", i%50), name: fmt.Sprintf("svc%d", i), proto: "tcp", port: "http",
			clusterIP: fmt.Sprintf("10.%d.%d.%d", 96+i/65536, (i/256)%256, i%256), svcPort: 80}
		if i%10 == 0 {
			s.nodePort = 30000 + i%2768
			if i/2768 > 0 {
				s.nodePort = 0
			}
		}
		for j := 0; j < eps; j++ {
			k := i*eps + j
			s.endpoints = append(s.endpoints, fmt.Sprintf("10.%d.%d.%d:8080", 244+k/65536/254, (k/254)%256, k%254+1))
		}
		out = append(out, s)
	}
	return out
}

func fullTx(svcs []svcSpec, first bool) *Transaction {
	tx := &Transaction{}
	baseTx(tx, first)
	for _, s := range svcs {
		serviceTx(tx, s)
	}
	return tx
}
