package proxy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/kubeproxy"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/nft"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// BenchmarkFirstPacket measures the TCP connect time of new connections to a
// ClusterIP (issue 19: "first-packet connect latency to a ClusterIP at 10,000
// services: nftables <= 1.1x the latency at 100 services, iptables mode's
// ratio reported beside it"). Run it through scripts/bench-firstpacket.sh.
//
// One topology per (mode, size), all alive at once so that samples can be
// interleaved: a node namespace running the proxier itself, a client ("pod")
// namespace and a backend namespace, each joined to the node by a veth pair
// created inside the node namespace (nothing is ever made in the root
// namespace). The node routes between 10.244.1.0/24 (client) and
// 10.244.2.0/24 (backend); both are inside the cluster CIDR, so nothing is
// masqueraded. Every service has one TCP port and 5 endpoints; only the
// measured service's endpoints are real (5 addresses of the backend, served
// by one listener), the others point at pod IPs nobody has.
//
// The measured service is the worst case for iptables' linear scan: the one
// whose rule is last in nat KUBE-SERVICES before the nodeports tail. The
// proxier orders that chain by descending KUBE-SVC-* name (a hash of the
// service port), so the choice is read back from the kernel: first every
// service is written with placeholder endpoints, the last ClusterIP rule of
// KUBE-SERVICES names the service, its EndpointSlice is then pointed at the
// backend, and the kernel is checked again. The nftables topology of the same
// size measures the same service (its lookup is one verdict map, where no
// element is "last").
//
// Each connect is a new socket (so a new conntrack entry, whose first packet
// traverses the nat rules) timed around a blocking connect(2) from the client
// namespace; the socket is closed with an RST so TIME_WAIT does not pile up.
// Rounds visit the topologies in a fresh random order each. Env:
// FIRSTPACKET_SIZES (default 100,10000), FIRSTPACKET_SAMPLES (per topology,
// default 400), FIRSTPACKET_WARMUP (discarded rounds, default 20).
func BenchmarkFirstPacket(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("BenchmarkFirstPacket needs root (it creates network namespaces); run scripts/bench-firstpacket.sh")
	}
	sizes := envInts(b, "FIRSTPACKET_SIZES", []int{100, 10000})
	samples := envInts(b, "FIRSTPACKET_SAMPLES", []int{400})[0]
	warmup := envInts(b, "FIRSTPACKET_WARMUP", []int{20})[0]

	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)

	var tops []*fpTopology
	for _, n := range sizes {
		svcs, slices := fpObjects(n)
		// iptables first: it decides which service is measured.
		ipt := newFPTopology(b, ctx, "iptables", n)
		start := time.Now()
		measured := ipt.startIPTables(b, svcs, slices)
		b.Logf("iptables, %d services: rules in the kernel after %v; measured service %s (%s), last ClusterIP rule of KUBE-SERVICES",
			n, time.Since(start).Round(time.Millisecond), svcs[measured].Name, svcs[measured].Spec.ClusterIP)
		nf := newFPTopology(b, ctx, "nftables", n)
		start = time.Now()
		nf.startNFT(b, svcs, slices, measured)
		b.Logf("nftables, %d services: rules in the kernel after %v", n, time.Since(start).Round(time.Millisecond))
		tops = append(tops, ipt, nf)
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for round := 0; round < warmup+samples; round++ {
			for _, k := range mrand.Perm(len(tops)) {
				d, err := tops[k].connect()
				if err != nil {
					b.Fatalf("%s, %d services: %v", tops[k].mode, tops[k].size, err)
				}
				if round >= warmup {
					tops[k].samples = append(tops[k].samples, d)
				}
			}
		}
	}
	b.StopTimer()

	load, _ := os.ReadFile("/proc/loadavg")
	ver, _ := exec.Command("iptables", "--version").Output()
	b.Logf("TCP connect time to the ClusterIP from the client namespace, %d interleaved samples per row (after %d warm-up rounds); %s; load %s",
		samples*b.N, warmup, strings.TrimSpace(string(ver)), strings.Join(strings.Fields(string(load))[:3], " "))
	b.Logf("%-9s %9s %10s %10s %10s", "mode", "services", "median", "p90", "min")
	med := map[string]map[int]time.Duration{}
	p90 := map[string]map[int]time.Duration{}
	for _, t := range tops {
		sort.Slice(t.samples, func(i, j int) bool { return t.samples[i] < t.samples[j] })
		m, p := quantile(t.samples, 0.5), quantile(t.samples, 0.9)
		if med[t.mode] == nil {
			med[t.mode], p90[t.mode] = map[int]time.Duration{}, map[int]time.Duration{}
		}
		med[t.mode][t.size], p90[t.mode][t.size] = m, p
		b.Logf("%-9s %9d %10s %10s %10s", t.mode, t.size, us(m), us(p), us(t.samples[0]))
	}
	if len(sizes) >= 2 {
		lo, hi := sizes[0], sizes[len(sizes)-1]
		for _, mode := range []string{"nftables", "iptables"} {
			rm := float64(med[mode][hi]) / float64(med[mode][lo])
			rp := float64(p90[mode][hi]) / float64(p90[mode][lo])
			b.Logf("%-9s latency(%d)/latency(%d): median %.2fx, p90 %.2fx", mode, hi, lo, rm, rp)
			b.ReportMetric(rm, mode+"-median-ratio")
		}
	}
}

