package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketKV   = []byte("kv")
	bucketMeta = []byte("meta")
	keyRev     = []byte("rev")
)

// DefaultHistory is how many committed events a Bolt store keeps for resuming watches.
const DefaultHistory = 20000

// Bolt is the embedded bbolt backend. Writes are serialized by one mutex so that the
// revision order, the commit order and the watch delivery order are the same order.
type Bolt struct {
	db *bolt.DB

	mu  sync.Mutex // held while committing; guards rev
	rev int64
	hub *hub

	qmu        sync.Mutex // guards the queue of pending updates
	queue      []*updateReq
	committing bool
	closed     bool
}

// OpenBolt opens (creating if needed) the database file at path.
func OpenBolt(path string, history int) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	b := &Bolt{db: db}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketKV); err != nil {
			return err
		}
		m, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if v := m.Get(keyRev); len(v) == 8 {
			b.rev = int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initializing store %s: %w", path, err)
	}
	if history <= 0 {
		history = DefaultHistory
	}
	b.hub = newHub(history, b.rev)
	return b, nil
}

// Stored values are framed as createRev(8) modRev(8) value.
func encodeKV(createRev, modRev int64, value []byte) []byte {
	out := make([]byte, 16+len(value))
	binary.BigEndian.PutUint64(out, uint64(createRev))
	binary.BigEndian.PutUint64(out[8:], uint64(modRev))
	copy(out[16:], value)
	return out
}

func decodeKV(key, raw []byte) KV {
	v := make([]byte, len(raw)-16)
	copy(v, raw[16:])
	return KV{
		Key:       string(key),
		CreateRev: int64(binary.BigEndian.Uint64(raw)),
		ModRev:    int64(binary.BigEndian.Uint64(raw[8:])),
		Value:     v,
	}
}

// Get implements Interface.
func (b *Bolt) Get(key string) (KV, error) {
	var kv KV
	err := b.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket(bucketKV).Get([]byte(key))
		if raw == nil {
			return ErrNotFound
		}
		kv = decodeKV([]byte(key), raw)
		return nil
	})
	return kv, err
}

// List implements Interface.
func (b *Bolt) List(prefix string) ([]KV, int64, error) {
	var out []KV
	var rev int64
	err := b.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyRev); len(v) == 8 {
			rev = int64(binary.BigEndian.Uint64(v))
		}
		out = listBucket(tx.Bucket(bucketKV), prefix)
		return nil
	})
	return out, rev, err
}

func listBucket(bk *bolt.Bucket, prefix string) []KV {
	var out []KV
	p := []byte(prefix)
	c := bk.Cursor()
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		out = append(out, decodeKV(k, v))
	}
	return out
}

// Rev implements Interface.
func (b *Bolt) Rev() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rev
}

type boltTx struct {
	tx     *bolt.Tx
	bk     *bolt.Bucket
	rev    int64
	events []Event
	// undoLog restores the keys this function wrote if it fails.
	undoLog []undoEntry
	failed  error
}

type undoEntry struct {
	key []byte
	old []byte // nil: the key did not exist
}

func (t *boltTx) remember(key []byte) {
	for _, u := range t.undoLog {
		if bytes.Equal(u.key, key) {
			return
		}
	}
	var old []byte
	if v := t.bk.Get(key); v != nil {
		old = append([]byte(nil), v...)
	}
	t.undoLog = append(t.undoLog, undoEntry{key: append([]byte(nil), key...), old: old})
}

func (t *boltTx) undo() error {
	for i := len(t.undoLog) - 1; i >= 0; i-- {
		u := t.undoLog[i]
		var err error
		if u.old == nil {
			err = t.bk.Delete(u.key)
		} else {
			err = t.bk.Put(u.key, u.old)
		}
		if err != nil {
			return err
		}
	}
	t.events = nil
	return nil
}

func (t *boltTx) Rev() int64 { return t.rev }

func (t *boltTx) Get(key string) (KV, bool) {
	raw := t.bk.Get([]byte(key))
	if raw == nil {
		return KV{}, false
	}
	return decodeKV([]byte(key), raw), true
}

func (t *boltTx) List(prefix string) []KV { return listBucket(t.bk, prefix) }

func (t *boltTx) Create(key string, value []byte) error {
	if t.bk.Get([]byte(key)) != nil {
		return ErrExists
	}
	return t.Put(key, value)
}

func (t *boltTx) Put(key string, value []byte) error {
	typ, createRev := Added, t.rev
	var prev []byte
	if old := t.bk.Get([]byte(key)); old != nil {
		typ, createRev = Modified, int64(binary.BigEndian.Uint64(old))
		prev = decodeKV(nil, old).Value
	}
	t.remember([]byte(key))
	if err := t.bk.Put([]byte(key), encodeKV(createRev, t.rev, value)); err != nil {
		t.failed = fmt.Errorf("writing %s: %w", key, err)
		return t.failed
	}
	t.record(Event{Type: typ, Key: key, Value: value, Prev: prev, Rev: t.rev})
	return nil
}

