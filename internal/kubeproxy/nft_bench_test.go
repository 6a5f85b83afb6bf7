package kubeproxy

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/nft"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// nsExec is the Exec backend (nft -f, kube-proxy's way through knftables)
// run inside a network namespace: the peer the Netlink backend is measured
// against.
type nsExec struct {
	ex *nft.Exec
	ns string
}

func (e nsExec) do(fn func() error) error { return netns.DoPath(netns.NetNSPath(e.ns), fn) }

func (e nsExec) Run(ctx context.Context, tx *nft.Transaction) error {
	return e.do(func() error { return e.ex.Run(ctx, tx) })
}

func (e nsExec) ListChains(ctx context.Context) (out []string, err error) {
	err = e.do(func() error { out, err = e.ex.ListChains(ctx); return err })
	return out, err
}

func (e nsExec) ListSets(ctx context.Context) (out []string, err error) {
	err = e.do(func() error { out, err = e.ex.ListSets(ctx); return err })
	return out, err
}

func (e nsExec) ListElements(ctx context.Context, set string) (out []*nft.Element, err error) {
	err = e.do(func() error { out, err = e.ex.ListElements(ctx, set); return err })
	return out, err
}

func (e nsExec) CountRules(ctx context.Context, chain string) (n int, err error) {
	err = e.do(func() error { n, err = e.ex.CountRules(ctx, chain); return err })
	return n, err
}

func (e nsExec) DeleteTable(ctx context.Context) error {
	return e.do(func() error { return e.ex.DeleteTable(ctx) })
}

// nftBenchServices gives p S services of 5 endpoints each (benchSlice).
func nftBenchServices(p *NFTProxier, S int) {
	for i := 0; i < S; i++ {
		n := i + 10
		vip := fmt.Sprintf("10.%d.%d.%d", 96+(n>>16), (n>>8)&255, n&255)
		name := "svc" + strconv.Itoa(i)
		p.OnServiceUpdate(makeService("ns", name, vip, withPorts(corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)})))
		p.OnEndpointSliceUpdate(benchSlice(name, i, ""))
	}
}

// BenchmarkNFTSync times the nftables mode's syncs against a real kernel (a
// network namespace of its own) at S services x 5 endpoints: the first full
// sync into an empty table (render everything; the service chains in
// transactions of PrepBatchServices, then the one that makes them reachable), a
// later full sync of the same objects, a partial sync after one endpoint
// changed (its address: elements only) and one after a service's endpoint
// count changed (its rule replaced), through the Netlink backend and,
// in the same run, through Exec (`nft -f`, kube-proxy's way).
//
// NFT_PREP_BATCH sets PrepBatchServices (default 500; 1000000 writes every
// sync as one transaction, as before writeUnreachable).
func BenchmarkNFTSync(b *testing.B) {
	prep := 500
	if v := os.Getenv("NFT_PREP_BATCH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("NFT_PREP_BATCH=%q: want a positive number", v)
		}
		prep = n
	}
	newProxier := func(b *testing.B, be nft.Interface) *NFTProxier {
		p, _, _ := testNFTProxier(b, be)
		p.cfg.PrepBatchServices = prep
		return p
	}
	for _, backend := range []string{"netlink", "exec"} {
		for _, S := range []int{1000, 10000} {
			ns := newNetns(b)
			// open is a new backend, as a proxy process starting has one.
			open := func(b *testing.B) nft.Interface {
				var be nft.Interface
				if err := netns.DoPath(netns.NetNSPath(ns), func() error {
					if backend == "netlink" {
						nl, err := nft.NewNetlink(nft.IPv4Family, nftTableName)
						if err == nil {
							b.Cleanup(func() { nl.Close() })
						}
						be = nl
						return err
					}
					ex, err := nft.NewExec(nft.IPv4Family, nftTableName)
					be = nsExec{ex: ex, ns: ns}
					return err
				}); err != nil {
					b.Fatal(err)
				}
				return be
			}
			name := fmt.Sprintf("%s/services=%d", backend, S)
			b.Run(name+"/full", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					p := newProxier(b, open(b))
					nftBenchServices(p, S)
					b.StartTimer()
					mustSyncNFT(b, p)
				}
			})
			b.Run(name+"/full-again", func(b *testing.B) {
				// The hourly (or drift-repair) full sync of a running proxy.
				p := newProxier(b, open(b))
				nftBenchServices(p, S)
				mustSyncNFT(b, p)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p.forceFullSync()
					mustSyncNFT(b, p)
				}
			})
			b.Run(name+"/partial-one-endpoint", func(b *testing.B) {
				p := newProxier(b, open(b))
				nftBenchServices(p, S)
				mustSyncNFT(b, p)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p.OnEndpointSliceUpdate(benchSlice("svc7", 7, fmt.Sprintf("10.250.%d.%d", (i>>8)&255, i&255)))
					mustSyncNFT(b, p)
				}
				if st := p.Stats(); st.FullSyncs != 1 {
					b.Fatalf("partial syncs were full: %+v", st)
				}
			})
			b.Run(name+"/partial-endpoint-count", func(b *testing.B) {
				// One service's endpoint count changes (5 -> 4 -> 5): its
				// chain's rule is replaced.
				p := newProxier(b, open(b))
				nftBenchServices(p, S)
				mustSyncNFT(b, p)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					s := benchSlice("svc7", 7, "")
					if i%2 == 0 {
						s.Endpoints = s.Endpoints[:4]
					}
					p.OnEndpointSliceUpdate(s)
					mustSyncNFT(b, p)
				}
				if st := p.Stats(); st.FullSyncs != 1 {
					b.Fatalf("partial syncs were full: %+v", st)
				}
			})
		}
	}
}
