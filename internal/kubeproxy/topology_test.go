package kubeproxy

import (
	"slices"
	"testing"

	discovery "k8s.io/api/discovery/v1"
)

// hinted is a ready endpoint ip@node with zone and node hints (none when
// empty).
func hinted(s *discovery.EndpointSlice, zones, nodes []string) *discovery.EndpointSlice {
	for i := range s.Endpoints {
		var h discovery.EndpointHints
		if zones[i] != "" {
			h.ForZones = []discovery.ForZone{{Name: zones[i]}}
		}
		if nodes != nil && nodes[i] != "" {
			h.ForNodes = []discovery.ForNode{{Name: nodes[i]}}
		}
		if h.ForZones != nil || h.ForNodes != nil {
			s.Endpoints[i].Hints = &h
		}
	}
	return s
}

// Topology-aware routing as kube-proxy's CategorizeEndpoints does it: a
// node sends cluster traffic to the endpoints hinted for itself
// (PreferSameNode) or its zone when every ready endpoint has such hints and
// one is for it; otherwise hints are ignored. Local endpoints
// (internalTrafficPolicy Local) never look at hints.
func TestTopologyHints(t *testing.T) {
	three := func() *discovery.EndpointSlice {
		return makeSlice("default", "web", p80, ep{ip: "10.244.0.5", node: testNode}, ep{ip: "10.244.1.5", node: testOther},
			ep{ip: "10.244.2.5", node: "node3"})
	}
	for _, tc := range []struct {
		name  string
		slice *discovery.EndpointSlice
		zone  string
		local bool
		want  []string
	}{
		{"no hints: every endpoint", three(), "zone-1", false, []string{"10.244.0.5:80", "10.244.1.5:80", "10.244.2.5:80"}},
		{"zone hints: the node's zone", hinted(three(), []string{"zone-1", "zone-2", "zone-1"}, nil), "zone-1", false,
			[]string{"10.244.0.5:80", "10.244.2.5:80"}},
		{"zone hints, none for this zone: every endpoint", hinted(three(), []string{"zone-2", "zone-2", "zone-3"}, nil), "zone-1", false,
			[]string{"10.244.0.5:80", "10.244.1.5:80", "10.244.2.5:80"}},
		{"node without a zone label: every endpoint", hinted(three(), []string{"zone-1", "zone-2", "zone-3"}, nil), "", false,
			[]string{"10.244.0.5:80", "10.244.1.5:80", "10.244.2.5:80"}},
		{"an endpoint without hints: every endpoint", hinted(three(), []string{"zone-1", "", "zone-1"}, nil), "zone-1", false,
			[]string{"10.244.0.5:80", "10.244.1.5:80", "10.244.2.5:80"}},
		{"node hints: this node's", hinted(three(), []string{"zone-1", "zone-2", "zone-1"}, []string{testNode, testOther, "node3"}), "zone-1", false,
			[]string{"10.244.0.5:80"}},
		{"node hints, none for this node: the zone's", hinted(three(), []string{"zone-2", "zone-1", "zone-1"}, []string{testOther, "node4", "node3"}), "zone-1", false,
			[]string{"10.244.1.5:80", "10.244.2.5:80"}},
		{"internalTrafficPolicy Local ignores hints", hinted(three(), []string{"zone-2", "zone-2", "zone-2"}, nil), "zone-2", true,
			[]string{"10.244.0.5:80"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []svcOpt
			if tc.local {
				opts = append(opts, withInternalLocal())
			}
			sp := servicePorts(makeService("default", "web", "10.96.0.10", opts...))[0]
			cluster, local, _, _ := categorize(sp, endpointsFor(sp, []*discovery.EndpointSlice{tc.slice}, testNode, tc.zone))
			if tc.local {
				cluster = local
			}
			var got []string
			for _, e := range cluster {
				got = append(got, e.addr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("endpoints %v, want %v", got, tc.want)
			}
		})
	}
}
