package topology_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/topology"
)

// What iproute2 says, read with `ip netns exec NS ip -j ...`: the
// reference the collector's netlink reading is held against.

type ipLink struct {
	Index     int    `json:"ifindex"`
	Name      string `json:"ifname"`
	MTU       int    `json:"mtu"`
	OperState string `json:"operstate"`
	Address   string `json:"address"`
	Master    string `json:"master"`
	LinkType  string `json:"link_type"`
	LinkIndex int    `json:"link_index"`
	NetNSID   *int   `json:"link_netnsid"`
	LinkInfo  *struct {
		Kind string `json:"info_kind"`
		Data struct {
			ID    int    `json:"id"`
			Port  int    `json:"port"`
			Local string `json:"local"`
		} `json:"info_data"`
	} `json:"linkinfo"`
}

type ipAddrLink struct {
	Name  string `json:"ifname"`
	Addrs []struct {
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
	} `json:"addr_info"`
}

type ipRoute struct {
	Dst      string `json:"dst"`
	Gateway  string `json:"gateway"`
	Dev      string `json:"dev"`
	Protocol string `json:"protocol"`
	PrefSrc  string `json:"prefsrc"`
	Scope    string `json:"scope"`
	Type     string `json:"type"`
}

// fdbEntry is one line of `bridge -j fdb show dev IFNAME`.
type fdbEntry struct {
	MAC string `json:"mac"`
	Dst string `json:"dst"`
}

// fdbOf is a VXLAN device's FDB entries with a destination, as `bridge -j
// fdb show dev IFNAME` in its namespace shows them.
func fdbOf(t *testing.T, ns, dev string) []topology.FDBEntry {
	t.Helper()
	argv := []string{"netns", "exec", ns, "bridge", "-j", "fdb", "show", "dev", dev}
	out, err := exec.Command("ip", argv...).Output()
	if err != nil {
		t.Fatalf("ip %s: %v", strings.Join(argv, " "), err)
	}
	var es []fdbEntry
	if err := json.Unmarshal(out, &es); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	fdb := []topology.FDBEntry{}
	for _, e := range es {
		if e.Dst != "" {
			fdb = append(fdb, topology.FDBEntry{MAC: e.MAC, Dst: e.Dst})
		}
	}
	return fdb
}

type ipNSID struct {
	NSID int    `json:"nsid"`
	Name string `json:"name"`
}

