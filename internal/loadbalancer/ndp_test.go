package loadbalancer

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
)

// waitLinkLocal waits until eth1 of ns has a usable link-local address: an
// NDP socket binds to it, and it stays tentative for a second or so after
// the link comes up (duplicate address detection).
func waitLinkLocal(t *testing.T, ns string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, ns+"'s eth1 has a link-local address past duplicate address detection", func() error {
		out, err := exec.Command("ip", "-n", ns, "-6", "addr", "show", "dev", "eth1", "scope", "link").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "inet6 fe80:") || strings.Contains(string(out), "tentative") {
			return errorf("%v: %s", err, out)
		}
		return nil
	})
}

func probe6(t *testing.T, ns string, ip netip.Addr) []net.HardwareAddr {
	t.Helper()
	var macs []net.HardwareAddr
	err := netns.DoPath(netns.NetNSPath(ns), func() error {
		var err error
		macs, err = ProbeNDP(context.Background(), "eth1", ip, 300*time.Millisecond)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return macs
}

func TestNDPResponder(t *testing.T) {
	speaker, client := twoHosts(t)
	waitLinkLocal(t, speaker)
	waitLinkLocal(t, client)
	var r *NDPResponder
	err := netns.DoPath(netns.NetNSPath(speaker), func() error {
		ifname, err := InterfaceWith(netip.MustParseAddr("2001:db8::10"))
		if err != nil {
			return err
		}
		r, err = ListenNDP(ifname, testutil.Logger(t))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	vip, other := netip.MustParseAddr("2001:db8::240"), netip.MustParseAddr("2001:db8::241")
	only := func(ip netip.Addr) {
		t.Helper()
		macs := probe6(t, client, ip)
		if len(macs) != 1 || !bytes.Equal(macs[0], r.HardwareAddr()) {
			t.Fatalf("who-has %s: advertised %v, want exactly the speaker's %s", ip, macs, r.HardwareAddr())
		}
	}
	none := func(ip netip.Addr, why string) {
		t.Helper()
		if macs := probe6(t, client, ip); len(macs) != 0 {
			t.Fatalf("%s: %s advertised at %v", why, ip, macs)
		}
	}

	t.Run("answers only for the addresses it was given", func(t *testing.T) {
		none(vip, "before Set")
		if err := r.Set([]netip.Addr{vip}); err != nil {
			t.Fatal(err)
		}
		only(vip)
		none(other, "not given")
		// The kernel does not own the address: nothing else answers, and
		// the speaker's own addresses are untouched.
		out, _ := exec.Command("ip", "-n", speaker, "-o", "addr", "show", "dev", "eth1").CombinedOutput()
		if strings.Contains(string(out), vip.String()) {
			t.Errorf("%s was configured on the interface: %s", vip, out)
		}
	})

	t.Run("a real client resolves the address to the speaker's MAC", func(t *testing.T) {
		// The kernel's own neighbour discovery, as curl from a lab client
		// would start it.
		exec.Command("ip", "netns", "exec", client, "ping", "-6", "-c1", "-W1", vip.String()).Run()
		if got := neigh(t, client, vip); !strings.Contains(got, r.HardwareAddr().String()) {
			t.Fatalf("client neighbour entry %q, want lladdr %s", got, r.HardwareAddr())
		}
	})

	t.Run("the unsolicited advertisement on takeover overrides a neighbour's stale entry", func(t *testing.T) {
		if out, err := exec.Command("ip", "-n", client, "-6", "neigh", "replace", other.String(), "lladdr", "02:00:00:00:00:01",
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

	t.Run("two addresses in one solicited-node group", func(t *testing.T) {
		// Both are in ff02::1:ffbc:240: leaving one must not leave the
		// group the other needs.
		a, b := netip.MustParseAddr("2001:db8::1:bc:240"), netip.MustParseAddr("2001:db8::2:bc:240")
		if err := r.Set([]netip.Addr{vip, other, a, b}); err != nil {
			t.Fatal(err)
		}
		only(a)
		only(b)
		if err := r.Set([]netip.Addr{vip, other, b}); err != nil {
			t.Fatal(err)
		}
		none(a, "withdrawn")
		only(b)
	})

	t.Run("withdrawn and closed: no answer", func(t *testing.T) {
		if err := r.Set([]netip.Addr{other}); err != nil {
			t.Fatal(err)
		}
		none(vip, "withdrawn")
		only(other)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		none(other, "closed")
	})
}
