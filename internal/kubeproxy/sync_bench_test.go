package kubeproxy

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/iptables/iptablestest"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// discardRestores is a Fake whose restores are not applied: the benchmarks
// below time the proxy's own work per sync, without iptables-restore (which
// scripts/bench-proxy.sh times against the real kernel).
type discardRestores struct{ *iptablestest.Fake }

func (discardRestores) Restore([]byte, bool) error { return nil }

// benchSlice is service i's EndpointSlice: 5 endpoints on another node, the
// last one's IP replaced by override when it is set.
func benchSlice(name string, i int, override string) *discovery.EndpointSlice {
	var eps []ep
	for e := 0; e < 5; e++ {
		k := i*5 + e + 2
		eps = append(eps, ep{ip: fmt.Sprintf("10.244.%d.%d", k>>8, k&255), node: testOther})
	}
	if override != "" {
		eps[4].ip = override
	}
	return makeSlice("ns", name, []discovery.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}, eps...)
}

// benchServices gives p S services of 5 endpoints each.
func benchServices(p *Proxier, S int) {
	for i := 0; i < S; i++ {
		n := i + 10
		vip := fmt.Sprintf("10.%d.%d.%d", 96+(n>>16), (n>>8)&255, n&255)
		name := "svc" + strconv.Itoa(i)
		p.OnServiceUpdate(makeService("ns", name, vip, withPorts(corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)})))
		p.OnEndpointSliceUpdate(benchSlice(name, i, ""))
	}
}

// BenchmarkPartialSyncWork is the proxy's Go work for a partial sync after one
// endpoint change, at S services x 5 endpoints. It must not grow with S much:
// the target is a partial sync within 1.25x of the bare restore.
func BenchmarkPartialSyncWork(b *testing.B) {
	for _, S := range []int{1000, 10000} {
		b.Run("services="+strconv.Itoa(S), func(b *testing.B) {
			t := &testing.T{}
			p, _ := testProxier(t, iptablestest.NewFake())
			p.ipt = discardRestores{iptablestest.NewFake()}
			defer p.health.close()
			benchServices(p, S)
			if err := p.syncProxyRules(); err != nil {
				b.Fatal(err)
			}
			alt := []string{"10.250.0.1", ""}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.OnEndpointSliceUpdate(benchSlice("svc0", 0, alt[i%2]))
				if err := p.syncProxyRules(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// discardTables also skips the Fake's table replacement: what is left is the
// proxy's own Go work for a full sync (render, build the restore input).
type discardTables struct{ discardRestores }

func (discardTables) ReplaceTables(tables []string, keep func(string, string) bool, build func(map[string]*iptables.TableState) ([]byte, error)) error {
	state := map[string]*iptables.TableState{}
	for _, t := range tables {
		ts := &iptables.TableState{Name: t}
		for _, c := range iptables.BuiltinChains(t) {
			ts.Chains = append(ts.Chains, &iptables.Chain{Name: c, Policy: "ACCEPT"})
		}
		state[t] = ts
	}
	_, err := build(state)
	return err
}

func (discardTables) Backend() iptables.Backend { return iptables.NFTables }

// BenchmarkFullSyncWork is the proxy's Go work for a full sync at S services x
// 5 endpoints, without iptables-restore: what a full sync adds to the floor.
func BenchmarkFullSyncWork(b *testing.B) {
	for _, S := range []int{100, 1000, 10000} {
		b.Run("services="+strconv.Itoa(S), func(b *testing.B) {
			t := &testing.T{}
			p, _ := testProxier(t, iptablestest.NewFake())
			p.ipt = discardTables{discardRestores{iptablestest.NewFake()}}
			defer p.health.close()
			benchServices(p, S)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.forceFullSync()
				if err := p.syncProxyRules(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