func ipJSON(t *testing.T, ns string, v any, args ...string) {
	t.Helper()
	argv := append([]string{"netns", "exec", ns, "ip", "-j"}, args...)
	out, err := exec.Command("ip", argv...).Output()
	if err != nil {
		t.Fatalf("ip %s: %v", strings.Join(argv, " "), err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// compareHost checks a host against ip -j -d link, ip -j addr, ip -j route
// in its namespace, and each veth's peer against the namespace iproute2
// names for the veth's link-netnsid (ip netns list-id) and the peer index.
// compareHosts checks that the graph's hosts are exactly the namespaces
// want, each as `ip -j` shows it.
func compareHosts(t *testing.T, g topology.Graph, want []string) {
	t.Helper()
	var got []string
	for _, h := range g.Hosts {
		got = append(got, h.ID)
	}
	want = slices.Clone(want)
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("hosts %v, want the lab's namespaces and its pods' %v", got, want)
	}
	for _, h := range g.Hosts {
		compareHost(t, h)
	}
}

func compareHost(t *testing.T, h topology.Host) {
	t.Helper()
	var links []ipLink
	var addrs []ipAddrLink
	var routes []ipRoute
	var ids []ipNSID
	ipJSON(t, h.ID, &links, "-d", "link", "show")
	ipJSON(t, h.ID, &addrs, "addr", "show")
	ipJSON(t, h.ID, &routes, "route", "show")
	ipJSON(t, h.ID, &ids, "netns", "list-id")
	if len(links) != len(h.Interfaces) {
		t.Errorf("%s: %d interfaces, ip link shows %d", h.ID, len(h.Interfaces), len(links))
	}
	byName := map[string]topology.Interface{}
	for _, i := range h.Interfaces {
		byName[i.Name] = i
	}
	addrsOf := map[string][]string{}
	for _, a := range addrs {
		for _, ai := range a.Addrs {
			addrsOf[a.Name] = append(addrsOf[a.Name], fmt.Sprintf("%s/%d", ai.Local, ai.PrefixLen))
		}
	}
	for _, l := range links {
		got, ok := byName[l.Name]
		if !ok {
			t.Errorf("%s: interface %s (ip link) missing", h.ID, l.Name)
			continue
		}
		kind := "device"
		switch {
		case l.LinkInfo != nil && l.LinkInfo.Kind != "":
			kind = l.LinkInfo.Kind
		case l.LinkType == "loopback":
			kind = "loopback"
		}
		want := topology.Interface{ID: h.ID + "/" + l.Name, Name: l.Name, Index: l.Index, Kind: kind, MAC: l.Address, MTU: l.MTU,
			State: l.OperState, Master: l.Master, Addrs: addrsOf[l.Name], PeerID: peerOf(t, h.ID, l, ids)}
		// A VXLAN device: its VNI, port and local address as ip -d link
		// shows them, its FDB as bridge fdb shows it.
		var wantVX *topology.VXLAN
		if kind == "vxlan" {
			d := l.LinkInfo.Data
			wantVX = &topology.VXLAN{VNI: d.ID, Port: d.Port, Local: d.Local, FDB: fdbOf(t, h.ID, l.Name)}
		}
		gotVX := got.VXLAN
		got.VXLAN = nil
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: interface\n  got  %+v\n  want %+v (ip)", h.ID, got, want)
		}
		if (gotVX == nil) != (wantVX == nil) || (gotVX != nil && fmt.Sprintf("%+v", *gotVX) != fmt.Sprintf("%+v", *wantVX)) {
			t.Errorf("%s: %s's VXLAN\n  got  %+v\n  want %+v (ip -d link, bridge fdb)", h.ID, l.Name, deref(gotVX), deref(wantVX))
		}
	}
	var want []topology.Route
	for _, r := range routes {
		rt := topology.Route{Dst: r.Dst, Gateway: r.Gateway, Dev: r.Dev, Src: r.PrefSrc, Protocol: r.Protocol, Scope: r.Scope, Type: r.Type}
		if rt.Protocol == "" {
			rt.Protocol = "boot" // ip -j leaves out the default protocol
		}
		if rt.Type == "unicast" {
			rt.Type = ""
		}
		want = append(want, rt)
	}
	var got []topology.Route
	for _, r := range h.Routes {
		r.Dst = strings.TrimSuffix(r.Dst, "/32") // ip shows a host route without its length
		got = append(got, r)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: routes\n  got  %+v\n  want %+v (ip route)", h.ID, got, want)
	}
}

// peerOf is the interface ID a veth's peer has, as iproute2 resolves it.
func peerOf(t *testing.T, ns string, l ipLink, ids []ipNSID) string {
	t.Helper()
	if l.LinkInfo == nil || l.LinkInfo.Kind != "veth" || l.LinkIndex == 0 {
		return ""
	}
	peerNS := ns
	if l.NetNSID != nil {
		peerNS = ""
		for _, id := range ids {
			if id.NSID == *l.NetNSID {
				peerNS = id.Name
			}
		}
		if peerNS == "" {
			return "" // a namespace without a name: outside the lab
		}
	}
	var peers []ipLink
	ipJSON(t, peerNS, &peers, "link", "show")
	for _, p := range peers {
		if p.Index == l.LinkIndex {
			return peerNS + "/" + p.Name
		}
	}
	t.Errorf("%s: %s's peer index %d is not in %s", ns, l.Name, l.LinkIndex, peerNS)
	return ""
}

func deref(v *topology.VXLAN) any {
	if v == nil {
		return nil
	}
	return *v
}
