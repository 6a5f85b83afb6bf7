package loadbalancer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
)

// twoHosts makes two throwaway network namespaces joined by a veth pair,
// "speaker" (eth1, 192.0.2.10/24, 2001:db8::10/64) and "client" (eth1,
// 192.0.2.100/24, 2001:db8::100/64), and removes them when the test ends.
func twoHosts(t *testing.T) (speaker, client string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("this test needs root, and CI runs as root")
		}
		t.Skip("needs root")
	}
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	speaker, client = "mklb-s-"+id, "mklb-c-"+id
	for _, ns := range []string{speaker, client} {
		if err := netns.CreateNamed(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netns.DeleteNamed(ns) })
	}
	for _, argv := range [][]string{
		{"ip", "-n", speaker, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1", "netns", client},
		{"ip", "-n", speaker, "addr", "add", "192.0.2.10/24", "dev", "eth1"},
		{"ip", "-n", client, "addr", "add", "192.0.2.100/24", "dev", "eth1"},
		{"ip", "-n", speaker, "addr", "add", "2001:db8::10/64", "dev", "eth1", "nodad"},
		{"ip", "-n", client, "addr", "add", "2001:db8::100/64", "dev", "eth1", "nodad"},
		{"ip", "-n", speaker, "link", "set", "eth1", "up"},
		{"ip", "-n", client, "link", "set", "eth1", "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	return speaker, client
}

func probe(t *testing.T, ns string, ip netip.Addr) []net.HardwareAddr {
	t.Helper()
	var macs []net.HardwareAddr
	err := netns.DoPath(netns.NetNSPath(ns), func() error {
		var err error
		macs, err = ProbeARP(context.Background(), "eth1", ip, 300*time.Millisecond)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return macs
}

func neigh(t *testing.T, ns string, ip netip.Addr) string {
	out, _ := exec.Command("ip", "-n", ns, "neigh", "show", ip.String(), "dev", "eth1").CombinedOutput()
	return strings.TrimSpace(string(out))
}

func TestARPResponder(t *testing.T) {
	speaker, client := twoHosts(t)
	var r *ARPResponder
	var ifname string
	err := netns.DoPath(netns.NetNSPath(speaker), func() error {
		var err error
		if ifname, err = InterfaceWith(netip.MustParseAddr("192.0.2.10")); err != nil {
			return err
		}
		r, err = ListenARP(ifname, testutil.Logger(t))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if ifname != "eth1" {
		t.Errorf("InterfaceWith(node IP) = %q, want eth1", ifname)
	}
	vip, other := netip.MustParseAddr("192.0.2.240"), netip.MustParseAddr("192.0.2.241")

	t.Run("answers only for the addresses it was given", func(t *testing.T) {
		if macs := probe(t, client, vip); len(macs) != 0 {
			t.Fatalf("answered %v before Set", macs)
		}
		if err := r.Set([]netip.Addr{vip}); err != nil {
			t.Fatal(err)
		}
		macs := probe(t, client, vip)
		if len(macs) != 1 || !bytes.Equal(macs[0], r.HardwareAddr()) {
			t.Fatalf("who-has %s: answers %v, want exactly the speaker's %s", vip, macs, r.HardwareAddr())
		}
		if macs := probe(t, client, other); len(macs) != 0 {
			t.Fatalf("answered for %s, not given: %v", other, macs)
		}
		// The kernel does not own the address: nothing else answers, and
		// the speaker's own addresses are untouched.
		out, _ := exec.Command("ip", "-n", speaker, "-o", "addr", "show", "dev", "eth1").CombinedOutput()
		if strings.Contains(string(out), vip.String()) {
			t.Errorf("%s was configured on the interface: %s", vip, out)
		}
	})

	t.Run("a real client resolves and reaches the address's MAC", func(t *testing.T) {
		// The kernel's own resolution, as curl from a lab client would do.
		exec.Command("ip", "netns", "exec", client, "ping", "-c1", "-W1", vip.String()).Run()
		if got := neigh(t, client, vip); !strings.Contains(got, r.HardwareAddr().String()) {
			t.Fatalf("client neighbour entry %q, want lladdr %s", got, r.HardwareAddr())
		}
	})

	t.Run("gratuitous ARP on takeover rewrites a neighbour's stale entry", func(t *testing.T) {
		if out, err := exec.Command("ip", "-n", client, "neigh", "replace", other.String(), "lladdr", "02:00:00:00:00:01",
			"dev", "eth1", "nud", "stale").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if err := r.Set([]netip.Addr{vip, other}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 3*time.Second, "client's entry for "+other.String()+" points at the speaker", func() error {
			if got := neigh(t, client, other); !strings.Contains(got, r.HardwareAddr().String()) {
				return errorf("entry %q", got)
			}
			return nil
		})
	})

	t.Run("withdrawn and closed: no answer", func(t *testing.T) {
		if err := r.Set([]netip.Addr{other}); err != nil {
			t.Fatal(err)
		}
		if macs := probe(t, client, vip); len(macs) != 0 {
			t.Fatalf("withdrawn %s still answered by %v", vip, macs)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if macs := probe(t, client, other); len(macs) != 0 {
			t.Fatalf("closed responder answered %v", macs)
		}
	})
}
