package dns

import (
	"bufio"
	"bytes"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Limits the kubelet applies to a pod's resolv.conf (pkg/kubelet/network/dns,
// with ExpandedDNSConfig on by default).
const (
	maxNameservers     = 3
	maxSearchPaths     = 32
	maxSearchListChars = 2048
	maxSearchLen       = 253 // longer search domains make glibc 2.28 abort()
)

// ResolvConf renders a pod's /etc/resolv.conf the way the kubelet composes it
// from the pod's dnsPolicy and dnsConfig (kubelet pkg/kubelet/network/dns at
// v1.37.2; docs/dns-conformance.md §2):
//
//   - ClusterFirst (the default): nameserver clusterDNS, search
//     <ns>.svc.<zone> svc.<zone> <zone> plus the host's search domains,
//     options ndots:5. A hostNetwork pod with ClusterFirst gets Default, and
//     so does every pod when clusterDNS is not valid (the kubelet's
//     "MissingClusterDNS" fallback).
//   - ClusterFirstWithHostNet: ClusterFirst, hostNetwork or not.
//   - Default: the node's resolv.conf (hostResolv): nameservers, search, options.
//   - None: only what dnsConfig gives.
//
// dnsConfig is then merged in: nameservers and searches appended without
// duplicates, options merged by name with the pod's value winning. Finally
// the kubelet's limits: 3 nameservers, 32 search domains / 2048 characters,
// no search domain over 253 characters.
func ResolvConf(pod *corev1.Pod, clusterDNS netip.Addr, zone string, hostResolv []byte) []byte {
	zone = strings.TrimSuffix(zone, ".")
	if zone == "" {
		zone = "cluster.local"
	}
	host := parseResolvConf(hostResolv)
	var servers, search, options []string
	switch podDNSType(pod, clusterDNS) {
	case corev1.DNSClusterFirst:
		servers = []string{clusterDNS.String()}
		search = dedup(append([]string{pod.Namespace + ".svc." + zone, "svc." + zone, zone}, host.search...))
		options = []string{"ndots:5"}
	case corev1.DNSDefault:
		servers, search, options = host.servers, host.search, host.options
	}
	if c := pod.Spec.DNSConfig; c != nil {
		servers = dedup(append(servers, c.Nameservers...))
		search = dedup(append(search, c.Searches...))
		options = mergeOptions(options, c.Options)
	}
	if len(servers) > maxNameservers {
		servers = servers[:maxNameservers]
	}
	search = fitSearch(search)

	var b bytes.Buffer
	for _, s := range servers {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(search) > 0 {
		b.WriteString("search " + strings.Join(search, " ") + "\n")
	}
	if len(options) > 0 {
		b.WriteString("options " + strings.Join(options, " ") + "\n")
	}
	return b.Bytes()
}

// podDNSType is the kubelet's getPodDNSType, with the MissingClusterDNS
// fallback folded in: the result is ClusterFirst, Default or None.
func podDNSType(pod *corev1.Pod, clusterDNS netip.Addr) corev1.DNSPolicy {
	t := corev1.DNSClusterFirst
	switch pod.Spec.DNSPolicy {
	case corev1.DNSNone:
		return corev1.DNSNone
	case corev1.DNSDefault:
		return corev1.DNSDefault
	case corev1.DNSClusterFirstWithHostNet:
	default: // ClusterFirst or unset
		if pod.Spec.HostNetwork {
			t = corev1.DNSDefault
		}
	}
	if t == corev1.DNSClusterFirst && !clusterDNS.IsValid() {
		return corev1.DNSDefault
	}
	return t
}

type hostDNS struct{ servers, search, options []string }

// parseResolvConf reads nameserver, search (and domain) and options lines;
// the last search/domain line wins, as in glibc.
func parseResolvConf(b []byte) hostDNS {
	var h hostDNS
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			h.servers = append(h.servers, f[1])
		case "search", "domain":
			h.search = nil
			for _, s := range f[1:] {
				if s != "." {
					h.search = append(h.search, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			h.options = append(h.options, f[1:]...)
		}
	}
	return h
}

func dedup(in []string) []string {
	seen := map[string]bool{}
	out := in[:0:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// mergeOptions merges by option name; the pod's value wins. Order is kept
// stable (the kubelet's map makes it random): existing options first.
func mergeOptions(base []string, pod []corev1.PodDNSConfigOption) []string {
	out := append([]string(nil), base...)
	index := map[string]int{}
	for i, o := range out {
		index[strings.SplitN(o, ":", 2)[0]] = i
	}
	for _, o := range pod {
		s := o.Name
		if o.Value != nil {
			s += ":" + *o.Value
		}
		if i, ok := index[o.Name]; ok {
			out[i] = s
			continue
		}
		index[o.Name] = len(out)
		out = append(out, s)
	}
	return out
}

// fitSearch applies the kubelet's formDNSSearchFitsLimits.
func fitSearch(search []string) []string {
	if len(search) > maxSearchPaths {
		search = search[:maxSearchPaths]
	}
	out := search[:0:0]
	for _, s := range search {
		if len(s) <= maxSearchLen {
			out = append(out, s)
		}
	}
	for len(out) > 0 && len(strings.Join(out, " ")) > maxSearchListChars {
		out = out[:len(out)-1]
	}
	return out
}

// SearchDomains are the search domains of a resolv.conf (the node's, for
// Config.HostSearch).
func SearchDomains(resolvConf []byte) []string { return parseResolvConf(resolvConf).search }
