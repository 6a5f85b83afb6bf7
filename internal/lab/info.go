package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/proc"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Addresses the lab's server runs with (minikit server's defaults).
const (
	ServiceCIDR = "10.96.0.0/12"
	ClusterCIDR = "10.244.0.0/16"
	ClusterDNS  = "10.96.0.10"
	// KubernetesIP is the default/kubernetes Service's ClusterIP, the first
	// of ServiceCIDR.
	KubernetesIP = "10.96.0.1"
)

// Info is what `lab up -o json`, `lab status -o json` and `lab list -o json`
// print: where the lab is, how to reach its API, and every address in it.
type Info struct {
	Name    string `json:"name"`
	Dir     string `json:"dir"`
	Nodes   int    `json:"nodes"`
	Running bool   `json:"running"` // every process the lab started runs
	// Kubeconfig is the lab's own kubeconfig; UserKubeconfig the user's
	// ~/.kube/config that holds its Context too.
	Kubeconfig     string `json:"kubeconfig"`
	Context        string `json:"context"`
	UserKubeconfig string `json:"userKubeconfig,omitempty"`
	// APIServer is the API from this machine (the loopback forwarder),
	// InternalAPIServer from inside the lab (node1's underlay address).
	APIServer         string `json:"apiServer"`
	InternalAPIServer string `json:"internalAPIServer"`
	// Servers are the nodes running `minikit server` (node1 up); with more
	// than one they form an HA control plane on an embedded etcd, and the
	// forwarder fails over among them.
	Servers          []string `json:"servers"`
	Underlay         string   `json:"underlay"`
	ServiceCIDR      string   `json:"serviceCIDR"`
	ClusterCIDR      string   `json:"clusterCIDR"`
	ClusterDNS       string   `json:"clusterDNS"`
	LoadBalancerPool string   `json:"loadBalancerPool"`
	// IPFamily is the lab's (ipv4, dual or ipv6); a dual-stack lab's IPv6
	// ranges are beside the IPv4 ones: each node's IPv6 address is on
	// Underlay6, Services get a ClusterIP of ServiceCIDR6, pods an address of
	// ClusterCIDR6. An IPv6 lab's ServiceCIDR, ClusterCIDR and ClusterDNS are
	// IPv6, its nodes' InternalIPs on Underlay6.
	IPFamily     string `json:"ipFamily,omitempty"`
	Underlay6    string `json:"underlay6,omitempty"`
	ServiceCIDR6 string `json:"serviceCIDR6,omitempty"`
	ClusterCIDR6 string `json:"clusterCIDR6,omitempty"`
	// PodNetwork is the nodes' --pod-network at lab up (host-gw or vxlan).
	PodNetwork string `json:"podNetwork,omitempty"`
	// Topology is the underlay's shape (flat or routed); a routed lab's
	// node2 and up are on Underlay2, reached through the router namespace
	// (Router: its address on each segment).
	Topology  string     `json:"topology,omitempty"`
	Underlay2 string     `json:"underlay2,omitempty"`
	Router    *HostInfo  `json:"router,omitempty"`
	Hosts     []HostInfo `json:"hosts"`
}

// HostInfo is a host of the lab.
type HostInfo struct {
	Name    string `json:"name"`
	Role    string `json:"role"` // node, client, external, etcd (--datastore etcd) or forwarder
	Address string `json:"address"`
	Netns   string `json:"netns,omitempty"`
	PodCIDR string `json:"podCIDR,omitempty"` // nodes, from their Node object
	// PodCIDRs are a dual-stack node's pod CIDRs of both families (its
	// Node's spec.podCIDRs, PodCIDR first); empty when it has one.
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	PID      int      `json:"pid,omitempty"`
	Running  bool     `json:"running"`
}

