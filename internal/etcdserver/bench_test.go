package etcdserver

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/minikit/minikit/internal/apiserver"
	"github.com/minikit/minikit/internal/apiserver/apiservertest"
	"github.com/minikit/minikit/internal/store"
)

// The datastore benchmark's load (scripts/bench-store.sh runs it once and prints
// the ratios against bbolt).
const (
	benchWorkers    = 16
	benchStoreN     = 2000
	benchAPIN       = 1000
	benchLists      = 20
	benchValueBytes = 1024
)

// BenchmarkDatastores measures, on bbolt and on embedded etcd with 1 and 3 members
// (TLS, fsync, loopback), creates from 16 concurrent clients, lists of everything
// and watch delivery: at the store's interface and through the API server with
// client-go.
func BenchmarkDatastores(b *testing.B) {
	backends := []struct {
		name    string
		members int
	}{{"bolt", 0}, {"etcd1", 1}, {"etcd3", 3}}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			for range b.N {
				open := func(tb testing.TB) store.Interface {
					if be.members == 0 {
						s, err := store.OpenBolt(filepath.Join(tb.TempDir(), "db"), 0)
						if err != nil {
							tb.Fatal(err)
						}
						return s
					}
					return openBenchEtcd(tb, be.members)
				}
				st := open(b)
				benchStore(b, st)
				st.Close()
				st = open(b)
				benchAPI(b, st)
				st.Close()
			}
		})
	}
}

func openBenchEtcd(tb testing.TB, members int) store.Interface {
	t, ok := tb.(*testing.B)
	if !ok {
		tb.Fatal("benchmark only")
	}
	c := newBenchCluster(t)
	first := c.start("m1", true)
	for i := 2; i <= members; i++ {
		c.start(fmt.Sprintf("m%d", i), false, first.ClientURL())
	}
	cfg := first.StoreConfig()
	cfg.CompactInterval = -1
	s, err := store.OpenEtcd(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// percentile returns the p-th percentile of ds (which it sorts).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runCreates runs n creates over benchWorkers workers and returns the wall time and
// each create's latency and completion time.
func runCreates(n int, create func(i int) error) (time.Duration, []time.Duration, []time.Time, error) {
	lat := make([]time.Duration, n)
	done := make([]time.Time, n)
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	start := time.Now()
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				if err := create(i); err != nil {
					once.Do(func() { firstErr = err })
				}
				done[i] = time.Now()
				lat[i] = done[i].Sub(t0)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return time.Since(start), lat, done, firstErr
}

func benchStore(b *testing.B, st store.Interface) {
	value := []byte(strings.Repeat("x", benchValueBytes))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := st.Watch(ctx, "/bench/", 0)
	if err != nil {
		b.Fatal(err)
	}
	received := make([]time.Time, benchStoreN)
	got := make(chan struct{})
	go func() {
		defer close(got)
		for n := 0; n < benchStoreN; {
			e, ok := <-events
			if !ok {
				return
			}
			var i int
			fmt.Sscanf(e.Key, "/bench/%d", &i)
			received[i] = time.Now()
			n++
		}
	}()
	wall, lat, done, err := runCreates(benchStoreN, func(i int) error {
		_, err := st.Update(func(tx store.Tx) error { return tx.Create(fmt.Sprintf("/bench/%06d", i), value) })
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(time.Minute):
		b.Fatal("watch did not deliver every create within a minute")
	}
	var delays []time.Duration
	for i := range received {
		delays = append(delays, max(0, received[i].Sub(done[i])))
	}
	var lists []time.Duration
	for range benchLists {
		t0 := time.Now()
		kvs, _, err := st.List("/bench/")
		if err != nil || len(kvs) != benchStoreN {
			b.Fatalf("list: %d keys, %v", len(kvs), err)
		}
		lists = append(lists, time.Since(t0))
	}
	b.ReportMetric(float64(benchStoreN)/wall.Seconds(), "store-creates/s")
	b.ReportMetric(ms(percentile(lat, 0.99)), "store-create-p99-ms")
	b.ReportMetric(ms(percentile(lists, 0.99)), "store-list2000-p99-ms")
	b.ReportMetric(ms(percentile(delays, 0.99)), "store-watch-delay-p99-ms")
}

func benchAPI(b *testing.B, st store.Interface) {
	api := apiservertest.StartConfig(b, apiserver.Config{Store: st, Version: "bench"})
	defer api.Close() // before the caller closes st
	cs := api.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cms := cs.CoreV1().ConfigMaps("default")
	w, err := cms.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	received := make([]time.Time, benchAPIN)
	got := make(chan struct{})
	go func() {
		defer close(got)
		for n := 0; n < benchAPIN; {
			e, ok := <-w.ResultChan()
			if !ok {
				return
			}
			if e.Type != watch.Added {
				continue
			}
			var i int
			fmt.Sscanf(e.Object.(*corev1.ConfigMap).Name, "bench-%d", &i)
			received[i] = time.Now()
			n++
		}
	}()
	data := map[string]string{"v": strings.Repeat("x", benchValueBytes)}
	wall, lat, done, err := runCreates(benchAPIN, func(i int) error {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%06d", i)}, Data: data}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(time.Minute):
		b.Fatal("API watch did not deliver every create within a minute")
	}
	var delays []time.Duration
	for i := range received {
		delays = append(delays, max(0, received[i].Sub(done[i])))
	}
	var lists []time.Duration
	for range benchLists {
		t0 := time.Now()
		l, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) < benchAPIN {
			b.Fatalf("list: %v", err)
		}
		lists = append(lists, time.Since(t0))
	}
	b.ReportMetric(float64(benchAPIN)/wall.Seconds(), "api-creates/s")
	b.ReportMetric(ms(percentile(lat, 0.99)), "api-create-p99-ms")
	b.ReportMetric(ms(percentile(lists, 0.99)), "api-list1000-p99-ms")
	b.ReportMetric(ms(percentile(delays, 0.99)), "api-watch-delay-p99-ms")
}
