package store

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// mirror is this server's copy of minikit's keys in etcd, kept current by one watch
// (kube-apiserver keeps a watch cache the same way). Update functions read it instead
// of asking etcd for every Get and List: a function then runs in microseconds and the
// committer keeps many commits in flight. Callers outside transactions still read
// etcd (linearizable).
//
// The mirror is at one revision at a time: it applies a watch response's events
// under its lock. Every minikit commit rewrites the sentinel, which the watch covers,
// so the mirror's revision reaches every commit's revision.
type mirror struct {
	e *Etcd

	mu      sync.RWMutex
	rev     int64 // the revision the tree is at; 0 while (re)listing
	tree    *btree.BTreeG[*KV]
	changed chan struct{} // closed and replaced whenever rev moves
}

func kvLess(a, b *KV) bool { return a.Key < b.Key }

func newMirror(e *Etcd) *mirror {
	return &mirror{e: e, tree: btree.NewG(32, kvLess), changed: make(chan struct{})}
}

// run lists and watches until the store closes, listing again whenever the watch
// ends (a compaction under it, a lost connection that cannot resume).
func (m *mirror) run() {
	defer m.e.wg.Done()
	for m.e.ctx.Err() == nil {
		if err := m.sync(); err != nil && m.e.ctx.Err() == nil {
			m.e.log.Warn("etcd store mirror: listing again", "err", err)
			select {
			case <-m.e.ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// watchRange is the sentinel and the data keys (OpenEtcd checked that nothing else
// sorts between them).
func (m *mirror) watchRange() (string, string) {
	return m.e.sentinel, clientv3.GetPrefixRangeEnd(m.e.prefix + "/")
}

func (m *mirror) sync() error {
	key, end := m.watchRange()
	ctx, cancel := m.e.requestCtx()
	resp, err := m.e.cli.Get(ctx, key, clientv3.WithRange(end))
	cancel()
	if err != nil {
		return err
	}
	tree := btree.NewG(32, kvLess)
	for _, kv := range resp.Kvs {
		if string(kv.Key) != m.e.sentinel {
			k := m.e.toKV(kv)
			tree.ReplaceOrInsert(&k)
		}
	}
	m.set(func() { m.tree = tree }, resp.Header.Revision)
	wctx, wcancel := context.WithCancel(m.e.ctx)
	defer wcancel()
	for wr := range m.e.cli.Watch(wctx, key, clientv3.WithRange(end), clientv3.WithRev(resp.Header.Revision+1)) {
		if wr.CompactRevision != 0 || wr.Canceled || wr.Err() != nil {
			m.set(func() {}, 0)
			return fmt.Errorf("watch ended: %v", wr.Err())
		}
		if len(wr.Events) == 0 {
			continue
		}
		m.set(func() {
			for _, ev := range wr.Events {
				if string(ev.Kv.Key) == m.e.sentinel {
					continue
				}
				k := m.e.toKV(ev.Kv)
				if ev.Type == mvccpb.DELETE {
					m.tree.Delete(&k)
				} else {
					m.tree.ReplaceOrInsert(&k)
				}
			}
		}, wr.Events[len(wr.Events)-1].Kv.ModRevision)
	}
	m.set(func() {}, 0)
	return m.e.ctx.Err()
}

// set changes the tree under the lock and moves rev.
func (m *mirror) set(change func(), rev int64) {
	m.mu.Lock()
	change()
	m.rev = rev
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// readLocked waits until the mirror is at rev or later and returns with its read lock
// held (the caller unlocks with m.mu.RUnlock) and its revision.
func (m *mirror) readLocked(ctx context.Context, rev int64) (int64, error) {
	for {
		m.mu.RLock()
		if m.rev >= rev && m.rev != 0 {
			return m.rev, nil
		}
		ch := m.changed
		m.mu.RUnlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for this server's copy of the store to reach revision %d: %w", rev, ctx.Err())
		}
	}
}

// get and list must be called with the read lock held.
func (m *mirror) get(key string) (KV, bool) {
	kv, ok := m.tree.Get(&KV{Key: key})
	if !ok {
		return KV{}, false
	}
	c := *kv
	c.Value = bytes.Clone(c.Value) // callers may keep or change it
	return c, true
}

func (m *mirror) list(prefix string) []KV {
	var out []KV
	m.tree.AscendGreaterOrEqual(&KV{Key: prefix}, func(kv *KV) bool {
		if !strings.HasPrefix(kv.Key, prefix) {
			return false
		}
		c := *kv
		c.Value = bytes.Clone(c.Value)
		out = append(out, c)
		return true
	})
	return out
}
