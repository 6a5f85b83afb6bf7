package dns

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestResolvConf(t *testing.T) {
	host := []byte("# from DHCP\nnameserver 192.168.56.1\nnameserver 8.8.8.8\nsearch lab.example corp.example.\noptions edns0 timeout:2\n")
	dnsIP := netip.MustParseAddr("10.96.0.10")
	ndots := "2"
	long := strings.Repeat("a", 254)
	var many []string
	for i := range 40 {
		many = append(many, "d"+strings.Repeat("x", i%5)+string(rune('a'+i%26))+".example")
	}
	for _, tc := range []struct {
		name      string
		policy    corev1.DNSPolicy
		hostNet   bool
		config    *corev1.PodDNSConfig
		clusterIP netip.Addr
		host      []byte
		want      string
	}{
		{name: "ClusterFirst", policy: corev1.DNSClusterFirst, host: host,
			want: "nameserver 10.96.0.10\nsearch web.svc.cluster.local svc.cluster.local cluster.local lab.example corp.example\noptions ndots:5\n"},
		{name: "unset policy is ClusterFirst", host: host,
			want: "nameserver 10.96.0.10\nsearch web.svc.cluster.local svc.cluster.local cluster.local lab.example corp.example\noptions ndots:5\n"},
		{name: "ClusterFirst, host search duplicates the cluster's", policy: corev1.DNSClusterFirst,
			host: []byte("nameserver 1.1.1.1\nsearch cluster.local other.example\n"),
			want: "nameserver 10.96.0.10\nsearch web.svc.cluster.local svc.cluster.local cluster.local other.example\noptions ndots:5\n"},
		{name: "ClusterFirst on hostNetwork falls back to Default", policy: corev1.DNSClusterFirst, hostNet: true, host: host,
			want: "nameserver 192.168.56.1\nnameserver 8.8.8.8\nsearch lab.example corp.example\noptions edns0 timeout:2\n"},
		{name: "ClusterFirstWithHostNet", policy: corev1.DNSClusterFirstWithHostNet, hostNet: true, host: host,
			want: "nameserver 10.96.0.10\nsearch web.svc.cluster.local svc.cluster.local cluster.local lab.example corp.example\noptions ndots:5\n"},
		{name: "ClusterFirstWithHostNet without hostNetwork", policy: corev1.DNSClusterFirstWithHostNet, host: host,
			want: "nameserver 10.96.0.10\nsearch web.svc.cluster.local svc.cluster.local cluster.local lab.example corp.example\noptions ndots:5\n"},
		{name: "ClusterFirst without cluster DNS (MissingClusterDNS)", policy: corev1.DNSClusterFirst, clusterIP: netip.Addr{}, host: host,
			want: "nameserver 192.168.56.1\nnameserver 8.8.8.8\nsearch lab.example corp.example\noptions edns0 timeout:2\n"},
		{name: "Default", policy: corev1.DNSDefault, host: host,
			want: "nameserver 192.168.56.1\nnameserver 8.8.8.8\nsearch lab.example corp.example\noptions edns0 timeout:2\n"},
		{name: "Default with an empty host file", policy: corev1.DNSDefault, host: nil, want: ""},
		{name: "None with dnsConfig (e2e: configurable pod DNS nameservers)", policy: corev1.DNSNone, host: host,
			config: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"resolv.conf.local"}},
			want:   "nameserver 1.1.1.1\nsearch resolv.conf.local\n"},
		{name: "ClusterFirst + dnsConfig: ndots overridden, options merged", policy: corev1.DNSClusterFirst, host: host,
			config: &corev1.PodDNSConfig{Nameservers: []string{"10.96.0.10", "1.1.1.1"}, Searches: []string{"svc.cluster.local", "extra.example"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &ndots}, {Name: "single-request-reopen"}}},
			want: "nameserver 10.96.0.10\nnameserver 1.1.1.1\nsearch web.svc.cluster.local svc.cluster.local cluster.local lab.example corp.example extra.example\noptions ndots:2 single-request-reopen\n"},
		{name: "at most 3 nameservers", policy: corev1.DNSNone,
			config: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"}},
			want:   "nameserver 1.1.1.1\nnameserver 1.0.0.1\nnameserver 8.8.8.8\n"},
		{name: "search domains over 253 characters dropped; '.' and '_' allowed (KEP-4427)", policy: corev1.DNSNone,
			config: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{long, "_sip.example", "."}},
			want:   "nameserver 1.1.1.1\nsearch _sip.example .\n"},
		{name: "at most 32 search domains", policy: corev1.DNSNone,
			config: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: many},
			want:   "nameserver 1.1.1.1\nsearch " + strings.Join(many[:32], " ") + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p"},
				Spec: corev1.PodSpec{DNSPolicy: tc.policy, HostNetwork: tc.hostNet, DNSConfig: tc.config}}
			ip := dnsIP
			if strings.Contains(tc.name, "MissingClusterDNS") {
				ip = tc.clusterIP
			}
			if got := string(ResolvConf(pod, ip, "cluster.local.", tc.host)); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestResolvConfSearchCharLimit(t *testing.T) {
	var searches []string
	for i := range 20 {
		searches = append(searches, strings.Repeat(string(rune('a'+i)), 200))
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web"},
		Spec: corev1.PodSpec{DNSPolicy: corev1.DNSNone, DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: searches}}}
	out := string(ResolvConf(pod, netip.Addr{}, "cluster.local", nil))
	line := strings.TrimPrefix(strings.Split(out, "\n")[1], "search ")
	if len(line) > maxSearchListChars || len(strings.Fields(line)) != 10 {
		t.Errorf("search line of %d characters, %d domains; want <= %d characters, 10 domains", len(line), len(strings.Fields(line)), maxSearchListChars)
	}
}
