package nftsim

import (
	"net/netip"
	"os"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

// BenchmarkTrace walks a first packet to a two-endpoint Service through
// the nftables table (overall.json) and, as the reference measured in the
// same run, through iptables/iptsim's iptables rules of a lab node
// (node2.save: a two-endpoint cluster IP), and reports the ratio.
func BenchmarkTrace(b *testing.B) {
	js, err := os.ReadFile("testdata/overall.json")
	if err != nil {
		b.Fatal(err)
	}
	rs, err := Parse(js)
	if err != nil {
		b.Fatal(err)
	}
	save, err := os.ReadFile("../../iptables/iptsim/testdata/node2.save")
	if err != nil {
		b.Fatal(err)
	}
	ipt, err := iptsim.Parse(string(save))
	if err != nil {
		b.Fatal(err)
	}
	nftPkt := iptsim.Packet{Src: netip.MustParseAddr("192.168.0.100"), Dst: netip.MustParseAddrPort("192.168.99.33:80"), Proto: "tcp"}
	iptPkt := iptsim.Packet{Src: netip.MustParseAddr("10.244.1.2"), Dst: netip.MustParseAddrPort("10.111.22.24:80"), Proto: "tcp"}
	iptNode := iptsim.Node{Addrs: []netip.Addr{netip.MustParseAddr("192.168.56.11"), netip.MustParseAddr("10.244.1.1")}}
	var nftNs, iptNs float64
	b.Run("nftables", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if outs, err := rs.Trace(node, nftPkt); err != nil || len(outs) != 2 {
				b.Fatalf("%v %v", outs, err)
			}
		}
		nftNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("iptables-reference", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if outs, err := ipt.Trace(iptNode, iptPkt); err != nil || len(outs) != 2 {
				b.Fatalf("%v %v", outs, err)
			}
		}
		iptNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	if iptNs > 0 && nftNs > 0 {
		b.Logf("nftables walk %.0f ns, iptables reference %.0f ns: ratio %.2f", nftNs, iptNs, nftNs/iptNs)
	}
}
