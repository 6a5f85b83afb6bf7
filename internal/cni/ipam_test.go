package cni

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func newTestIPAM(t *testing.T, cidr string) (*IPAM, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ipam.json")
	m, err := NewIPAM(path, netip.MustParsePrefix(cidr))
	if err != nil {
		t.Fatal(err)
	}
	return m, path
}

func mustAllocate(t *testing.T, m *IPAM, owner string) netip.Addr {
	t.Helper()
	ip, err := m.Allocate(owner)
	if err != nil {
		t.Fatalf("Allocate(%q): %v", owner, err)
	}
	return ip
}

func TestIPAMAllocateSequence(t *testing.T) {
	m, _ := newTestIPAM(t, "10.244.1.0/24")
	for i, want := range []string{"10.244.1.2", "10.244.1.3", "10.244.1.4"} {
		if got := mustAllocate(t, m, fmt.Sprintf("pod-%d", i)); got.String() != want {
			t.Errorf("allocation %d = %s, want %s", i, got, want)
		}
	}
	if got := mustAllocate(t, m, "pod-1"); got.String() != "10.244.1.3" {
		t.Errorf("re-Allocate of an owner = %s, want its existing 10.244.1.3", got)
	}
}

func TestIPAMNeverHandsOutReservedAddresses(t *testing.T) {
	// A /29 has .0 network, .1 gateway, .7 broadcast: five usable.
	m, _ := newTestIPAM(t, "10.244.9.0/29")
	seen := map[netip.Addr]bool{}
	for i := range 5 {
		ip := mustAllocate(t, m, fmt.Sprintf("pod-%d", i))
		switch ip.String() {
		case "10.244.9.0", "10.244.9.1", "10.244.9.7":
			t.Errorf("handed out reserved address %s", ip)
		}
		if seen[ip] {
			t.Errorf("handed out %s twice", ip)
		}
		seen[ip] = true
	}
	_, err := m.Allocate("one-too-many")
	if !errors.Is(err, ErrExhausted) {
		t.Fatalf("Allocate on a full CIDR = %v, want ErrExhausted", err)
	}
	if want := `allocating address for "one-too-many" in 10.244.9.0/29: no free address`; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	for _, ip := range []string{"10.244.9.0", "10.244.9.1", "10.244.9.7", "10.244.10.2"} {
		if err := m.Reserve("x", netip.MustParseAddr(ip)); err == nil {
			t.Errorf("Reserve(%s) succeeded", ip)
		}
	}
}

func TestIPAMRoundRobinAfterRelease(t *testing.T) {
	m, _ := newTestIPAM(t, "10.244.9.0/29")
	a := mustAllocate(t, m, "a") // .2
	mustAllocate(t, m, "b")      // .3
	if err := m.Release("a"); err != nil {
		t.Fatal(err)
	}
	if got := mustAllocate(t, m, "c"); got == a {
		t.Errorf("released %s reused immediately", a)
	}
	mustAllocate(t, m, "d") // .5
	mustAllocate(t, m, "e") // .6
	// Wraps past the broadcast address to the freed .2.
	if got := mustAllocate(t, m, "f"); got != a {
		t.Errorf("after wrap-around got %s, want the freed %s", got, a)
	}
	if err := m.Release("nobody"); err != nil {
		t.Errorf("Release of an unknown owner: %v", err)
	}
}

func TestIPAMPersistsAcrossReopen(t *testing.T) {
	m, path := newTestIPAM(t, "10.244.1.0/24")
	a := mustAllocate(t, m, "default/a")
	b := mustAllocate(t, m, "default/b")
	if err := m.Release("default/a"); err != nil {
		t.Fatal(err)
	}
	if err := m.Reserve("default/adopted", netip.MustParseAddr("10.244.1.100")); err != nil {
		t.Fatal(err)
	}

	m2, err := NewIPAM(path, netip.MustParsePrefix("10.244.1.0/24"))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	want := map[string]netip.Addr{"default/b": b, "default/adopted": netip.MustParseAddr("10.244.1.100")}
	if got := m2.Owners(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Owners after reopen = %v, want %v", got, want)
	}
	// The round-robin position survives too: no immediate reuse of a.
	if got := mustAllocate(t, m2, "default/c"); got == a || got == b {
		t.Errorf("after reopen allocated %s", got)
	}
	// No temp files are left next to the state file.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the state file", len(entries))
	}
	if _, err := NewIPAM(path, netip.MustParsePrefix("10.244.2.0/24")); err == nil || !strings.Contains(err.Error(), "is for 10.244.1.0/24") {
		t.Errorf("reopen with another CIDR = %v, want an error", err)
	}
}

func TestIPAMRejectsCorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	for _, content := range []string{
		`{"cidr":"10.244.1.0/24","owners":{`,
		`{"cidr":"10.244.1.0/24","owners":{"a":"10.244.1.1"}}`,
		`{"cidr":"10.244.1.0/24","owners":{"a":"10.244.1.5","b":"10.244.1.5"}}`,
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := NewIPAM(path, netip.MustParsePrefix("10.244.1.0/24")); err == nil {
			t.Errorf("NewIPAM accepted %s", content)
		}
	}
}

