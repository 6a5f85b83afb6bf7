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

// The netlink answers agree with the iptables binaries, in a fresh namespace:
// no table, then a chain created by iptables, then another table's chains.
func TestNFTablesLookups(t *testing.T) {
	if detectBackend() != NFTables {
		t.Skip("iptables is not the nf_tables backend here")
	}
	inNewNetNS(t, func() {
		if ok, err := nftChainExists(TableMangle, "KUBE-PROXY-CANARY"); err != nil || ok {
			t.Errorf("in a fresh namespace: exists = %v, %v; want false, nil", ok, err)
		}
		if out, err := exec.Command("iptables", "-w", "5", "-t", "mangle", "-N", "KUBE-PROXY-CANARY").CombinedOutput(); err != nil {
			t.Fatalf("iptables -N: %v: %s", err, out)
		}
		if ok, err := nftChainExists(TableMangle, "KUBE-PROXY-CANARY"); err != nil || !ok {
			t.Errorf("after iptables -N: exists = %v, %v; want true, nil", ok, err)
		}
		if ok, err := nftChainExists(TableNAT, "KUBE-PROXY-CANARY"); err != nil || ok {
			t.Errorf("in another table: exists = %v, %v; want false, nil", ok, err)
		}
		names, err := nftChains(TableMangle)
		if err != nil || !slices.Contains(names, "KUBE-PROXY-CANARY") {
			t.Errorf("nftChains(mangle) = %v, %v; want the canary among them", names, err)
		}
	})
}
