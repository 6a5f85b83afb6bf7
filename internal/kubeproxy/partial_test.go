package kubeproxy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptablestest"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// TestPartialSyncsMatchFullSync drives a proxier through random changes of
// every kind (services added, reshaped and deleted; endpoints moved, made not
// ready, removed; Local policy with health check ports) with partial syncs
// only, and after each one compares the kernel state with what a fresh
// proxier's full sync of the same objects writes, and the statistics with the
// full rule set's counts. Partial syncs look only at the services that
// changed, so this is what proves they miss nothing.
func TestPartialSyncsMatchFullSync(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			ipt := iptablestest.NewFake()
			p, _ := testProxier(t, ipt)
			svcs := map[string]*corev1.Service{}
			slices := map[string]*discovery.EndpointSlice{}
			mustSync(t, p)
			for step := 0; step < 120; step++ {
				name := fmt.Sprint("s", rng.IntN(12))
				var what string
				switch op := rng.IntN(10); {
				case op < 3 || svcs[name] == nil:
					what = "service " + name + " created or reshaped"
					svcs[name] = randomService(rng, name)
					p.OnServiceUpdate(svcs[name])
				case op < 8:
					what = "endpoints of " + name + " changed"
					slices[name] = randomSlice(rng, name)
					p.OnEndpointSliceUpdate(slices[name])
				case op < 9:
					what = "service " + name + " deleted"
					p.OnServiceDelete(svcs[name])
					delete(svcs, name)
				default:
					if slices[name] != nil {
						what = "endpoints of " + name + " deleted"
						p.OnEndpointSliceDelete(slices[name])
						delete(slices, name)
					}
				}
				mustSync(t, p)

				fresh := iptablestest.NewFake()
				q, _ := testProxier(t, fresh)
				for _, s := range svcs {
					q.OnServiceUpdate(s)
				}
				for _, s := range slices {
					q.OnEndpointSliceUpdate(s)
				}
				mustSync(t, q)
				if got, want := saved(t, ipt), saved(t, fresh); got != want {
					t.Fatalf("step %d (%s): partial syncs diverged from a full sync:\n%s", step, what, lineDiff(want, got))
				}
				if got, want := p.Stats(), q.Stats(); got.NATRules != want.NATRules || got.FilterRules != want.FilterRules ||
					got.NATChains != want.NATChains || got.Services != want.Services || got.Endpoints != want.Endpoints {
					t.Fatalf("step %d (%s): stats %+v, a full sync counts %+v", step, what, got, want)
				}
				if got, want := string(p.Rules()), string(q.Rules()); got != want {
					t.Fatalf("step %d (%s): Rules() after partial syncs differs:\n%s", step, what, lineDiff(want, got))
				}
			}
			if st := p.Stats(); st.FullSyncs != 1 || st.PartialSyncs == 0 {
				t.Fatalf("want one full sync then partial ones, got %+v", st)
			}
		})
	}
}

func randomService(rng *rand.Rand, name string) *corev1.Service {
	n := 0
	fmt.Sscanf(strings.TrimPrefix(name, "s"), "%d", &n)
	var opts []svcOpt
	switch rng.IntN(6) {
	case 1:
		opts = append(opts, withNodePort(int32(30100+n)))
	case 2:
		opts = append(opts, withNodePort(int32(30100+n)), withLocal(int32(32100+n)))
	case 3:
		opts = append(opts, withLB(fmt.Sprintf("192.168.56.%d", 240+n)), withSourceRanges("192.168.56.0/24"))
	case 4:
		opts = append(opts, withExternalIPs(fmt.Sprintf("80.11.12.%d", 10+n)), withAffinity(600))
	case 5:
		opts = append(opts, withInternalLocal())
	}
	return makeService("ns", name, fmt.Sprintf("10.96.1.%d", 10+n), opts...)
}

func randomSlice(rng *rand.Rand, name string) *discovery.EndpointSlice {
	var eps []ep
	for i, k := 0, rng.IntN(5); i < k; i++ {
		node := testOther
		if rng.IntN(2) == 0 {
			node = testNode
		}
		eps = append(eps, ep{ip: fmt.Sprintf("10.244.%d.%d", 1+rng.IntN(2), 2+rng.IntN(20)), node: node, notReady: rng.IntN(6) == 0})
	}
	return makeSlice("ns", name, p80, eps...)
}
