package apiserver

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"
	"github.com/minikit/minikit/internal/store/etcdtest"
)

func TestEtcdTwoServersConcurrentCreates(t *testing.T) {
	ep := etcdtest.Start(t)
	var apis [2]*testAPI
	var stores [2]store.Interface
	var counters []*countingStore
	for i := range apis {
		st, err := store.OpenEtcd(context.Background(), store.EtcdConfig{Endpoints: []string{ep}, CompactInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores[i] = st
		cs := &countingStore{Interface: st}
		counters = append(counters, cs)
		srv, err := New(Config{Store: cs, Logger: quietLog, Version: "test",
			AdvertiseAddress: fmt.Sprintf("192.0.2.%d", 10+i), Port: 6443, Identity: fmt.Sprintf("server-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		apis[i] = sharedAPI(t, st, srv)
	}
	if got := fmt.Sprint(apiEndpoints(t, apis[0].srv, 6443)); got != "[192.0.2.10 192.0.2.11]" {
		t.Errorf("endpoints %s", got)
	}
	const perServer = 200
	start := time.Now()
	createServicesOn(t, apis[:], perServer)
	t.Logf("400 creates on 2 servers over one etcd: %s", time.Since(start))
	for i, c := range counters {
		t.Logf("server %d: %d updates, %d runs of their closures", i, c.updates.Load(), c.runs.Load())
	}
	// Each ClusterIP and NodePort has one owner, and its allocation record names it.
	if items := checkAllocations(t, apis[0], validation.DefaultConfig()); len(items) != 2*perServer+1 {
		t.Errorf("%d services, want %d", len(items), 2*perServer+1)
	}
}

type countingStore struct {
	store.Interface
	updates, runs atomic.Int64
}

func (c *countingStore) Update(fn func(store.Tx) error) (int64, error) {
	c.updates.Add(1)
	return c.Interface.Update(func(tx store.Tx) error { c.runs.Add(1); return fn(tx) })
}
