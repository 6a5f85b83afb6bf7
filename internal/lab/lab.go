// Package lab builds "a few VMs" out of network namespaces on one machine: node
// namespaces joined by an underlay bridge that lives in a namespace of its own, a
// client host and an external host, each running the real minikit binary. No lab
// namespace has a route to the machine's uplink, and nothing is created in the root
// namespace: the only thing a lab exposes there is a forwarder on 127.0.0.1 to the
// API, so kubectl works from the user's shell.
package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minikit/minikit/internal/proc"

	"github.com/minikit/minikit/internal/fsutil"
	"github.com/minikit/minikit/internal/netns"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Config describes a lab.
type Config struct {
	Name  string // prefix of every namespace, default "lab"
	Nodes int    // default 2
	// Datastore is the server's store: "bolt" (default) or "etcd", an
	// external etcd the lab runs on its external host.
	Datastore string
	// Servers is how many of the nodes (node1 up) run `minikit server`:
	// 1 (default) on bbolt, or an odd number forming an HA control plane on
	// an etcd embedded in them (node1 --cluster-init, the others --join).
	Servers int
	Dir     string       // state, data dirs, logs, kubeconfig
	Binary  string       // the minikit binary (default: this executable)
	Subnet  netip.Prefix // underlay, default 192.168.56.0/24 like a Vagrant private network
	// APIPort is the loopback port of the forwarder in the root namespace (0 picks one).
	APIPort int
	Logger  *slog.Logger
	// Owner, when set, owns the lab's kubeconfig (mode 0600, so the token
	// stays secret from other users) and can enter the lab's directory.
	Owner *User
	// MergeKubeconfig adds the lab's context minikit-NAME to Owner's
	// ~/.kube/config and makes it current; Down removes it again.
	MergeKubeconfig bool
	// UserKubeconfig is the kubeconfig to merge into instead of Owner's
	// ~/.kube/config (kind create cluster --kubeconfig).
	UserKubeconfig string
	// ProxyMode is every node's --proxy-mode: "iptables" (default) or
	// "nftables".
	ProxyMode string
	// PodNetwork is every node's --pod-network: "host-gw" (default) or
	// "vxlan".
	PodNetwork string
	// Topology is the underlay's shape: TopologyFlat (default), every host on
	// one segment, or TopologyRouted, node2 and up on a second subnet behind
	// a router namespace, where host-gw cannot work.
	Topology string

	// IPFamily is the cluster's: IPFamilyIPv4 (default); IPFamilyDual,
	// where every host also has an IPv6 underlay address (Subnet6), the
	// nodes both InternalIPs and podCIDRs, and Services may be dual-stack;
	// or IPFamilyIPv6, where the cluster is IPv6 only (nodes' InternalIPs,
	// podCIDRs, Services, the API's endpoints and DNS) and the hosts keep
	// their IPv4 underlay address only for the lab's own plumbing (the API
	// forwarder and the external host's upstream DNS), as kind's IPv6
	// clusters' node containers keep Docker's IPv4 address.
	IPFamily string

	// Zones is how many availability zones the nodes spread over (node i in
	// zone-((i-1) mod Zones + 1), its topology.kubernetes.io/zone label);
	// 0 means defaultZones, or one per node in a smaller lab.
	Zones int

	// ControlPlaneTaint taints the nodes labelled
	// node-role.kubernetes.io/control-plane with it (NoSchedule), as
	// kubeadm's mark-control-plane phase and a multi-node kind cluster do,
	// so only the other nodes run pods that do not tolerate it. Off by
	// default: every node runs pods, as on k3s (and a one-node lab must).
	ControlPlaneTaint bool
}

// IP families of a lab.
const (
	IPFamilyIPv4 = "ipv4"
	IPFamilyIPv6 = "ipv6"
	IPFamilyDual = "dual"
)

// The IPv6 ranges of a dual-stack lab (ULA, as kind's): the underlay beside
// 192.168.56.0/24, the service and pod CIDRs beside 10.96.0.0/12 and
// 10.244.0.0/16 (a /64 per node).
var (
	Subnet6      = netip.MustParsePrefix("fd00:56::/64")
	ServiceCIDR6 = netip.MustParsePrefix("fd00:10:96::/112")
	PodCIDR6     = netip.MustParsePrefix("fd00:10:244::/56")
)