// fpTopology is one node with its proxier, client and backend.
type fpTopology struct {
	mode    string
	size    int
	node    string // namespace names
	client  string
	backend string
	target  unix.SockaddrInet4 // the measured ClusterIP:80
	samples []time.Duration
	ctx     context.Context
	stats   func() kubeproxy.Stats
}

const (
	fpNodeClientIP  = "10.244.1.1"
	fpClientIP      = "10.244.1.2"
	fpNodeBackendIP = "10.244.2.1"
	fpBackendPort   = 8080
)

// fpBackendIPs are the measured service's 5 endpoints, all on the backend.
var fpBackendIPs = []string{"10.244.2.2", "10.244.2.3", "10.244.2.4", "10.244.2.5", "10.244.2.6"}

func newFPTopology(b *testing.B, ctx context.Context, mode string, size int) *fpTopology {
	b.Helper()
	t := &fpTopology{mode: mode, size: size, ctx: ctx}
	t.node = fpNetns(b, "node")
	t.client = fpNetns(b, "pod")
	t.backend = fpNetns(b, "be")
	// Both veth pairs are created inside the node namespace with their
	// peers placed directly in the other namespace: no link ever exists in
	// the root namespace.
	cmds := [][]string{
		{"-n", t.node, "link", "set", "lo", "up"},
		{"-n", t.client, "link", "set", "lo", "up"},
		{"-n", t.backend, "link", "set", "lo", "up"},
		{"-n", t.node, "link", "add", "vpod", "type", "veth", "peer", "name", "eth0", "netns", t.client},
		{"-n", t.node, "link", "add", "vbe", "type", "veth", "peer", "name", "eth0", "netns", t.backend},
		{"-n", t.node, "addr", "add", fpNodeClientIP + "/24", "dev", "vpod"},
		{"-n", t.node, "addr", "add", fpNodeBackendIP + "/24", "dev", "vbe"},
		{"-n", t.node, "link", "set", "vpod", "up"},
		{"-n", t.node, "link", "set", "vbe", "up"},
		{"-n", t.client, "addr", "add", fpClientIP + "/24", "dev", "eth0"},
		{"-n", t.client, "link", "set", "eth0", "up"},
		{"-n", t.client, "route", "add", "default", "via", fpNodeClientIP},
	}
	for _, ip := range fpBackendIPs {
		cmds = append(cmds, []string{"-n", t.backend, "addr", "add", ip + "/24", "dev", "eth0"})
	}
	cmds = append(cmds,
		[]string{"-n", t.backend, "link", "set", "eth0", "up"},
		[]string{"-n", t.backend, "route", "add", "default", "via", fpNodeBackendIP})
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			b.Fatalf("ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", t.node, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		b.Fatalf("enabling forwarding in %s: %v: %s", t.node, err, out)
	}
	// The backend: one listener on all 5 endpoint addresses; the socket is
	// opened inside the backend namespace and stays bound to it.
	var ln net.Listener
	if err := netns.DoPath(netns.NetNSPath(t.backend), func() (err error) {
		ln, err = net.Listen("tcp4", ":"+strconv.Itoa(fpBackendPort))
		return err
	}); err != nil {
		b.Fatalf("listening in %s: %v", t.backend, err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return t
}

// proxyConfig is the node's configuration, as internal/cluster/proxy.go builds it.
func (t *fpTopology) proxyConfig() kubeproxy.Config {
	beLiberal := false
	return kubeproxy.Config{
		NodeName:    "node-" + t.mode,
		NodeIP:      netip.MustParseAddr(fpNodeClientIP),
		ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16"),
		// Read in the proxier's own namespace otherwise (the root's /proc
		// view of the calling thread); set here, the INVALID drop rule is
		// written as on a default node.
		TCPBeLiberal: &beLiberal,
		// conntrack in the node namespace, not the process's.
		Conntrack: nsConntrack{path: netns.NetNSPath(t.node)},
	}
}

// startIPTables runs the iptables proxier in the node, writes every
// service, picks the one last in KUBE-SERVICES, points it at the backend and
// waits until it answers. It returns the measured service's index.
func (t *fpTopology) startIPTables(b *testing.B, svcs []*corev1.Service, slices []*discovery.EndpointSlice) int {
	b.Helper()
	ipt, err := newNSIPTables(netns.NetNSPath(t.node))
	if err != nil {
		b.Fatal(err)
	}
	p, err := kubeproxy.New(t.proxyConfig(), ipt)
	if err != nil {
		b.Fatal(err)
	}
	t.run(b, p.Run)
	t.stats = p.Stats
	for i := range svcs {
		p.OnServiceUpdate(svcs[i])
		p.OnEndpointSliceUpdate(slices[i])
	}
	p.SetInitialized()
	t.waitSynced(b, len(svcs), func() bool { return len(kubeServicesIPs(b, t.node)) == len(svcs) })

	ips := kubeServicesIPs(b, t.node)
	last := ips[len(ips)-1]
	measured := -1
	for i, s := range svcs {
		if s.Spec.ClusterIP == last {
			measured = i
		}
	}
	if measured < 0 {
		b.Fatalf("the last ClusterIP rule of KUBE-SERVICES, %s, is no service's", last)
	}
	p.OnEndpointSliceUpdate(fpRealSlice(svcs[measured]))
	t.setTarget(svcs[measured])
	t.waitAnswers(b)
	if ips := kubeServicesIPs(b, t.node); ips[len(ips)-1] != last {
		b.Fatalf("after pointing %s at the backend, KUBE-SERVICES ends with %s, not %s", svcs[measured].Name, ips[len(ips)-1], last)
	}
	return measured
}

// startNFT runs the nftables proxier in the node with the measured service
// pointed at the backend from the start, and waits until it answers.
func (t *fpTopology) startNFT(b *testing.B, svcs []*corev1.Service, slices []*discovery.EndpointSlice, measured int) {
	b.Helper()
	var nl *nft.Netlink
	if err := netns.DoPath(netns.NetNSPath(t.node), func() (err error) {
		nl, err = nft.NewNetlink(nft.IPv4Family, kubeproxy.NFTTableName)
		return err
	}); err != nil {
		b.Fatalf("opening nftables in %s: %v", t.node, err)
	}
	b.Cleanup(func() { nl.Close() })
	p, err := kubeproxy.NewNFT(kubeproxy.NFTConfig{
		Config:       t.proxyConfig(),
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")},
		Backend:      "netlink",
	}, nl)
	if err != nil {
		b.Fatal(err)
	}
	t.run(b, p.Run)
	t.stats = p.Stats
	for i := range svcs {
		p.OnServiceUpdate(svcs[i])
		if i == measured {
			p.OnEndpointSliceUpdate(fpRealSlice(svcs[i]))
		} else {
			p.OnEndpointSliceUpdate(slices[i])
		}
	}
	p.SetInitialized()
	t.setTarget(svcs[measured])
	t.waitSynced(b, len(svcs), func() bool {
		out, err := exec.Command("ip", "netns", "exec", t.node, "nft", "list", "map", "ip", kubeproxy.NFTTableName, "service-ips").CombinedOutput()
		return err == nil && strings.Count(string(out), " : goto service-") == len(svcs)
	})
	t.waitAnswers(b)
}

// run starts a proxier's loop and stops it (before the namespaces go) when
// the benchmark ends.
func (t *fpTopology) run(b *testing.B, run func(context.Context)) {
	ctx, cancel := context.WithCancel(t.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		run(ctx)
	}()
	b.Cleanup(func() { cancel(); wg.Wait() })
}

func (t *fpTopology) setTarget(svc *corev1.Service) {
	t.target = unix.SockaddrInet4{Port: 80, Addr: netip.MustParseAddr(svc.Spec.ClusterIP).As4()}
}

// waitSynced waits until the proxier has synced every service port without
// error and inKernel says the kernel holds them.
func (t *fpTopology) waitSynced(b *testing.B, n int, inKernel func() bool) {
	b.Helper()
	deadline := time.Now().Add(20 * time.Minute)
	for {
		st := t.stats()
		if st.Syncs > 0 && st.LastError == "" && st.Services == n && inKernel() {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s, %d services: rules not in the kernel after 20m (stats %+v)", t.mode, t.size, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitAnswers waits until a connect to the measured ClusterIP succeeds.
func (t *fpTopology) waitAnswers(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		_, err := t.connect()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s, %d services: %s:80 does not answer after 5m: %v (stats %+v)", t.mode, t.size, netip.AddrFrom4(t.target.Addr), err, t.stats())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// connect opens a socket in the client namespace and times one connect(2)
// to the measured ClusterIP, until the handshake completes. The socket is
// non-blocking and waited for with poll(2): a blocking connect would be cut
// short by the Go runtime's signals (EINTR) and could not be retried.
func (t *fpTopology) connect() (time.Duration, error) {
	var fd int
	if err := netns.DoPath(netns.NetNSPath(t.client), func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		return err
	}); err != nil {
		return 0, fmt.Errorf("opening a socket in %s: %w", t.client, err)
	}
	defer unix.Close(fd)
	// Close with an RST: no TIME_WAIT in the client.
	if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
		return 0, err
	}
	dst := netip.AddrFrom4(t.target.Addr)
	sa := t.target
	start := time.Now()
	err := unix.Connect(fd, &sa)
	if err != nil && err != unix.EINPROGRESS {
		return 0, fmt.Errorf("connecting to %s:80: %w", dst, err)
	}
	deadline := start.Add(2 * time.Second)
	for err != nil {
		left := time.Until(deadline)
		if left <= 0 {
			return 0, fmt.Errorf("connecting to %s:80: no answer in 2s", dst)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, perr := unix.Poll(fds, int(left/time.Millisecond)+1)
		if perr == unix.EINTR || perr == nil && n == 0 {
			continue
		}
		if perr != nil {
			return 0, fmt.Errorf("waiting for the connection to %s:80: %w", dst, perr)
		}
		err = nil
	}
	d := time.Since(start)
	if soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soErr != 0 {
		if err == nil {
			err = unix.Errno(soErr)
		}
		return 0, fmt.Errorf("connecting to %s:80: %w", dst, err)
	}
	return d, nil
}

// kubeServicesIPs lists the ClusterIPs of nat KUBE-SERVICES in rule order.
func kubeServicesIPs(b *testing.B, ns string) []string {
	b.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		b.Fatalf("iptables-save -t nat in %s: %v: %s", ns, err, out)
	}
	var ips []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "-A KUBE-SERVICES ") {
			continue
		}
		f := strings.Fields(l)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "-d" && strings.HasSuffix(f[i+1], "/32") {
				ips = append(ips, strings.TrimSuffix(f[i+1], "/32"))
			}
		}
	}
	return ips
}

// fpObjects returns n ClusterIP services (10.96.0.10 on) with one TCP port
// and an EndpointSlice each of 5 endpoints at unused pod IPs (10.244.128.0/17).
func fpObjects(n int) ([]*corev1.Service, []*discovery.EndpointSlice) {
	svcs := make([]*corev1.Service, n)
	slices := make([]*discovery.EndpointSlice, n)
	base := netip.MustParseAddr("10.96.0.10").As4()
	for i := 0; i < n; i++ {
		ip := addrAdd(base, i)
		svcs[i] = &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i)},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(fpBackendPort)}},
			},
		}
		var addrs []string
		for j := 0; j < 5; j++ {
			addrs = append(addrs, addrAdd(netip.MustParseAddr("10.244.128.1").As4(), (i*5+j)%32000))
		}
		slices[i] = fpSlice(svcs[i], addrs)
	}
	return svcs, slices
}

