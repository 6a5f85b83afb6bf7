package apiserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// The benchmarks drive the server over loopback HTTP as clients do, on a real
// bbolt file (every committed write is fsynced).

func BenchmarkCreateSequential(b *testing.B) {
	a := newTestAPI(b)
	body := func(i int) []byte {
		j, _ := json.Marshal(newService(fmt.Sprintf("svc-%d", i)))
		return j
	}
	b.ResetTimer()
	for i := range b.N {
		r := a.do(http.MethodPost, servicesPath, "application/json", body(i))
		if r.code != http.StatusCreated {
			b.Fatalf("HTTP %d: %s", r.code, r.body)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

func BenchmarkCreateConcurrent(b *testing.B) {
	a := newTestAPI(b)
	var next atomic.Int64
	b.SetParallelism(16) // 16 clients per CPU
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			j, _ := json.Marshal(newService(fmt.Sprintf("svc-%d", next.Add(1))))
			r, err := a.try(http.MethodPost, servicesPath, "application/json", j)
			if err != nil || r.code != http.StatusCreated {
				b.Errorf("creating: %v: HTTP %d: %s", err, r.code, r.body)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

// BenchmarkList10k lists 10,000 ConfigMaps over HTTP: as stored (the path client-go
// informers take), with a label selector (every object decoded) and as a Table
// (kubectl get). Each reports ms/op and, as a reference from the same run, how many
// times slower it is than reading the same keys from the store.
func BenchmarkList10k(b *testing.B) {
	const n = 10000
	a := newTestAPI(b)
	// Each Create is its own fsynced transaction (about 4 ms on a typical disk, so
	// 40 s for 10,000 whatever the concurrency: the store serializes writers). The
	// objects are therefore prepared as Create prepares them and written in one
	// transaction.
	cmRes := lookup("", "v1", "configmaps")
	start := time.Now()
	_, err := a.store.Update(func(tx store.Tx) error {
		for i := range n {
			cm := newConfigMap(fmt.Sprintf("cm-%05d", i), map[string]string{"index": fmt.Sprint(i), "payload": "some configuration text of a typical small size"})
			cm.Namespace, cm.UID, cm.CreationTimestamp = "default", uuid.NewUUID(), metav1.Now().Rfc3339Copy()
			cm.Labels = map[string]string{"app": "bench", "shard": fmt.Sprint(i % 10)}
			if errs := validation.Validate(cm, nil, validation.DefaultConfig()); len(errs) > 0 {
				return errs.ToAggregate()
			}
			if err := a.srv.put(tx, cmRes, cmRes.key("default", cm.Name), cm); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatalf("writing configmaps: %v", err)
	}
	b.Logf("wrote %d configmaps in %v", n, time.Since(start))

	storeStart := time.Now()
	const storeRounds = 5
	for range storeRounds {
		if kvs, _, err := a.store.List(cmRes.prefix("default")); err != nil || len(kvs) != n {
			b.Fatalf("store list: %d keys, %v", len(kvs), err)
		}
	}
	storeList := time.Since(storeStart) / storeRounds

	cases := []struct {
		name, query, accept string
		want                int // items (or rows) in the answer
	}{
		{"json", "", "application/json", n},
		{"labelSelector", "?labelSelector=shard%3D3", "application/json", n / 10},
		{"table", "", "application/json;as=Table;v=v1;g=meta.k8s.io", n},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			req, _ := http.NewRequest(http.MethodGet, a.url+configMapsPath+tc.query, nil)
			req.Header.Set("Accept", tc.accept)
			var size int
			b.ResetTimer()
			for range b.N {
				resp, err := a.client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("HTTP %d: %v", resp.StatusCode, err)
				}
				size = len(body)
			}
			b.StopTimer()
			// Checked once, outside the timing: the answer is complete.
			resp, _ := a.client.Do(req)
			var l struct {
				Items []json.RawMessage `json:"items"`
				Rows  []json.RawMessage `json:"rows"`
			}
			err := json.NewDecoder(resp.Body).Decode(&l)
			resp.Body.Close()
			if got := len(l.Items) + len(l.Rows); err != nil || got != tc.want {
				b.Fatalf("list has %d items: %v, want %d", got, err, tc.want)
			}
			perOp := b.Elapsed() / time.Duration(b.N)
			b.SetBytes(int64(size))
			b.ReportMetric(float64(perOp.Microseconds())/1000, "ms/op")
			b.ReportMetric(float64(perOp)/float64(storeList), "x-store-list")
		})
	}
}

// BenchmarkWatchDelivery50 measures how long after a write's HTTP response the
// change has reached all of 50 concurrent watchers of services. A watcher may see the
// event before the writer sees its response; such latencies count as zero.
func BenchmarkWatchDelivery50(b *testing.B) {
	const watchers = 50
	a := newTestAPI(b)
	type arrival struct {
		name string
		at   time.Time
	}
	arrivals := make(chan arrival, watchers*4)
	rv := a.listRV(servicesPath)
	var ready sync.WaitGroup
	for range watchers {
		w := a.watch(b, servicesPath+"?watch=true&resourceVersion="+rv)
		ready.Add(1)
		go func() {
			defer ready.Done()
			for e := range w.events {
				at := time.Now()
				var m metav1.PartialObjectMetadata
				if json.Unmarshal(e.Object, &m) == nil {
					arrivals <- arrival{m.Name, at}
				}
			}
		}()
	}
	b.Cleanup(func() {
		a.close() // ends the streams
		ready.Wait()
	})

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("w-%d", i)
		j, _ := json.Marshal(newService(name))
		r := a.do(http.MethodPost, servicesPath, "application/json", j)
		answered := time.Now()
		if r.code != http.StatusCreated {
			b.Fatalf("HTTP %d: %s", r.code, r.body)
		}
		var last time.Time
		for range watchers {
			select {
			case ar := <-arrivals:
				if ar.name != name {
					b.Fatalf("watcher saw %s, want %s", ar.name, name)
				}
				if ar.at.After(last) {
					last = ar.at
				}
			case <-time.After(10 * time.Second):
				b.Fatalf("write %s did not reach all watchers in 10s", name)
			}
		}
		lat = append(lat, max(0, last.Sub(answered)))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-us")
}
