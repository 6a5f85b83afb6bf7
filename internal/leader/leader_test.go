package leader

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver"
	"github.com/minikit/minikit/internal/apiserver/apiservertest"
	"github.com/minikit/minikit/internal/store"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Short terms keep the tests quick; nothing asserts how long anything took.
var testTiming = Timing{LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// twoServers starts two API servers over one bbolt store, as two minikit
// servers share one etcd, and returns a client of each.
func twoServers(t *testing.T) [2]kubernetes.Interface {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var clients [2]kubernetes.Interface
	for i := range clients {
		clients[i] = apiservertest.StartConfig(t, apiserver.Config{Store: st, Identity: fmt.Sprintf("server%d", i)}).Client
	}
	return clients
}

// terms records the terms of several candidates: which started and ended, in
// order, and whether two ever ran at once.
type terms struct {
	mu      sync.Mutex
	log     []string
	running map[string]bool
	overlap []string
	changed chan struct{}
}

func newTerms() *terms { return &terms{running: map[string]bool{}, changed: make(chan struct{}, 100)} }

func (r *terms) lead(id string) func(context.Context) {
	return func(ctx context.Context) {
		r.mu.Lock()
		for other, on := range r.running {
			if on {
				r.overlap = append(r.overlap, other+" still running when "+id+" started")
			}
		}
		r.running[id] = true
		r.log = append(r.log, "start "+id)
		r.mu.Unlock()
		r.changed <- struct{}{}
		<-ctx.Done()
		r.mu.Lock()
		r.running[id] = false
		r.log = append(r.log, "stop "+id)
		r.mu.Unlock()
		r.changed <- struct{}{}
	}
}

// await waits until the log has n entries and returns them.
func (r *terms) await(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		if len(r.log) >= n {
			out := append([]string(nil), r.log...)
			r.mu.Unlock()
			return out
		}
		r.mu.Unlock()
		select {
		case <-r.changed:
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("waiting for %d term events, have %v", n, r.log)
		}
	}
}

type candidate struct {
	cancel context.CancelFunc
	done   chan error
}

func campaign(client kubernetes.Interface, id string, r *terms) *candidate {
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- Run(ctx, Config{Client: client, Identity: id, Timing: testTiming, Logger: quiet}, r.lead(id))
	}()
	return c
}

func holder(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	l, err := client.CoordinationV1().Leases(DefaultNamespace).Get(context.Background(), DefaultName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// A leader that stops hands over to the other server: its singletons end
// before the other's start, and the lease names the new leader.
func TestHandover(t *testing.T) {
	clients := twoServers(t)
	r := newTerms()
	cands := map[string]*candidate{"node-a": campaign(clients[0], "node-a", r), "node-b": campaign(clients[1], "node-b", r)}
	t.Cleanup(func() {
		for _, c := range cands {
			c.cancel()
			<-c.done
		}
	})
	first := r.await(t, 1)[0][len("start "):]
	second := "node-a"
	if first == "node-a" {
		second = "node-b"
	}
	if got := holder(t, clients[0]); got != first {
		t.Fatalf("lease held by %q, leader is %q", got, first)
	}
	cands[first].cancel()
	if err := <-cands[first].done; err != nil {
		t.Fatalf("Run of %s: %v", first, err)
	}
	cands[first].done <- nil // for the cleanup
	got := r.await(t, 3)
	want := []string{"start " + first, "stop " + first, "start " + second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("terms %v, want %v", got, want)
	}
	if h := holder(t, clients[1]); h != second {
		t.Errorf("lease held by %q after handover, want %q", h, second)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.overlap) > 0 {
		t.Errorf("singletons ran twice: %v", r.overlap)
	}
}

// A leader that cannot renew (someone else holds the lease) stops its
// singletons while the process goes on, and leads again once it wins again.
func TestLostLeaseStopsSingletons(t *testing.T) {
	clients := twoServers(t)
	r := newTerms()
	c := campaign(clients[0], "node-a", r)
	t.Cleanup(func() { c.cancel(); <-c.done })
	r.await(t, 1)

	leases := clients[1].CoordinationV1().Leases(DefaultNamespace)
	steal := func(holder string, seconds int32) {
		t.Helper()
		for {
			l, err := leases.Get(context.Background(), DefaultName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			now := metav1.NewMicroTime(time.Now())
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &seconds, &now
			if _, err = leases.Update(context.Background(), l, metav1.UpdateOptions{}); err == nil {
				return
			}
			// A conflict with node-a's renewal: read again.
		}
	}
	steal("intruder", 3600)
	if got := r.await(t, 2); got[1] != "stop node-a" {
		t.Fatalf("terms %v, want node-a stopped", got)
	}
	select {
	case err := <-c.done:
		t.Fatalf("Run returned (%v) on a lost lease; it must campaign again", err)
	default:
	}
	steal("", 1) // released
	got := r.await(t, 3)
	if want := "[start node-a stop node-a start node-a]"; fmt.Sprint(got) != want {
		t.Errorf("terms %v, want %s", got, want)
	}
}

func TestTimingValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		t    Timing
		ok   bool
	}{
		{"defaults", Timing{}, true},
		{"tests'", testTiming, true},
		{"renew deadline not below lease", Timing{LeaseDuration: time.Second, RenewDeadline: time.Second}, false},
		{"renew deadline within jitter of retry", Timing{LeaseDuration: 3 * time.Second, RenewDeadline: time.Second, RetryPeriod: time.Second}, false},
	} {
		if err := c.t.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", c.name, err, c.ok)
		}
	}
}