func fpRealSlice(svc *corev1.Service) *discovery.EndpointSlice {
	return fpSlice(svc, fpBackendIPs)
}

func fpSlice(svc *corev1.Service, addrs []string) *discovery.EndpointSlice {
	ready := true
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-abcde",
			Labels: map[string]string{discovery.LabelServiceName: svc.Name}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(fpBackendPort)), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{a},
			Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ptr(false)}})
	}
	return s
}

func ptr[T any](v T) *T { return &v }

func addrAdd(a [4]byte, n int) string {
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

// fpNetns makes a network namespace removed when the benchmark ends (after
// the proxiers and listeners, whose cleanups are registered later and so run
// first).
func fpNetns(b *testing.B, role string) string {
	b.Helper()
	r := make([]byte, 3)
	rand.Read(r)
	ns := "mkt-latency-" + role + "-" + hex.EncodeToString(r)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		b.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	b.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			b.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	return ns
}

func envInts(b *testing.B, name string, def []int) []int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want positive integers separated by commas", name, s)
		}
		out = append(out, n)
	}
	return out
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(q*float64(len(sorted)-1)+0.5)]
}

func us(d time.Duration) string { return fmt.Sprintf("%.1fµs", float64(d)/1e3) }

// nsIPTables is the real iptables.Interface run inside a network namespace:
// the iptables binaries are forked from a thread that netns.DoPath has
// switched into the namespace, so they inherit it. (The proxier calls its
// Interface from its own goroutines, which are in the process's namespace.)
type nsIPTables struct {
	ipt  iptables.Interface
	path string
}

