package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/store"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
)

func startEtcdForHA(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = t.TempDir()
	u := func(s string) []url.URL { v, _ := url.Parse(s); return []url.URL{*v} }
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = u("http://127.0.0.1:0"), u("http://127.0.0.1:0")
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = u("http://127.0.0.1:0"), u("http://127.0.0.1:0")
	cfg.InitialCluster = "test=http://127.0.0.1:0"
	cfg.UnsafeNoFsync = true
	cfg.MaxTxnOps = 10000
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	<-e.Server.ReadyNotify()
	return "http://" + e.Clients[0].Addr().String()
}

func TestEtcdTwoServersConcurrentCreates(t *testing.T) {
	ep := startEtcdForHA(t)
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
		apis[i] = sharedAPI(t, nil, srv)
	}
	if got := fmt.Sprint(apiEndpoints(t, apis[0].srv, 6443)); got != "[192.0.2.10 192.0.2.11]" {
		t.Errorf("endpoints %s", got)
	}
	const perServer = 200
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan string, 2*perServer)
	for s, a := range apis {
		for i := range perServer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				svc := newService(fmt.Sprintf("svc-%d-%03d", s, i))
				if i%2 == 1 {
					nodePortType(svc)
					svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443})
				}
				if code, body := postStatus(a, servicesPath, svc); code != http.StatusCreated {
					errs <- fmt.Sprintf("creating %s on server %d: HTTP %d: %s", svc.Name, s, code, body)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("400 creates on 2 servers over one etcd: %s", time.Since(start))
	for i, c := range counters {
		t.Logf("server %d: %d updates, %d runs of their closures", i, c.updates.Load(), c.runs.Load())
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	var list corev1.ServiceList
	apis[1].read("/api/v1/services", &list)
	ips, ports := map[string]string{}, map[int32]string{}
	for _, s := range list.Items {
		if prev, dup := ips[s.Spec.ClusterIP]; dup {
			t.Errorf("clusterIP %s twice: %s %s", s.Spec.ClusterIP, prev, s.Name)
		}
		ips[s.Spec.ClusterIP] = s.Name
		for _, p := range s.Spec.Ports {
			if p.NodePort == 0 {
				continue
			}
			if prev, dup := ports[p.NodePort]; dup {
				t.Errorf("nodePort %d twice: %s %s", p.NodePort, prev, s.Name)
			}
			ports[p.NodePort] = s.Name
		}
	}
	if len(list.Items) != 2*perServer+1 {
		t.Errorf("%d services", len(list.Items))
	}
	kvs, _, _ := stores[0].List(allocIPPrefix)
	pkvs, _, _ := stores[0].List(allocPortPrefix)
	if len(kvs) != len(ips) || len(pkvs) != len(ports) {
		t.Errorf("allocation records: %d IPs for %d, %d ports for %d", len(kvs), len(ips), len(pkvs), len(ports))
	}
	for _, kv := range append(kvs, pkvs...) {
		name := string(kv.Value)[strings.LastIndex(string(kv.Value), "/")+1:]
		found := false
		for _, s := range list.Items {
			if s.Name == name {
				found = true
			}
		}
		if !found {
			t.Errorf("allocation %s owned by %s, no such service", kv.Key, kv.Value)
		}
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