// Info describes the lab from its state; with withAPI, the nodes' pod CIDRs
// are read from the API (left out when it does not answer).
func (st State) Info(ctx context.Context, withAPI bool) Info {
	subnet, _ := netip.ParsePrefix(st.Subnet)
	kc := filepath.Join(st.Dir, "kubeconfig")
	in := Info{Name: st.Name, Dir: st.Dir, Nodes: st.Nodes, Running: true,
		Kubeconfig: kc, Context: ContextName(st.Name), UserKubeconfig: st.UserKubeconfig,
		Underlay: st.Subnet, ServiceCIDR: ServiceCIDR, ClusterCIDR: ClusterCIDR, ClusterDNS: ClusterDNS}
	if st.APIPort != 0 {
		in.APIServer = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(st.APIPort))
	}
	in.PodNetwork, in.Topology, in.Underlay2 = st.PodNetwork, st.Topology, st.Subnet2
	in.IPFamily = st.IPFamily
	if in.IPFamily == "" {
		in.IPFamily = IPFamilyIPv4
	}
	switch in.IPFamily {
	case IPFamilyDual:
		in.Underlay6, in.ServiceCIDR6, in.ClusterCIDR6 = Subnet6.String(), ServiceCIDR6.String(), PodCIDR6.String()
	case IPFamilyIPv6:
		// The cluster's ranges are IPv6 alone; the IPv4 underlay stays for
		// the lab's plumbing.
		in.Underlay6 = Subnet6.String()
		in.ServiceCIDR, in.ClusterCIDR = ServiceCIDR6.String(), PodCIDR6.String()
		in.ClusterDNS = ClusterDNS6().String()
	}
	if sub2, err := netip.ParsePrefix(st.Subnet2); err == nil && subnet.IsValid() {
		in.Router = &HostInfo{Name: Router, Role: Router, Netns: NS(st.Name, Router),
			Address: routerAddr(subnet).String() + "," + routerAddr(sub2).String()}
	}
	for i := 1; i <= max(st.Servers, 1); i++ {
		in.Servers = append(in.Servers, nodeName(i))
	}
	if subnet.IsValid() {
		in.InternalAPIServer = "https://" + net.JoinHostPort(hostAddr(subnet, nodeName(1)).String(), strconv.Itoa(APIPort))
		in.LoadBalancerPool = lbPool(subnet)
		switch st.IPFamily {
		case IPFamilyDual:
			in.LoadBalancerPool += "," + lbPool6()
		case IPFamilyIPv6:
			in.LoadBalancerPool = lbPool6()
		}
	}
	cidrs := map[string][]string{}
	if withAPI {
		cidrs = podCIDRs(ctx, kc)
	}
	var hosts []string
	for h := range st.Addresses {
		hosts = append(hosts, h)
	}
	sort.Slice(hosts, func(i, j int) bool { return hostOrder(hosts[i]) < hostOrder(hosts[j]) })
	for _, h := range append(hosts, EtcdHost, "forwarder") {
		hi := HostInfo{Name: h, Address: st.Addresses[h], Netns: NS(st.Name, h)}
		if c := cidrs[h]; len(c) > 0 {
			hi.PodCIDR = c[0]
			if len(c) > 1 {
				hi.PodCIDRs = c
			}
		}
		switch {
		case h == "forwarder":
			hi.Role, hi.Address, hi.Netns = "forwarder", strings.TrimPrefix(in.APIServer, "https://"), ""
		case h == EtcdHost:
			hi.Role, hi.Netns = EtcdHost, NS(st.Name, External)
			hi.Address = net.JoinHostPort(st.Addresses[External], strconv.Itoa(EtcdClientPort))
		case h == Client || h == External:
			hi.Role = h
		default:
			hi.Role = "node"
		}
		if pid, ok := st.PIDs[h]; ok {
			hi.PID = pid
			hi.Running = pid > 0 && proc.Alive(pid) && st.owns(h, pid)
			in.Running = in.Running && hi.Running
		} else if h == "forwarder" || h == EtcdHost {
			continue
		}
		in.Hosts = append(in.Hosts, hi)
	}
	return in
}

// hostOrder sorts nodes by number, then the client, the external host.
func hostOrder(h string) int {
	switch h {
	case Client:
		return 1000
	case External:
		return 1001
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(h, "node"))
	return n
}

// lbPool is a lab's LoadBalancer address pool on subnet: .240-.250.
func lbPool(subnet netip.Prefix) string {
	return subnetAddr(subnet, 240).String() + "-" + subnetAddr(subnet, 250).String()
}