func newNSIPTables(path string) (*nsIPTables, error) {
	n := &nsIPTables{path: path}
	if err := netns.DoPath(path, func() (err error) { n.ipt, err = iptables.New(); return err }); err != nil {
		return nil, fmt.Errorf("iptables in %s: %w", path, err)
	}
	return n, nil
}

func (n *nsIPTables) do(fn func() error) error { return netns.DoPath(n.path, fn) }

func (n *nsIPTables) EnsureChain(table, chain string) error {
	return n.do(func() error { return n.ipt.EnsureChain(table, chain) })
}

func (n *nsIPTables) EnsureRule(pos iptables.Position, table, chain string, args ...string) (existed bool, err error) {
	err = n.do(func() (e error) { existed, e = n.ipt.EnsureRule(pos, table, chain, args...); return e })
	return existed, err
}

func (n *nsIPTables) HasRule(table, chain string, args ...string) (ok bool, err error) {
	err = n.do(func() (e error) { ok, e = n.ipt.HasRule(table, chain, args...); return e })
	return ok, err
}

func (n *nsIPTables) DeleteRule(table, chain string, args ...string) error {
	return n.do(func() error { return n.ipt.DeleteRule(table, chain, args...) })
}

func (n *nsIPTables) ChainExists(table, chain string) (ok bool, err error) {
	err = n.do(func() (e error) { ok, e = n.ipt.ChainExists(table, chain); return e })
	return ok, err
}