// ClusterDNS6 is the cluster DNS address of an IPv6 lab: the tenth address
// of ServiceCIDR6, as kubeadm's (fd00:10:96::a).
func ClusterDNS6() netip.Addr {
	a := ServiceCIDR6.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	return a
}

// MaxNodes is the most nodes a lab has.
const MaxNodes = 50

// defaultZones is how many zones a lab spans unless told: three, as a
// cloud region's clusters commonly do, so a 3-node lab has one node per
// zone and a 6-node lab two.
const defaultZones = 3

// Underlay topologies.
const (
	TopologyFlat   = "flat"
	TopologyRouted = "routed"
)

// Router is the routed topology's router host: a namespace with a leg on each
// segment, forwarding between them.
const Router = "router"

// Host names of a lab besides its nodes.
const (
	Client   = "client"
	External = "external"
)

// State is what a lab persists in Dir/lab.json so `lab down` works after a crash.
type State struct {
	Name       string         `json:"name"`
	Nodes      int            `json:"nodes"`
	Servers    int            `json:"servers,omitempty"`
	Datastore  string         `json:"datastore,omitempty"`
	Dir        string         `json:"dir"`
	Subnet     string         `json:"subnet"`
	Namespaces []string       `json:"namespaces"`
	PIDs       map[string]int `json:"pids"`
	// Starts holds each PID's start time (proc.StartTime), so that down
	// stops the process the lab started and never one that reused its PID.
	Starts map[string]uint64   `json:"starts,omitempty"`
	Args   map[string][]string `json:"args"`
	// ProxyMode is the nodes' --proxy-mode at lab up; each node's recorded
	// Args carry its current one, so lab start and restarts keep it.
	ProxyMode string `json:"proxyMode,omitempty"`
	// PodNetwork is the nodes' --pod-network at lab up (each node's Args
	// carry its current one), Topology the underlay's shape, and Subnet2
	// the routed topology's second segment.
	PodNetwork string `json:"podNetwork,omitempty"`
	Topology   string `json:"topology,omitempty"`
	Subnet2    string `json:"subnet2,omitempty"`
	// IPFamily is Config.IPFamily ("" in a lab from before dual-stack: ipv4).
	IPFamily  string            `json:"ipFamily,omitempty"`
	Addresses map[string]string `json:"addresses"`
	APIPort   int               `json:"apiPort"`
	// Zones is Config.Zones; 0 (a lab from before zones) labels no zone.
	Zones int `json:"zones,omitempty"`
	// ControlPlaneTaint is Config.ControlPlaneTaint.
	ControlPlaneTaint bool `json:"controlPlaneTaint,omitempty"`
	// UserKubeconfig is the user's kubeconfig that Up merged the lab's
	// context into, UserUID its owner, and PrevContext the current context
	// it replaced, which Down restores.
	UserKubeconfig string `json:"userKubeconfig,omitempty"`
	UserUID        int    `json:"userUID,omitempty"`
	PrevContext    string `json:"prevContext,omitempty"`
}

// Lab is a running lab.
type Lab struct {
	cfg   Config
	state State
	log   *slog.Logger
}

