package kubeproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/nft"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// kernelTee applies every transaction to the kernel of a network namespace
// with `nft -f` (the transaction's text, one atomic batch) before the Fake:
// the kernel must accept every rule text the renderer writes, and every
// partial transaction, as the Fake does.
type kernelTee struct {
	*nft.Fake
	ns string
}

func (k *kernelTee) Run(ctx context.Context, tx *nft.Transaction) error {
	text, err := nft.RenderTransaction(nft.IPv4Family, nftTableName, tx)
	if err != nil {
		return err
	}
	if out, err := nsNFT(k.ns, text, "-f", "-"); err != nil {
		return fmt.Errorf("nft -f in %s: %v: %s\n--- transaction:\n%s", k.ns, err, out, text)
	}
	return k.Fake.Run(ctx, tx)
}

func nsNFT(ns, stdin string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, "nft"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// newNetns makes a throwaway network namespace removed when the test ends.
func newNetns(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (it creates network namespaces)")
	}
	b := make([]byte, 3)
	rand.Read(b)
	ns := "mkt-nftproxy-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	return ns
}

// listTable is `nft list table ip kube-proxy` with its chains, sets and maps
// sorted by name and every set's and map's elements sorted: the kernel lists
// objects in creation order and hash sets in its own order.
func listTable(t *testing.T, ns string) string {
	t.Helper()
	return listTableFamily(t, ns, nft.IPv4Family)
}

func listTableFamily(t *testing.T, ns string, fam nft.Family) string {
	t.Helper()
	out, err := nsNFT(ns, "", "list", "table", string(fam), nftTableName)
	if err != nil {
		t.Fatalf("nft list table in %s: %v: %s", ns, err, out)
	}
	var b strings.Builder
	lines := strings.Split(out, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		start := strings.Index(l, "elements = { ")
		if start < 0 {
			b.WriteString(l + "\n")
			continue
		}
		body := l[start+len("elements = { "):]
		for !strings.HasSuffix(strings.TrimSpace(body), "}") {
			i++
			body += " " + strings.TrimSpace(lines[i])
		}
		body = strings.TrimSuffix(strings.TrimSpace(body), "}")
		var elems []string
		for _, e := range strings.Split(body, ",") {
			if e = strings.TrimSpace(e); e != "" {
				elems = append(elems, e)
			}
		}
		sort.Strings(elems)
		b.WriteString(l[:start] + "elements = { " + strings.Join(elems, ", ") + " }\n")
	}
	// A block (a chain, set or map, or the table's comment) starts at a line
	// indented once.
	var blocks []string
	var cur strings.Builder
	for _, l := range strings.Split(b.String(), "\n") {
		if l == "" {
			continue
		}
		if (l == "}" || len(l) > 1 && l[0] == '\t' && l[1] != '\t' && l[1] != '}') && cur.Len() > 0 {
			blocks = append(blocks, cur.String())
			cur.Reset()
		}
		cur.WriteString(l + "\n")
	}
	blocks = append(blocks, cur.String())
	sort.Strings(blocks)
	return strings.Join(blocks, "")
}