func (n *nsIPTables) DeleteChain(table, chain string) error {
	return n.do(func() error { return n.ipt.DeleteChain(table, chain) })
}

func (n *nsIPTables) Restore(data []byte, noFlush bool) error {
	return n.do(func() error { return n.ipt.Restore(data, noFlush) })
}

func (n *nsIPTables) Save(table string) (out []byte, err error) {
	err = n.do(func() (e error) { out, e = n.ipt.Save(table); return e })
	return out, err
}

func (n *nsIPTables) HasRandomFully() bool { return n.ipt.HasRandomFully() }

func (n *nsIPTables) Backend() iptables.Backend { return n.ipt.Backend() }

func (n *nsIPTables) ListChains(table string) (out []string, err error) {
	err = n.do(func() (e error) { out, e = n.ipt.ListChains(table); return e })
	return out, err
}

func (n *nsIPTables) ReplaceTables(tables []string, keep func(table, chain string) bool, build func(map[string]*iptables.TableState) ([]byte, error)) error {
	return n.do(func() error { return n.ipt.ReplaceTables(tables, keep, build) })
}

var _ iptables.Interface = (*nsIPTables)(nil)

// nsConntrack is the proxier's conntrack table in a network namespace (the
// default reads the process's own): netlink requests made from a thread
// switched into it.
type nsConntrack struct{ path string }