func (c *Config) defaults() error {
	if c.Name == "" {
		c.Name = "lab"
	}
	if c.Nodes == 0 {
		c.Nodes = 2
	}
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		return fmt.Errorf("a lab has 1 to %d nodes, not %d", MaxNodes, c.Nodes)
	}
	if c.Servers == 0 {
		c.Servers = 1
	}
	if c.Zones == 0 {
		c.Zones = min(c.Nodes, defaultZones)
	}
	if c.Zones < 1 || c.Zones > c.Nodes {
		return fmt.Errorf("--zones %d: a lab of %d nodes spans 1 to %d zones", c.Zones, c.Nodes, c.Nodes)
	}
	switch {
	case c.Servers < 1 || c.Servers > c.Nodes:
		return fmt.Errorf("--servers %d: a lab of %d nodes has 1 to %d servers", c.Servers, c.Nodes, c.Nodes)
	case c.Servers%2 == 0:
		return fmt.Errorf("--servers %d: etcd needs a majority of its members, so %d servers survive no more failures than %d; use an odd number", c.Servers, c.Servers, c.Servers-1)
	case c.Servers > 7:
		return fmt.Errorf("--servers %d: at most 7 (etcd's recommended largest cluster)", c.Servers)
	}
	switch c.Datastore {
	case "":
		c.Datastore = "bolt"
	case "bolt", "etcd":
	default:
		return fmt.Errorf("unknown datastore %q: want bolt or etcd", c.Datastore)
	}
	if c.Datastore == "etcd" && c.Servers > 1 {
		return fmt.Errorf("--datastore etcd runs one server on an external etcd; --servers %d runs etcd embedded in the servers: choose one", c.Servers)
	}
	if len(c.Name) > 20 || strings.ContainsAny(c.Name, "/ .") {
		return fmt.Errorf("lab name %q must be at most 20 characters without '/', '.' or spaces", c.Name)
	}
	if c.Dir == "" {
		c.Dir = filepath.Join(DefaultDir, c.Name)
	}
	if c.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		c.Binary = exe
	}
	if !c.Subnet.IsValid() {
		c.Subnet = netip.MustParsePrefix("192.168.56.0/24")
	}
	for _, o := range []struct {
		v       *string
		what    string
		allowed []string // the first is the default
	}{
		{&c.ProxyMode, "proxy mode", []string{"iptables", "nftables"}},
		{&c.PodNetwork, "pod network", []string{"host-gw", "vxlan"}},
		{&c.Topology, "topology", []string{TopologyFlat, TopologyRouted}},
		{&c.IPFamily, "IP family", []string{IPFamilyIPv4, IPFamilyDual, IPFamilyIPv6}},
	} {
		switch {
		case *o.v == "":
			*o.v = o.allowed[0]
		case !slices.Contains(o.allowed, *o.v):
			return fmt.Errorf("unknown %s %q: want %s", o.what, *o.v, strings.Join(o.allowed, " or "))
		}
	}
	if c.IPFamily != IPFamilyIPv4 && (c.Topology != TopologyFlat || c.Servers > 1 || c.Datastore == "etcd") {
		return fmt.Errorf("a %s lab is built only with --topology flat and one bbolt server so far", c.IPFamily)
	}
	if c.Topology == TopologyRouted && (c.Subnet.Bits() < 16 || c.Subnet.Bits() > 24 || !c.Subnet.Addr().Is4()) {
		return fmt.Errorf("the routed topology's underlay subnet %s must be an IPv4 prefix of /16 to /24", c.Subnet)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// subnet2 is the routed topology's second segment: the prefix of the
// underlay's size right after it (192.168.57.0/24 after 192.168.56.0/24).
func (c *Config) subnet2() netip.Prefix {
	p := c.Subnet.Masked()
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += 1 << (32 - p.Bits())
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), p.Bits())
}

// subnetOf is the segment a host is on: the routed topology puts node2 and
// up on the second one, node1, the client and the external host on the first.
func (c *Config) subnetOf(host string) netip.Prefix {
	if c.Topology == TopologyRouted && strings.HasPrefix(host, "node") && host != nodeName(1) {
		return c.subnet2()
	}
	return c.Subnet
}

// checkPodNetwork refuses host-gw on a topology whose nodes are not all on
// one segment: a node cannot be the gateway to its pods for a node that does
// not share its segment.
func (c *Config) checkPodNetwork() error {
	if c.PodNetwork != "host-gw" {
		return nil
	}
	if far := c.notAdjacent(); len(far) > 0 {
		return fmt.Errorf("host-gw cannot route pods between nodes that are not on one L2 segment: %s on %s, not on %s's segment %s; "+
			"use --pod-network vxlan (or --topology flat)", strings.Join(far, ", "), c.subnet2(), nodeName(1), c.Subnet.Masked())
	}
	return nil
}

// notAdjacent names the nodes that are not on node1's segment.
func (c *Config) notAdjacent() []string {
	var far []string
	for i := 2; i <= c.Nodes; i++ {
		if c.subnetOf(nodeName(i)) != c.subnetOf(nodeName(1)) {
			far = append(far, nodeName(i))
		}
	}
	return far
}

