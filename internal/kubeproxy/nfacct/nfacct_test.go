package nfacct

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/minikit/minikit/internal/netns"
)

// inNetns runs fn on a thread locked into a fresh network namespace, removed
// at the end: accounting objects are per namespace, and nothing here may
// touch the root namespace's.
func inNetns(t *testing.T, fn func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (CI runs as root)")
	}
	name := "mkt-parity-nfacct"
	exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	if err := netns.DoPath(netns.NetNSPath(name), fn); err != nil {
		t.Fatal(err)
	}
}

// TestNetlink creates a counter, counts packets into it with an iptables rule
// and reads them back, in a throwaway namespace.
func TestNetlink(t *testing.T) {
	inNetns(t, func() error {
		n := Netlink{}
		if _, err := n.Get("localhost_nps_accepted_pkts"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get before Ensure: %v, want ErrNotFound", err)
		}
		for i := 0; i < 2; i++ { // idempotent
			if err := n.Ensure("localhost_nps_accepted_pkts"); err != nil {
				return err
			}
		}
		c, err := n.Get("localhost_nps_accepted_pkts")
		if err != nil {
			return err
		}
		if c.Name != "localhost_nps_accepted_pkts" || c.Packets != 0 {
			t.Errorf("fresh counter %+v", c)
		}
		// The iptables rule is exec'd from this locked thread's namespace.
		for _, args := range [][]string{
			{"ip", "link", "set", "lo", "up"},
			{"iptables", "-A", "OUTPUT", "-o", "lo", "-p", "icmp", "-m", "nfacct", "--nfacct-name", "localhost_nps_accepted_pkts"},
			{"ping", "-c", "2", "-W", "1", "127.0.0.1"},
		} {
			if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", args, err, out)
			}
		}
		c, err = n.Get("localhost_nps_accepted_pkts")
		if err != nil {
			return err
		}
		// Two echo requests and two replies leave through lo.
		if c.Packets != 4 || c.Bytes == 0 {
			t.Errorf("after 2 pings: %+v, want 4 packets", c)
		}
		if err := n.Delete("localhost_nps_accepted_pkts"); err == nil {
			t.Errorf("deleting a counter a rule uses succeeded")
		}
		if out, err := exec.Command("iptables", "-F", "OUTPUT").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if err := n.Delete("localhost_nps_accepted_pkts"); err != nil {
			return err
		}
		if err := n.Delete("localhost_nps_accepted_pkts"); err != nil {
			t.Errorf("deleting a missing counter: %v", err)
		}
		if err := n.Ensure("a_name_longer_than_thirty_one_bytes"); err == nil {
			t.Errorf("a 35-byte name was accepted")
		}
		return nil
	})
}