var _ kubeproxy.Conntrack = nsConntrack{}

func (c nsConntrack) ListUDP() ([]kubeproxy.Flow, error) {
	var out []kubeproxy.Flow
	err := netns.DoPath(c.path, func() error {
		flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		if err != nil {
			return fmt.Errorf("listing conntrack flows: %w", err)
		}
		for _, f := range flows {
			if f.Forward.Protocol != unix.IPPROTO_UDP {
				continue
			}
			out = append(out, kubeproxy.Flow{
				OrigSrc:  addrPort(f.Forward.SrcIP, f.Forward.SrcPort),
				OrigDst:  addrPort(f.Forward.DstIP, f.Forward.DstPort),
				ReplySrc: addrPort(f.Reverse.SrcIP, f.Reverse.SrcPort),
			})
		}
		return nil
	})
	return out, err
}

func (c nsConntrack) Delete(flows []kubeproxy.Flow) (int, error) {
	set := flowFilter{}
	for _, f := range flows {
		set[f] = true
	}
	var n uint
	err := netns.DoPath(c.path, func() (err error) {
		n, err = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, set)
		return err
	})
	if err != nil {
		return int(n), fmt.Errorf("deleting conntrack flows: %w", err)
	}
	return int(n), nil
}

// flowFilter matches UDP conntrack flows by original tuple and reply source.
type flowFilter map[kubeproxy.Flow]bool

func (s flowFilter) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	return f.Forward.Protocol == unix.IPPROTO_UDP && s[kubeproxy.Flow{
		OrigSrc:  addrPort(f.Forward.SrcIP, f.Forward.SrcPort),
		OrigDst:  addrPort(f.Forward.DstIP, f.Forward.DstPort),
		ReplySrc: addrPort(f.Reverse.SrcIP, f.Reverse.SrcPort),
	}]
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}
