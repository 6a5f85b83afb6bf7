package nft

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func fakeWith(t *testing.T, tx *Transaction) *Fake {
	t.Helper()
	f := NewFake()
	if err := f.Run(context.Background(), tx); err != nil {
		t.Fatalf("running transaction: %v", err)
	}
	return f
}

func TestFakeSemantics(t *testing.T) {
	ctx := context.Background()
	base := func() *Transaction {
		tx := &Transaction{}
		tx.Add(&Table{Family: IPv4Family, Name: "kube-proxy", Comment: "rules for kube-proxy"})
		tx.Add(&Chain{Name: "services"})
		tx.Add(&Chain{Name: "reject-chain"})
		tx.Add(&Map{Name: "service-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
		tx.Add(&Set{Name: "cluster-ips", Type: "ipv4_addr"})
		tx.Add(&Element{Set: "service-ips", Key: []string{"10.96.0.1", "tcp", "443"}, Value: "goto reject-chain"})
		tx.Add(&Rule{Chain: "services", Rule: "ip daddr . meta l4proto . th dport vmap @service-ips"})
		return tx
	}
	tests := []struct {
		name    string
		ops     func(tx *Transaction)
		wantErr string
		notFnd  bool
	}{
		{"delete missing chain", func(tx *Transaction) { tx.Delete(&Chain{Name: "nope"}) }, `deleting chain "nope"`, true},
		{"delete missing element", func(tx *Transaction) {
			tx.Delete(&Element{Set: "cluster-ips", Key: []string{"10.96.0.9"}})
		}, `deleting element "10.96.0.9"`, true},
		{"map value conflict", func(tx *Transaction) {
			tx.Add(&Element{Set: "service-ips", Key: []string{"10.96.0.1", "tcp", "443"}, Value: "drop"})
		}, "exists with value", false},
		{"jump to missing chain", func(tx *Transaction) { tx.Add(&Rule{Chain: "services", Rule: "jump nowhere"}) }, `target chain "nowhere"`, true},
		{"missing set", func(tx *Transaction) { tx.Add(&Rule{Chain: "services", Rule: "ip daddr @nope drop"}) }, `set "nope"`, true},
		{"delete referenced chain", func(tx *Transaction) { tx.Delete(&Chain{Name: "reject-chain"}) }, "still referenced", false},
		{"delete referenced map", func(tx *Transaction) { tx.Delete(&Map{Name: "service-ips"}) }, "still referenced", false},
		{"key arity", func(tx *Transaction) { tx.Add(&Element{Set: "cluster-ips", Key: []string{"10.96.0.1", "tcp"}}) }, "key has 2 fields", false},
		{"set type change", func(tx *Transaction) {
			tx.Add(&Set{Name: "cluster-ips", Type: "ipv4_addr", Flags: []string{"interval"}})
		}, "exists with type", false},
		{"rule delete", func(tx *Transaction) { tx.Delete(&Rule{Chain: "services", Rule: "drop"}) }, "rules can only be added", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeWith(t, base())
			before := f.Dump()
			tx := &Transaction{}
			tx.Add(&Element{Set: "cluster-ips", Key: []string{"10.96.0.1"}}) // must be rolled back
			tc.ops(tx)
			err := f.Run(ctx, tx)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
			}
			if errors.Is(err, ErrNotFound) != tc.notFnd {
				t.Errorf("errors.Is(%v, ErrNotFound) = %v, want %v", err, !tc.notFnd, tc.notFnd)
			}
			if got := f.Dump(); got != before {
				t.Errorf("failed transaction changed the table:\n%s\nwant\n%s", got, before)
			}
		})
	}
}