// TestNFTTransactionsInTheKernel runs the renderer's transactions through
// the kernel (nft -f in a network namespace of its own): a full sync of every
// service shape, then random partial syncs. The kernel accepts each of them,
// and the table they leave lists the same as the Fake's whole table loaded
// into a second, fresh namespace: partial transactions do in the kernel what
// the Fake says they do.
func TestNFTTransactionsInTheKernel(t *testing.T) {
	nsA, nsB := newNetns(t), newNetns(t)
	tee := &kernelTee{Fake: nft.NewFake(), ns: nsA}
	p, clock, _ := testNFTProxier(t, tee)
	loadShapes(p)
	mustSyncNFT(t, p)

	rng := mrand.New(mrand.NewPCG(3, 5))
	svcs := map[string]*corev1.Service{}
	slices := map[string]*discovery.EndpointSlice{}
	for step := 0; step < 60; step++ {
		name := fmt.Sprint("s", rng.IntN(8))
		switch op := rng.IntN(10); {
		case op < 3 || svcs[name] == nil:
			svcs[name] = randomNFTService(rng, name)
			p.OnServiceUpdate(svcs[name])
		case op < 8:
			slices[name] = randomSlice(rng, name)
			p.OnEndpointSliceUpdate(slices[name])
		default:
			p.OnServiceDelete(svcs[name])
			delete(svcs, name)
		}
		mustSyncNFT(t, p)
		clock.Step(700 * time.Millisecond)
	}
	clock.Step(2 * time.Second)
	mustSyncNFT(t, p)
	if st := p.Stats(); st.FullSyncs != 1 || st.PartialSyncs < 30 {
		t.Fatalf("want one full sync and partial ones, got %+v", st)
	}

	if out, err := nsNFT(nsB, tee.Dump(), "-f", "-"); err != nil {
		t.Fatalf("loading the Fake's dump: %v: %s", err, out)
	}
	if got, want := listTable(t, nsA), listTable(t, nsB); got != want {
		t.Fatalf("the kernel after partial syncs differs from the Fake's table:\n%s", lineDiff(want, got))
	}
}

// execTee applies every transaction with a backend (Netlink) and, as text
// through `nft -f`, to a second namespace: the Exec way, kube-proxy's.
type execTee struct {
	nft.Interface
	ns  string
	fam nft.Family // "" is ip
}

func (e *execTee) Run(ctx context.Context, tx *nft.Transaction) error {
	if err := e.Interface.Run(ctx, tx); err != nil {
		return err
	}
	fam := e.fam
	if fam == "" {
		fam = nft.IPv4Family
	}
	text, err := nft.RenderTransaction(fam, nftTableName, tx)
	if err != nil {
		return err
	}
	if out, err := nsNFT(e.ns, text, "-f", "-"); err != nil {
		return fmt.Errorf("nft -f in %s: %v: %s", e.ns, err, out)
	}
	return nil
}

// loadShapes gives every service shape a namespace, ClusterIP and NodePort
// of its own so that they coexist, and loads them.
func loadShapes(p *NFTProxier) {
	for i, s := range shapes() {
		svc := s.svc.DeepCopy()
		svc.Namespace = fmt.Sprint("c", i)
		svc.Spec.ClusterIP = fmt.Sprintf("10.96.2.%d", 10+i)
		if svc.Spec.Ports[0].NodePort != 0 {
			svc.Spec.Ports[0].NodePort = int32(31000 + i)
		}
		p.OnServiceUpdate(svc)
		for _, sl := range s.slices {
			sl := sl.DeepCopy()
			sl.Namespace = svc.Namespace
			p.OnEndpointSliceUpdate(sl)
		}
	}
}