// subnetAddr is the address n of subnet (its host part added to the last
// octet, as a Vagrant network numbers its hosts).
func subnetAddr(subnet netip.Prefix, n byte) netip.Addr {
	a := subnet.Masked().Addr().As4()
	a[3] += n
	return netip.AddrFrom4(a)
}

// podCIDRs reads each node's spec.podCIDR through the lab's kubeconfig.
func podCIDRs(ctx context.Context, kubeconfig string) map[string][]string {
	out := map[string][]string{}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return out
	}
	rc.Timeout = 3 * time.Second
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return out
	}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return out
	}
	for _, n := range nodes.Items {
		out[n.Name] = n.Spec.PodCIDRs
		if len(n.Spec.PodCIDRs) == 0 && n.Spec.PodCIDR != "" {
			out[n.Name] = []string{n.Spec.PodCIDR}
		}
	}
	return out
}

// Info describes the running lab, reading its nodes' pod CIDRs from the API.
func (l *Lab) Info(ctx context.Context) Info { return l.state.Info(ctx, true) }

// PrintInfo prints a lab as `lab up` and `lab status` show it.
func PrintInfo(w io.Writer, in Info) {
	fmt.Fprintf(w, "lab %q (%d nodes) in %s\n", in.Name, in.Nodes, in.Dir)
	for _, h := range in.Hosts {
		state := "-"
		if h.PID != 0 {
			state = "stopped"
			if h.Running {
				state = "running (pid " + strconv.Itoa(h.PID) + ")"
			}
		}
		if h.Role == EtcdHost {
			fmt.Fprintf(w, "  %-9s %-21s netns %-16s %s  (external etcd: the server's datastore)\n", h.Name, h.Address, h.Netns, state)
			continue
		}
		if h.Role == "forwarder" {
			fmt.Fprintf(w, "  %-9s %-21s %-22s %s\n", h.Name, h.Address, "root netns (loopback)", state)
			continue
		}
		extra := ""
		if len(h.PodCIDRs) > 1 {
			extra = "  pods " + strings.Join(h.PodCIDRs, " ")
		} else if h.PodCIDR != "" {
			extra = "  pods " + h.PodCIDR
		}
		fmt.Fprintf(w, "  %-9s %-21s netns %-16s %s%s\n", h.Name, h.Address, h.Netns, state, extra)
	}
	fmt.Fprintf(w, "API: %s (inside the lab: %s)\n", in.APIServer, in.InternalAPIServer)
	if len(in.Servers) > 1 {
		fmt.Fprintf(w, "HA control plane: %s (embedded etcd)\n", strings.Join(in.Servers, ", "))
	}
	fmt.Fprintf(w, "services %s (DNS %s), pods %s, LoadBalancer pool %s\n", in.ServiceCIDR, in.ClusterDNS, in.ClusterCIDR, in.LoadBalancerPool)
	switch in.IPFamily {
	case IPFamilyDual:
		fmt.Fprintf(w, "dual-stack: IPv6 underlay %s, services %s, pods %s\n", in.Underlay6, in.ServiceCIDR6, in.ClusterCIDR6)
	case IPFamilyIPv6:
		fmt.Fprintf(w, "IPv6 single-stack: nodes' InternalIPs on the IPv6 underlay %s (the IPv4 one carries the lab's plumbing)\n", in.Underlay6)
	}
	if in.Router != nil {
		fmt.Fprintf(w, "routed underlay: %s and %s joined by %s (netns %s, %s)\n", in.Underlay, in.Underlay2, in.Router.Name, in.Router.Netns, in.Router.Address)
	}
	if in.PodNetwork != "" && in.PodNetwork != "host-gw" {
		fmt.Fprintf(w, "pod network %s\n", in.PodNetwork)
	}
	fmt.Fprintf(w, "kubeconfig: %s\n", in.Kubeconfig)
	if in.UserKubeconfig != "" {
		fmt.Fprintf(w, "context %s merged into %s\n", in.Context, in.UserKubeconfig)
	}
}