// NS is the network namespace of a lab host ("node1", "client", "external").
func NS(lab, host string) string { return lab + "-" + host }

func nodeName(i int) string { return "node" + strconv.Itoa(i) }

// hostAddr gives Vagrant-like addresses: nodes from .10, the client .100, the
// external host .200.
func hostAddr(subnet netip.Prefix, host string) netip.Addr {
	var n int
	switch {
	case host == Client:
		n = 100
	case host == External:
		n = 200
	default:
		i, _ := strconv.Atoi(strings.TrimPrefix(host, "node"))
		n = 9 + i
	}
	return subnetAddr(subnet, byte(n))
}

// Addr is a host's underlay address.
func (l *Lab) Addr(host string) netip.Addr { return hostAddr(l.cfg.subnetOf(host), host) }

// Addr6 is a host's IPv6 underlay address in a dual-stack or IPv6 lab
// (invalid in an IPv4 one): the IPv4 address's last number written in the
// IPv6 one's last group, so node1's 192.168.56.10 goes with fd00:56::10.
func (l *Lab) Addr6(host string) netip.Addr {
	if l.cfg.IPFamily == IPFamilyIPv4 {
		return netip.Addr{}
	}
	last := l.Addr(host).As4()[3]
	a, _ := netip.ParseAddr(Subnet6.Addr().String() + strconv.Itoa(int(last)))
	return a
}

// IPFamily is the lab's IP family (IPFamilyIPv4, IPFamilyDual or
// IPFamilyIPv6).
func (l *Lab) IPFamily() string { return l.cfg.IPFamily }

// PodNetworkMode is the lab's --pod-network at lab up.
func (l *Lab) PodNetworkMode() string { return l.cfg.PodNetwork }

// Topology is the lab's underlay topology (TopologyFlat or TopologyRouted).
func (l *Lab) Topology() string { return l.cfg.Topology }

// Hosts lists the lab's hosts: nodes first, then client and external.
func (l *Lab) Hosts() []string {
	var hs []string
	for i := 1; i <= l.cfg.Nodes; i++ {
		hs = append(hs, nodeName(i))
	}
	return append(hs, Client, External)
}

// Kubeconfig is the path of the kubeconfig that reaches the lab's API from the
// root namespace (through the loopback forwarder).
func (l *Lab) Kubeconfig() string { return filepath.Join(l.cfg.Dir, "kubeconfig") }

// Dir is the lab's directory.
func (l *Lab) Dir() string { return l.cfg.Dir }

// Name is the lab's name.
func (l *Lab) Name() string { return l.cfg.Name }

func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Command returns a command that runs argv in a lab host's network namespace. It
// keeps the machine's mount namespace (nsenter --net), so pod namespaces that node
// processes create are visible to everyone.
func (l *Lab) Command(host string, argv ...string) *exec.Cmd {
	args := append([]string{"--net=" + netns.NetNSPath(NS(l.cfg.Name, host)), "--"}, argv...)
	return exec.Command("nsenter", args...)
}

// stateFile is where a lab in dir keeps its State.
func stateFile(dir string) string { return filepath.Join(dir, "lab.json") }

// saveState writes the lab's state durably: `lab down` after a crash or a
// power loss reads it to find what to remove.
func (l *Lab) saveState() error {
	// World-readable, like the registry: it holds no secret, and `lab status`
	// works without sudo.
	b, _ := json.MarshalIndent(l.state, "", "  ")
	return fsutil.WriteFileAtomic(stateFile(l.cfg.Dir), b, 0o644)
}

// newState is the state of a lab about to be built from cfg.
func newState(cfg Config) State {
	return State{Name: cfg.Name, Nodes: cfg.Nodes, Servers: cfg.Servers, Datastore: cfg.Datastore, Dir: cfg.Dir, Subnet: cfg.Subnet.String(),
		ProxyMode: cfg.ProxyMode, PodNetwork: cfg.PodNetwork, Topology: cfg.Topology, Zones: cfg.Zones, IPFamily: cfg.IPFamily,
		ControlPlaneTaint: cfg.ControlPlaneTaint, PIDs: map[string]int{}, Args: map[string][]string{}, Addresses: map[string]string{}}
}