func TestIPAMReserve(t *testing.T) {
	m, _ := newTestIPAM(t, "10.244.1.0/24")
	ip := netip.MustParseAddr("10.244.1.50")
	if err := m.Reserve("a", ip); err != nil {
		t.Fatal(err)
	}
	if err := m.Reserve("a", ip); err != nil {
		t.Errorf("Reserve of the same pair again: %v", err)
	}
	if err := m.Reserve("b", ip); err == nil || err.Error() != `reserving 10.244.1.50 for "b": already held by "a"` {
		t.Errorf("Reserve of a taken address = %v", err)
	}
	if got := mustAllocate(t, m, "a"); got != ip {
		t.Errorf("Allocate after Reserve = %s, want %s", got, ip)
	}
	// Moving an owner frees its old address.
	if err := m.Reserve("a", netip.MustParseAddr("10.244.1.51")); err != nil {
		t.Fatal(err)
	}
	if err := m.Reserve("b", ip); err != nil {
		t.Errorf("old address of a moved owner not free: %v", err)
	}
}

func TestIPAMConcurrentAllocationsAreUnique(t *testing.T) {
	m, path := newTestIPAM(t, "10.244.1.0/24")
	const owners = 200
	var wg sync.WaitGroup
	got := make([]netip.Addr, owners)
	errs := make([]error, owners)
	for i := range owners {
		wg.Go(func() {
			// Every owner asks twice, racing with itself as well.
			got[i], errs[i] = m.Allocate(fmt.Sprintf("pod-%d", i))
			if again, err := m.Allocate(fmt.Sprintf("pod-%d", i)); err == nil && again != got[i] {
				errs[i] = fmt.Errorf("second Allocate = %s, first %s", again, got[i])
			}
		})
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i, ip := range got {
		if errs[i] != nil {
			t.Fatalf("pod-%d: %v", i, errs[i])
		}
		if j, dup := seen[ip]; dup {
			t.Errorf("%s given to pod-%d and pod-%d", ip, j, i)
		}
		seen[ip] = i
		if !usableHost(m.CIDR(), ip) {
			t.Errorf("pod-%d got unusable %s", i, ip)
		}
	}
	m2, err := NewIPAM(path, m.CIDR())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m2.Owners()); n != owners {
		t.Errorf("reopened file has %d owners, want %d", n, owners)
	}
}

func TestIPAMSaveFailureRollsBack(t *testing.T) {
	m, path := newTestIPAM(t, "10.244.1.0/24")
	mustAllocate(t, m, "a")
	// A non-empty directory where the state file goes makes the rename fail.
	os.Remove(path)
	if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allocate("b"); err == nil {
		t.Fatal("Allocate succeeded although the state could not be saved")
	}
	if err := m.Release("a"); err == nil {
		t.Fatal("Release succeeded although the state could not be saved")
	}
	if got := m.Owners(); len(got) != 1 || got["a"].String() != "10.244.1.2" {
		t.Errorf("failed calls changed the state: %v", got)
	}
	os.RemoveAll(path)
	if got := mustAllocate(t, m, "b"); got.String() != "10.244.1.3" {
		t.Errorf("after recovery allocated %s, want 10.244.1.3", got)
	}
}

// An IPv6-only node's range: addresses from ::2 (::1 is the gateway), the
// pool its first 65536 addresses, wrapping at the end of it, and a pod's MAC
// from the address's last four bytes.
func TestIPAMIPv6(t *testing.T) {
	m, _ := newTestIPAM(t, "fd00:10:244:1::/64")
	for i, want := range []string{"fd00:10:244:1::2", "fd00:10:244:1::3"} {
		if got := mustAllocate(t, m, fmt.Sprintf("pod-%d", i)); got.String() != want {
			t.Errorf("allocation %d = %s, want %s", i, got, want)
		}
	}
	cidr := netip.MustParsePrefix("fd00:10:244:1::/64")
	for ip, want := range map[string]bool{
		"fd00:10:244:1::": false, "fd00:10:244:1::1": false, "fd00:10:244:1::2": true,
		"fd00:10:244:1::ffff": true, "fd00:10:244:1::1:0": false, "fd00:10:244:2::2": false, "10.244.1.2": false,
	} {
		if got := usableHost(cidr, netip.MustParseAddr(ip)); got != want {
			t.Errorf("usableHost(%s, %s) = %v, want %v", cidr, ip, got, want)
		}
	}
	if err := m.Reserve("last", netip.MustParseAddr("fd00:10:244:1::ffff")); err != nil {
		t.Fatal(err)
	}
	m.last = netip.MustParseAddr("fd00:10:244:1::ffff")
	if got := mustAllocate(t, m, "wrapped"); got.String() != "fd00:10:244:1::4" {
		t.Errorf("allocation after the pool's end = %s, want fd00:10:244:1::4", got)
	}
	if got := podMAC(netip.MustParseAddr("fd00:10:244:1::1:2")).String(); got != "0a:58:00:01:00:02" {
		t.Errorf("podMAC = %s", got)
	}
	for _, bad := range []string{"fd00::/120", "::ffff:10.0.0.0/120"} {
		if _, err := NewIPAM(filepath.Join(t.TempDir(), "ipam.json"), netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("NewIPAM(%s) accepted a range too small for the IPv6 pool", bad)
		}
	}
}
