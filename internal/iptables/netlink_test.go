package iptables

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// inNewNetNS runs fn on a thread in a network namespace of its own, which
// disappears with the thread: the root namespace's iptables are never touched.
func inNewNetNS(t *testing.T, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		fn()
	}()
	<-done
}

// tablesEmpty asks nftTablesEmpty about filter and nat, from a fresh dump.
func tablesEmpty() (bool, error) {
	chains, err := nftChainDump(unix.AF_INET)
	if err != nil {
		return false, err
	}
	return nftTablesEmpty(unix.AF_INET, []string{TableFilter, TableNAT}, chains)
}

// The netlink answers agree with the iptables binaries, in a fresh namespace:
// no table, then a chain created by iptables, then another table's chains.
func TestNFTablesLookups(t *testing.T) {
	if detectBackend() != NFTables {
		t.Skip("iptables is not the nf_tables backend here")
	}
	inNewNetNS(t, func() {
		if empty, err := tablesEmpty(); err != nil || !empty {
			t.Errorf("fresh namespace: empty = %v, %v; want true", empty, err)
		}
		for _, step := range []struct {
			argv  []string
			empty bool
		}{
			{[]string{"-t", "nat", "-S"}, true}, // creates the nat table's built-in chains only
			{[]string{"-t", "filter", "-A", "FORWARD", "-j", "ACCEPT"}, false},
			{[]string{"-t", "filter", "-F", "FORWARD"}, true},
			{[]string{"-t", "filter", "-P", "INPUT", "DROP"}, false},
			{[]string{"-t", "filter", "-P", "INPUT", "ACCEPT"}, true},
			{[]string{"-t", "nat", "-N", "OTHER"}, false},
			{[]string{"-t", "nat", "-X", "OTHER"}, true},
			{[]string{"-t", "mangle", "-A", "OUTPUT", "-j", "ACCEPT"}, true}, // another table
		} {
			if out, err := exec.Command("iptables", append([]string{"-w", "5"}, step.argv...)...).CombinedOutput(); err != nil {
				t.Fatalf("iptables %v: %v: %s", step.argv, err, out)
			}
			if empty, err := tablesEmpty(); err != nil || empty != step.empty {
				t.Errorf("after iptables %v: empty = %v, %v; want %v", step.argv, empty, err, step.empty)
			}
		}
		exec.Command("iptables", "-w", "5", "-t", "mangle", "-F", "OUTPUT").Run()
		if ok, err := nftChainExists(unix.AF_INET, TableMangle, "KUBE-PROXY-CANARY"); err != nil || ok {
			t.Errorf("in a fresh namespace: exists = %v, %v; want false, nil", ok, err)
		}
		if out, err := exec.Command("iptables", "-w", "5", "-t", "mangle", "-N", "KUBE-PROXY-CANARY").CombinedOutput(); err != nil {
			t.Fatalf("iptables -N: %v: %s", err, out)
		}
		if ok, err := nftChainExists(unix.AF_INET, TableMangle, "KUBE-PROXY-CANARY"); err != nil || !ok {
			t.Errorf("after iptables -N: exists = %v, %v; want true, nil", ok, err)
		}
		if ok, err := nftChainExists(unix.AF_INET, TableNAT, "KUBE-PROXY-CANARY"); err != nil || ok {
			t.Errorf("in another table: exists = %v, %v; want false, nil", ok, err)
		}
		all, err := nftChainDump(unix.AF_INET)
		names := chainNames(all, TableMangle)
		if err != nil || !slices.Contains(names, "KUBE-PROXY-CANARY") {
			t.Errorf("chainNames(mangle) = %v, %v; want the canary among them", names, err)
		}
	})
}