func TestFakeAddDeleteIdiomAndFlush(t *testing.T) {
	ctx := context.Background()
	f := fakeWith(t, fullTx(shapesServices(), true))
	n, err := f.CountRules(ctx, "services")
	if err != nil || n != 3 {
		t.Fatalf("CountRules(services) = %d, %v; want 3", n, err)
	}
	// A second full sync (as the proxier's periodic resync) converges to
	// the same table.
	first := f.Dump()
	if err := f.Run(ctx, fullTx(shapesServices(), false)); err != nil {
		t.Fatal(err)
	}
	if got := f.Dump(); got != first {
		t.Errorf("resync changed the table:\n%s\nwant\n%s", got, first)
	}
	// Ensure-gone idiom: add then delete an object that does not exist.
	tx := &Transaction{}
	tx.Add(&Chain{Name: "stale"})
	tx.Delete(&Chain{Name: "stale"})
	tx.Flush(&Map{Name: "service-ips"})
	if err := f.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if els, err := f.ListElements(ctx, "service-ips"); err != nil || len(els) != 0 {
		t.Errorf("service-ips after flush: %v, %v", els, err)
	}
	if sets, err := f.ListSets(ctx); err != nil || !slices.Contains(sets, "service-ips") || !slices.Contains(sets, "cluster-ips") || !slices.IsSorted(sets) {
		t.Errorf("ListSets = %v, %v", sets, err)
	}
	if _, err := f.CountRules(ctx, "stale"); !errors.Is(err, ErrNotFound) {
		t.Errorf("CountRules(stale) error %v, want ErrNotFound", err)
	}
	if err := f.DeleteTable(ctx); err != nil || f.Dump() != "" {
		t.Errorf("DeleteTable: %v, dump %q", err, f.Dump())
	}
	if names, err := f.ListSets(ctx); err != nil || len(names) != 0 {
		t.Errorf("ListSets without table: %v, %v", names, err)
	}
	if names, err := f.ListChains(ctx); err != nil || len(names) != 0 {
		t.Errorf("ListChains without table: %v, %v", names, err)
	}
}

func TestFakeDumpGolden(t *testing.T) {
	tx := &Transaction{}
	tx.Add(&Table{Family: IPv4Family, Name: "kube-proxy", Comment: "rules for kube-proxy"})
	tx.Add(&Chain{Name: "nat-prerouting", Type: "nat", Hook: "prerouting", Priority: -100})
	tx.Add(&Chain{Name: "services"})
	tx.Add(&Set{Name: "cluster-ips", Type: "ipv4_addr", Comment: "Active ClusterIPs"})
	tx.Add(&Map{Name: "no-endpoint-services", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
	tx.Add(&Rule{Chain: "nat-prerouting", Rule: "jump services"})
	tx.Add(&Element{Set: "cluster-ips", Key: []string{"10.96.0.2"}})
	tx.Add(&Element{Set: "cluster-ips", Key: []string{"10.96.0.1"}})
	tx.Add(&Element{Set: "no-endpoint-services", Key: []string{"10.96.0.2", "tcp", "80"}, Value: "drop", Comment: "ns/svc/tcp/http"})
	want := `add table ip kube-proxy { comment "rules for kube-proxy" ; }
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy services
add set ip kube-proxy cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }
add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; }
add rule ip kube-proxy nat-prerouting jump services
add element ip kube-proxy cluster-ips { 10.96.0.1 }
add element ip kube-proxy cluster-ips { 10.96.0.2 }
add element ip kube-proxy no-endpoint-services { 10.96.0.2 . tcp . 80 comment "ns/svc/tcp/http" : drop }
`
	if got := fakeWith(t, tx).Dump(); got != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, want)
	}
}

// A Fake is bound to one table: an ip6 Fake takes `ip6 kube-proxy` and
// refuses a transaction naming the ip table, atomically.
func TestFakeFamily(t *testing.T) {
	ctx := context.Background()
	f := NewFakeFamily(IPv6Family)
	tx := &Transaction{}
	tx.Add(&Table{Family: IPv6Family, Name: "kube-proxy"})
	tx.Add(&Set{Name: "cluster-ips", Type: "ipv6_addr"})
	tx.Add(&Element{Set: "cluster-ips", Key: []string{"fd00:10:96::1"}})
	if err := f.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	before := f.Dump()
	if !strings.HasPrefix(before, "add table ip6 kube-proxy") || !strings.Contains(before, "add element ip6 kube-proxy cluster-ips { fd00:10:96::1 }") {
		t.Errorf("dump:\n%s", before)
	}
	tx = &Transaction{}
	tx.Add(&Element{Set: "cluster-ips", Key: []string{"fd00:10:96::2"}})
	tx.Add(&Table{Family: IPv4Family, Name: "kube-proxy"})
	if err := f.Run(ctx, tx); err == nil || !strings.Contains(err.Error(), "table ip kube-proxy") {
		t.Errorf("a transaction naming table ip kube-proxy: %v, want an error naming it", err)
	}
	if f.Dump() != before {
		t.Errorf("the failed transaction changed the table:\n%s", f.Dump())
	}
	if _, err := NewNetlink("inet", "kube-proxy"); err == nil {
		t.Error("NewNetlink accepted family inet")
	}
}