// TestNFTNetlinkMatchesExec runs a full sync of every shape and random
// partial syncs through the Netlink backend in one namespace and the same
// transactions through `nft -f` in another: `nft list table ip kube-proxy`
// lists the same in both, and the drift check, reading through Netlink,
// finds nothing changed.
func TestNFTNetlinkMatchesExec(t *testing.T) {
	nsA, nsB := newNetns(t), newNetns(t)
	var nl *nft.Netlink
	if err := netns.DoPath(netns.NetNSPath(nsA), func() error {
		var err error
		nl, err = nft.NewNetlink(nft.IPv4Family, nftTableName)
		return err
	}); err != nil {
		t.Fatalf("netlink backend in %s: %v", nsA, err)
	}
	t.Cleanup(func() { nl.Close() })
	p, clock, _ := testNFTProxier(t, &execTee{Interface: nl, ns: nsB})
	loadShapes(p)
	mustSyncNFT(t, p)
	if got, want := listTable(t, nsA), listTable(t, nsB); got != want {
		t.Fatalf("after the full sync, Netlink and nft -f differ:\n%s", lineDiff(want, got))
	}
	rng := mrand.New(mrand.NewPCG(9, 9))
	svcs := map[string]*corev1.Service{}
	for step := 0; step < 40; step++ {
		name := fmt.Sprint("s", rng.IntN(8))
		switch op := rng.IntN(10); {
		case op < 3 || svcs[name] == nil:
			svcs[name] = randomNFTService(rng, name)
			p.OnServiceUpdate(svcs[name])
		case op < 8:
			p.OnEndpointSliceUpdate(randomSlice(rng, name))
		default:
			p.OnServiceDelete(svcs[name])
			delete(svcs, name)
		}
		mustSyncNFT(t, p)
		clock.Step(700 * time.Millisecond)
	}
	if got, want := listTable(t, nsA), listTable(t, nsB); got != want {
		t.Fatalf("after partial syncs, Netlink and nft -f differ:\n%s", lineDiff(want, got))
	}
	if d := p.checkDrift(context.Background()); d != "" {
		t.Fatalf("drift check through Netlink: %s", d)
	}
	// A later full sync diffs against what Netlink lists.
	p.forceFullSync()
	mustSyncNFT(t, p)
	if got, want := listTable(t, nsA), listTable(t, nsB); got != want {
		t.Fatalf("after a second full sync, Netlink and nft -f differ:\n%s", lineDiff(want, got))
	}
	// The table deleted behind the proxy's back: the drift check sees it
	// and one full sync restores it.
	if err := nl.DeleteTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := nsNFT(nsB, "", "delete", "table", "ip", nftTableName); err != nil {
		t.Fatal(err)
	}
	if d := p.checkDrift(context.Background()); d == "" {
		t.Fatal("the deleted table went unnoticed")
	}
	p.forceFullSync()
	mustSyncNFT(t, p)
	if got, want := listTable(t, nsA), listTable(t, nsB); got != want || !strings.Contains(got, "chain services") {
		t.Fatalf("after the repair, Netlink and nft -f differ:\n%s", lineDiff(want, got))
	}
	if st := p.Stats(); st.FullSyncs != 3 || st.PartialSyncs < 20 {
		t.Fatalf("want three full syncs and partial ones, got %+v", st)
	}

	// A restarted process (a new backend) that has the shapes but not the
	// random services: its first sync keeps the table, recreates the wanted
	// affinity sets, deletes the others and flushes the stale chains, which
	// the next sync a second later deletes.
	for step := 0; step < 8; step++ {
		name := fmt.Sprint("s", step)
		svcs[name] = randomNFTService(rng, name)
		svcs[name].Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		p.OnServiceUpdate(svcs[name])
		p.OnEndpointSliceUpdate(randomSlice(rng, name))
	}
	mustSyncNFT(t, p)
	var nl2 *nft.Netlink
	if err := netns.DoPath(netns.NetNSPath(nsA), func() error {
		var err error
		nl2, err = nft.NewNetlink(nft.IPv4Family, nftTableName)
		return err
	}); err != nil {
		t.Fatalf("netlink backend in %s: %v", nsA, err)
	}
	t.Cleanup(func() { nl2.Close() })
	q, clock2, _ := testNFTProxier(t, &execTee{Interface: nl2, ns: nsB})
	loadShapes(q)
	mustSyncNFT(t, q)
	if got, want := listTable(t, nsA), listTable(t, nsB); got != want {
		t.Fatalf("after a restarted process's first sync, Netlink and nft -f differ:\n%s", lineDiff(want, got))
	}
	if d := q.checkDrift(context.Background()); d != "" {
		t.Fatalf("drift after a restarted process's first sync: %s", d)
	}
	clock2.Step(1500 * time.Millisecond)
	mustSyncNFT(t, q)
	got := listTable(t, nsA)
	if want := listTable(t, nsB); got != want {
		t.Fatalf("after the stale chains' deletion, Netlink and nft -f differ:\n%s", lineDiff(want, got))
	}
	fresh := newNetns(t)
	r, _, _ := testNFTProxier(t, &kernelTee{Fake: nft.NewFake(), ns: fresh})
	loadShapes(r)
	mustSyncNFT(t, r)
	if want := listTable(t, fresh); got != want {
		t.Fatalf("the restarted process's table differs from a fresh one:\n%s", lineDiff(want, got))
	}
}