// Up builds the lab and starts minikit on its nodes; it returns once every node
// is Ready. On failure it removes what it made.
func Up(ctx context.Context, cfg Config) (l *Lab, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := cfg.checkPodNetwork(); err != nil {
		return nil, err
	}
	for _, h := range []string{"net", Client, External, Router, nodeName(1)} {
		if netns.ExistsNamed(NS(cfg.Name, h)) {
			return nil, fmt.Errorf("lab %q already exists (namespace %s); remove it with: minikit lab down --name %s", cfg.Name, NS(cfg.Name, h), cfg.Name)
		}
	}
	if _, err := os.Stat(stateFile(cfg.Dir)); err == nil {
		return nil, fmt.Errorf("lab %q already exists (%s); remove it with: minikit lab down --name %s --dir %s", cfg.Name, cfg.Dir, cfg.Name, cfg.Dir)
	}
	if e, ok := Lookup(cfg.Name); ok {
		return nil, fmt.Errorf("lab %q already exists (%s); remove it with: minikit lab down --name %s", cfg.Name, e.Dir, cfg.Name)
	}
	if err := makeDir(cfg.Dir, cfg.Owner != nil); err != nil {
		return nil, err
	}
	made := &Lab{cfg: cfg, log: cfg.Logger.With("component", "lab", "lab", cfg.Name), state: newState(cfg)}
	l = made
	if err := register(Entry{Name: cfg.Name, Dir: cfg.Dir, Kubeconfig: l.Kubeconfig()}); err != nil {
		os.RemoveAll(cfg.Dir)
		return nil, err
	}
	defer func() {
		// made, not l: a failed return has already set l to nil.
		if err != nil {
			if kept := made.keepLogs(); kept != "" {
				err = fmt.Errorf("%w (the lab's logs are kept in %s)", err, kept)
			}
			made.Down()
		}
	}()
	if err := l.buildNetwork(); err != nil {
		return nil, err
	}
	if err := l.startNodes(ctx); err != nil {
		return nil, err
	}
	if err := l.startExternal(); err != nil {
		return nil, err
	}
	if err := register(Entry{Name: cfg.Name, Dir: cfg.Dir, Kubeconfig: l.Kubeconfig(), APIPort: l.state.APIPort}); err != nil {
		return nil, err
	}
	if cfg.MergeKubeconfig && cfg.Owner != nil {
		if err := l.mergeKubeconfig(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// keepLogs copies a failed lab's logs (its processes' and each embedded etcd
// member's) out of the lab directory that Down removes, and returns where.
func (l *Lab) keepLogs() string {
	dst, err := os.MkdirTemp("", "minikit-lab-"+l.cfg.Name+"-logs-")
	if err != nil {
		return ""
	}
	if wrote, _ := CollectLogs(l.cfg.Dir, dst); len(wrote) == 0 {
		os.RemoveAll(dst)
		return ""
	}
	return dst
}

// makeDir makes the lab's directory. When it is shared with a user, the
// directories made here may be entered (0711) but not listed by others: the
// kubeconfig inside is the user's own (0600), every other file root's.
func makeDir(dir string, shared bool) error {
	var made []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if shared {
		if filepath.Dir(filepath.Clean(dir)) == DefaultDir {
			made = append(made, DefaultDir)
		}
		if len(made) == 0 || made[0] != filepath.Clean(dir) {
			made = append(made, filepath.Clean(dir))
		}
		for _, d := range made {
			if err := os.Chmod(d, 0o711); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildNetwork creates the namespaces, the underlay bridge (inside NAME-net) and a
// veth per host, created inside NAME-net with its peer placed straight into the
// host's namespace: no link ever exists in the root namespace. The routed
// topology has a second bridge, br1, for the second segment, and a router
// namespace with a leg on each (.1 of both subnets) through which the hosts of
// one segment reach the other's.
func (l *Lab) buildNetwork() error {
	netNS := NS(l.cfg.Name, "net")
	if err := l.addNS(netNS); err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "-n", netNS, "link", "set", "lo", "up"},
		{"ip", "-n", netNS, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", netNS, "link", "set", "br0", "up"},
	}
	routed := l.cfg.Topology == TopologyRouted
	sub1, sub2 := l.cfg.Subnet.Masked(), l.cfg.subnet2()
	if routed {
		l.state.Subnet2 = sub2.String()
		rt := NS(l.cfg.Name, Router)
		if err := l.addNS(rt); err != nil {
			return err
		}
		steps = append(steps, [][]string{
			{"ip", "-n", netNS, "link", "add", "br1", "type", "bridge"},
			{"ip", "-n", netNS, "link", "set", "br1", "up"},
			{"ip", "-n", rt, "link", "set", "lo", "up"},
		}...)
		for i, leg := range []struct {
			br  string
			sub netip.Prefix
		}{{"br0", sub1}, {"br1", sub2}} {
			port, dev := "p-"+Router+strconv.Itoa(i), "eth"+strconv.Itoa(i+1)
			steps = append(steps, [][]string{
				{"ip", "-n", netNS, "link", "add", port, "type", "veth", "peer", "name", dev, "netns", rt},
				{"ip", "-n", netNS, "link", "set", port, "master", leg.br, "up"},
				{"ip", "-n", rt, "addr", "add", routerAddr(leg.sub).String() + "/" + strconv.Itoa(leg.sub.Bits()), "dev", dev},
				{"ip", "-n", rt, "link", "set", dev, "up"},
			}...)
		}
		steps = append(steps, []string{"ip", "netns", "exec", rt, "sysctl", "-qw", "net.ipv4.ip_forward=1"})
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	for _, h := range l.Hosts() {
		ns := NS(l.cfg.Name, h)
		if err := l.addNS(ns); err != nil {
			return err
		}
		port := "p-" + h
		addr := l.Addr(h)
		sub := l.cfg.subnetOf(h).Masked()
		br := "br0"
		if sub != sub1 {
			br = "br1"
		}
		l.state.Addresses[h] = addr.String()
		steps := [][]string{
			{"ip", "-n", ns, "link", "set", "lo", "up"},
			{"ip", "-n", netNS, "link", "add", port, "type", "veth", "peer", "name", "eth1", "netns", ns},
			{"ip", "-n", netNS, "link", "set", port, "master", br, "up"},
			{"ip", "-n", ns, "addr", "add", addr.String() + "/" + strconv.Itoa(sub.Bits()), "dev", "eth1"},
			{"ip", "-n", ns, "link", "set", "eth1", "up"},
		}
		if a6 := l.Addr6(h); a6.IsValid() {
			// nodad: the lab's underlay is ours alone, and a tentative
			// address would not answer for a second or so.
			steps = append(steps, []string{"ip", "-n", ns, "addr", "add", a6.String() + "/" + strconv.Itoa(Subnet6.Bits()), "dev", "eth1", "nodad"})
		}
		if routed {
			other := sub2
			if sub == sub2 {
				other = sub1
			}
			steps = append(steps, []string{"ip", "-n", ns, "route", "add", other.String(), "via", routerAddr(sub).String(), "dev", "eth1"})
		}
		if strings.HasPrefix(h, "node") {
			steps = append(steps, l.serviceRoutes(ns)...)
		}
		for _, s := range steps {
			if err := run(s...); err != nil {
				return err
			}
		}
	}
	return l.saveState()
}

// serviceRoutes are the steps that route a node's own traffic to the service
// CIDRs. A VM's default route covers them; lab nodes have no default route
// (nothing may leave the lab), so they get these instead, one per family:
// without one, a socket on the node (a hostNetwork pod) to a ClusterIP fails
// with "network unreachable" before kube-proxy's OUTPUT DNAT sees the packet,
// and packets to a ClusterIP without endpoints never reach the proxy's REJECT.
func (l *Lab) serviceRoutes(ns string) [][]string {
	var steps [][]string
	if l.cfg.IPFamily != IPFamilyIPv6 {
		steps = append(steps, []string{"ip", "-n", ns, "route", "add", ServiceCIDR, "dev", "eth1"})
	}
	if l.cfg.IPFamily != IPFamilyIPv4 {
		steps = append(steps, []string{"ip", "-n", ns, "-6", "route", "add", ServiceCIDR6.String(), "dev", "eth1"})
	}
	return steps
}

// routerAddr is the router's address on a segment: its first host address.
func routerAddr(sub netip.Prefix) netip.Addr { return sub.Masked().Addr().Next() }

func (l *Lab) addNS(name string) error {
	if err := netns.CreateNamed(name); err != nil {
		return err
	}
	l.state.Namespaces = append(l.state.Namespaces, name)
	return l.saveState()
}

// start runs argv in host's namespace in the background, logging to DIR/host.log.
func (l *Lab) start(host, role string, argv ...string) error {
	return l.startAs(host, host, role, argv...)
}

// startAs starts a process recorded as key (its log KEY.log) on host: the
// external etcd (EtcdHost) runs on the external host beside its services.
func (l *Lab) startAs(key, host, role string, argv ...string) error {
	logf, err := os.OpenFile(filepath.Join(l.cfg.Dir, key+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := l.Command(host, argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s on %s: %w", role, host, err)
	}
	l.recordPID(key, cmd.Process.Pid)
	l.state.Args[key] = argv
	go cmd.Wait()
	return l.saveState()
}

// recordPID notes the process the lab started for host, with its start time.
func (l *Lab) recordPID(host string, pid int) {
	if l.state.Starts == nil {
		l.state.Starts = map[string]uint64{}
	}
	l.state.PIDs[host] = pid
	l.state.Starts[host] = proc.StartTime(pid)
}

// PID is the process running on a lab host (0 if none).
func (l *Lab) PID(host string) int { return l.state.PIDs[host] }

// Stop stops a host's minikit process with sig (SIGKILL to simulate a crash) and
// waits for it to exit. Its pods keep running.
func (l *Lab) Stop(host string, sig syscall.Signal) error {
	pid := l.state.PIDs[host]
	if pid == 0 || !proc.Alive(pid) {
		return fmt.Errorf("%s runs no process", host)
	}
	syscall.Kill(pid, sig)
	if !waitGone(pid, 15*time.Second) {
		return fmt.Errorf("process %d on %s did not exit after %v", pid, host, sig)
	}
	l.state.PIDs[host] = 0
	return l.saveState()
}

// Start starts a host's minikit process again with the arguments it had.
func (l *Lab) Start(host string) error {
	argv := l.state.Args[host]
	if len(argv) == 0 {
		return fmt.Errorf("%s has no process to start", host)
	}
	if pid := l.state.PIDs[host]; pid != 0 && proc.Alive(pid) {
		return fmt.Errorf("%s already runs process %d", host, pid)
	}
	if host == EtcdHost {
		return l.startAs(EtcdHost, External, "external etcd", argv...)
	}
	return l.start(host, "minikit", argv...)
}

// SetProxyMode changes the --proxy-mode a node's process is started with
// (by Start, after Stop): switching a node between the modes, whose start
// removes the other mode's rules.
func (l *Lab) SetProxyMode(host, mode string) error {
	if mode != "iptables" && mode != "nftables" {
		return fmt.Errorf("unknown proxy mode %q: want iptables or nftables", mode)
	}
	return l.setArg(host, "--proxy-mode", mode)
}

// SetPodNetwork changes the --pod-network a node's process is started with
// (by Start, after Stop): switching a node between host-gw and vxlan, whose
// start removes the other mode's routes and device.
func (l *Lab) SetPodNetwork(host, mode string) error {
	if mode != "host-gw" && mode != "vxlan" {
		return fmt.Errorf("unknown pod network %q: want host-gw or vxlan", mode)
	}
	return l.setArg(host, "--pod-network", mode)
}

// PodNetwork is the --pod-network a host's process runs with ("host-gw"
// when it has none).
func (l *Lab) PodNetwork(host string) string { return l.arg(host, "--pod-network", "host-gw") }

// arg is the value of flag in host's recorded command line, else def.
func (l *Lab) arg(host, flag, def string) string {
	argv := l.state.Args[host]
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == flag {
			return argv[i+1]
		}
	}
	return def
}

// setArg sets flag to value in host's recorded command line (appending it
// when missing), for the next Start.
func (l *Lab) setArg(host, flag, value string) error {
	argv := l.state.Args[host]
	if len(argv) == 0 {
		return fmt.Errorf("%s has no process", host)
	}
	argv = append([]string(nil), argv...)
	set := false
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == flag {
			argv[i+1], set = value, true
		}
	}
	if !set {
		argv = append(argv, flag, value)
	}
	l.state.Args[host] = argv
	return l.saveState()
}

// ProxyMode is the --proxy-mode a host's process runs with ("iptables"
// when it has none).
func (l *Lab) ProxyMode(host string) string { return l.arg(host, "--proxy-mode", "iptables") }

// RemoveNode takes a node out of the cluster, as decommissioning a VM does: its
// process stops, its pods, bridge and rules are removed from its namespace, and its
// Node object is deleted (its pods are then garbage-collected, their endpoints
// dropped, and the other nodes withdraw their routes to it).
func (l *Lab) RemoveNode(ctx context.Context, host string) error {
	if host == nodeName(1) {
		return fmt.Errorf("node1 runs the server and cannot be removed")
	}
	for i := 2; i <= l.cfg.Servers; i++ {
		if host == nodeName(i) {
			return fmt.Errorf("%s is a server of the lab's HA control plane (an etcd member) and cannot be removed; stop it with lab stop %s", host, host)
		}
	}
	if pid := l.state.PIDs[host]; pid != 0 && proc.Alive(pid) {
		if err := l.Stop(host, syscall.SIGTERM); err != nil {
			return err
		}
	}
	if out, err := l.Command(host, l.cfg.Binary, "down", "--data-dir", filepath.Join(l.cfg.Dir, host)).CombinedOutput(); err != nil {
		return fmt.Errorf("minikit down on %s: %v: %s", host, err, out)
	}
	client, err := l.Client()
	if err != nil {
		return err
	}
	err = client.CoreV1().Nodes().Delete(ctx, host, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	delete(l.state.Args, host)
	l.saveState()
	return err
}

// owns reports whether pid is still the process the lab started for host: the
// same start time, whatever the binary is called. A state file written before
// start times were recorded falls back to the command line naming minikit.
func (st State) owns(host string, pid int) bool {
	if start := st.Starts[host]; start != 0 {
		return proc.StartTime(pid) == start
	}
	return isMinikit(pid)
}

func isMinikit(pid int) bool { return strings.Contains(proc.Cmdline(pid), "minikit") }

// waitGone waits for a process to exit. A zombie counts as gone: lab processes
// outlive the `lab up` that started them, and their new parent may reap late.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // reap it if it is our child
		if !proc.Alive(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// DialContext dials addr from inside a lab host's network namespace; the socket
// stays bound to that namespace, so tests and the forwarder reach the lab without
// any route from the root namespace.
func (l *Lab) DialContext(ctx context.Context, host, network, addr string) (net.Conn, error) {
	return DialIn(ctx, NS(l.cfg.Name, host), network, addr)
}

// DialIn dials addr from inside the named network namespace.
func DialIn(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.DoPath(netns.NetNSPath(ns), func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Load reads a lab's state file; dir "" is the registry's directory for the
// lab, else the default one.
func Load(name, dir string) (State, error) {
	dir = resolveDir(name, dir)
	st, err := readState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return st, fmt.Errorf("no lab %q in %s: %w", name, dir, err)
	}
	if err != nil {
		return st, fmt.Errorf("lab %q: %w", name, err)
	}
	return st, nil
}

// Open returns a running lab from its state file, to stop, start or remove hosts.
func Open(name, dir, binary string, log *slog.Logger) (*Lab, error) {
	st, err := Load(name, dir)
	if err != nil {
		return nil, err
	}
	cfg := Config{Name: st.Name, Nodes: st.Nodes, Servers: st.Servers, Datastore: st.Datastore, Dir: st.Dir, Binary: binary, Logger: log,
		PodNetwork: st.PodNetwork, Topology: st.Topology}
	if cfg.Subnet, err = netip.ParsePrefix(st.Subnet); err != nil {
		return nil, err
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if st.Args == nil {
		st.Args = map[string][]string{}
	}
	return &Lab{cfg: cfg, state: st, log: cfg.Logger}, nil
}