func (t *boltTx) Delete(key string) error {
	old := t.bk.Get([]byte(key))
	if old == nil {
		return ErrNotFound
	}
	last := decodeKV([]byte(key), old).Value
	t.remember([]byte(key))
	if err := t.bk.Delete([]byte(key)); err != nil {
		t.failed = fmt.Errorf("deleting %s: %w", key, err)
		return t.failed
	}
	t.record(Event{Type: Deleted, Key: key, Value: last, Rev: t.rev})
	return nil
}

// record keeps one event per key per transaction, merging a create followed by a
// delete of the same key into nothing, as a watcher would observe the committed state.
func (t *boltTx) record(e Event) {
	for i := range t.events {
		if t.events[i].Key != e.Key {
			continue
		}
		prev := t.events[i].Type
		switch {
		case prev == Added && e.Type == Deleted:
			t.events = append(t.events[:i], t.events[i+1:]...)
			return
		case prev == Added:
			e.Type, e.Prev = Added, nil
		case prev == Deleted && e.Type == Added:
			e.Type, e.Prev = Modified, t.events[i].Value
		case prev == Modified:
			e.Prev = t.events[i].Prev
		}
		t.events[i] = e
		return
	}
	t.events = append(t.events, e)
}

// Update implements Interface. Concurrent updates are committed together (group
// commit): one committer runs every queued transaction function in one bbolt
// transaction and one fsync, each with its own revision; a function that fails has
// its writes undone inside the transaction, so it affects neither the others nor
// the revision sequence. Events are published after the commit, in revision order.
func (b *Bolt) Update(fn func(tx Tx) error) (int64, error) {
	req := &updateReq{fn: fn, done: make(chan struct{})}
	b.qmu.Lock()
	if b.closed {
		b.qmu.Unlock()
		return 0, ErrClosed
	}
	b.queue = append(b.queue, req)
	if !b.committing {
		b.committing = true
		go b.commitLoop()
	}
	b.qmu.Unlock()
	<-req.done
	return req.rev, req.err
}

type updateReq struct {
	fn   func(tx Tx) error
	done chan struct{}
	rev  int64
	err  error
}

// commitLoop commits queued updates in batches until the queue is empty.
func (b *Bolt) commitLoop() {
	for {
		b.qmu.Lock()
		batch := b.queue
		b.queue = nil
		if len(batch) == 0 {
			b.committing = false
			b.qmu.Unlock()
			return
		}
		b.qmu.Unlock()
		b.commit(batch)
	}
}

func (b *Bolt) commit(batch []*updateReq) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rev := b.rev
	var committed []*boltTx
	err := b.db.Update(func(tx *bolt.Tx) error {
		rev, committed = b.rev, committed[:0]
		bk := tx.Bucket(bucketKV)
		for _, req := range batch {
			t := &boltTx{tx: tx, bk: bk, rev: rev + 1}
			req.err = req.fn(t)
			if req.err == nil && t.failed != nil {
				req.err = t.failed
			}
			if req.err != nil {
				if uerr := t.undo(); uerr != nil {
					return uerr
				}
				continue
			}
			if len(t.events) == 0 {
				req.rev = rev
				continue
			}
			rev = t.rev
			req.rev = rev
			committed = append(committed, t)
		}
		if rev == b.rev {
			return nil
		}
		var rb [8]byte
		binary.BigEndian.PutUint64(rb[:], uint64(rev))
		return tx.Bucket(bucketMeta).Put(keyRev, rb[:])
	})
	if err != nil {
		for _, req := range batch {
			req.rev, req.err = 0, fmt.Errorf("committing store transaction: %w", err)
		}
	} else {
		b.rev = rev
		for _, t := range committed {
			b.hub.publish(t.rev, t.events)
		}
	}
	for _, req := range batch {
		close(req.done)
	}
}

// Watch implements Interface.
func (b *Bolt) Watch(ctx context.Context, prefix string, fromRev int64) (<-chan Event, error) {
	return b.hub.watch(ctx, prefix, fromRev)
}

// Close stops all watches and closes the database.
func (b *Bolt) Close() error {
	b.qmu.Lock()
	b.closed = true
	b.qmu.Unlock()
	// Wait for the committer to drain what was queued before the close.
	for {
		b.qmu.Lock()
		busy := b.committing
		b.qmu.Unlock()
		if !busy {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hub.close()
	return b.db.Close()
}
