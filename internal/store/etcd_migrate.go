package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Migration batches: etcd refuses more than 128 operations (--max-txn-ops) or 1.5 MiB
// (--max-request-bytes) in one transaction by default.
const (
	migrateBatchKeys  = 100
	migrateBatchBytes = 1 << 20
	// padParallel is how many revision-raising writes go to etcd at once.
	padParallel = 64
)

// MigrateResult says what Migrate did.
type MigrateResult struct {
	Copied, Deleted int
	// SourceRev is the revision of the source snapshot that was copied; DestRev the
	// destination's revision afterwards, always greater than SourceRev.
	SourceRev, DestRev int64
}

// Migrate copies every key of one consistent snapshot of src into dst, values byte
// for byte. A destination holding keys is refused unless force, which replaces its
// contents (keys absent from src are deleted).
//
// Revisions stay monotonic for clients: afterwards dst's revision is greater than
// every revision of src (raised if needed), and the history before it is compacted
// (etcd) or not kept (bbolt keeps its history in memory), so a client resuming a
// watch from a resourceVersion it got from the old store receives 410 Gone and
// relists, rather than missing events or seeing revisions go back.
//
// Writers to src after the snapshot are not copied: stop the servers first.
func Migrate(ctx context.Context, src, dst Interface, force bool) (MigrateResult, error) {
	var res MigrateResult
	kvs, srcRev, err := src.List("")
	if err != nil {
		return res, fmt.Errorf("reading the source: %w", err)
	}
	res.SourceRev = srcRev
	existing, _, err := dst.List("")
	if err != nil {
		return res, fmt.Errorf("reading the destination: %w", err)
	}
	if len(existing) > 0 && !force {
		return res, fmt.Errorf("the destination holds %d keys (first %s): refusing to overwrite them without --force", len(existing), existing[0].Key)
	}
	inSource := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		inSource[kv.Key] = true
	}
	var stale []string
	for _, kv := range existing {
		if !inSource[kv.Key] {
			stale = append(stale, kv.Key)
		}
	}
	for start := 0; start < len(stale); start += migrateBatchKeys {
		batch := stale[start:min(start+migrateBatchKeys, len(stale))]
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if _, err := dst.Update(func(tx Tx) error {
			for _, k := range batch {
				if err := tx.Delete(k); err != nil && !errors.Is(err, ErrNotFound) {
					return fmt.Errorf("deleting %s: %w", k, err)
				}
			}
			return nil
		}); err != nil {
			return res, fmt.Errorf("clearing the destination: %w", err)
		}
		res.Deleted += len(batch)
	}
	for start := 0; start < len(kvs); {
		end, size := start, 0
		for end < len(kvs) && end-start < migrateBatchKeys && (end == start || size+len(kvs[end].Key)+len(kvs[end].Value) <= migrateBatchBytes) {
			size += len(kvs[end].Key) + len(kvs[end].Value)
			end++
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		batch := kvs[start:end]
		if _, err := dst.Update(func(tx Tx) error {
			for _, kv := range batch {
				if err := tx.Put(kv.Key, kv.Value); err != nil {
					return fmt.Errorf("writing %s: %w", kv.Key, err)
				}
			}
			return nil
		}); err != nil {
			return res, fmt.Errorf("copying to the destination (%d of %d keys copied): %w", res.Copied, len(kvs), err)
		}
		res.Copied += len(batch)
		start = end
	}
	if res.DestRev, err = raiseRev(ctx, dst, srcRev+1); err != nil {
		return res, err
	}
	if e, ok := dst.(*Etcd); ok {
		if err := e.Compact(res.DestRev); err != nil {
			return res, err
		}
	}
	return res, nil
}

// raiseRev makes s's revision at least rev and returns it.
func raiseRev(ctx context.Context, s Interface, rev int64) (int64, error) {
	switch s := s.(type) {
	case *Bolt:
		return s.raiseRev(rev)
	case *Etcd:
		return s.raiseRev(ctx, rev)
	}
	return 0, fmt.Errorf("raising the revision of a %T: unsupported store", s)
}

// raiseRev sets the revision counter; the watch history starts over from there.
func (b *Bolt) raiseRev(rev int64) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rev >= rev {
		return b.rev, nil
	}
	err := b.db.Update(func(tx *bolt.Tx) error {
		var rb [8]byte
		binary.BigEndian.PutUint64(rb[:], uint64(rev))
		return tx.Bucket(bucketMeta).Put(keyRev, rb[:])
	})
	if err != nil {
		return 0, fmt.Errorf("raising the store revision to %d: %w", rev, err)
	}
	b.rev = rev
	h := b.hub
	h.mu.Lock()
	clear(h.history)
	h.start, h.size, h.bytes, h.floor = 0, 0, 0, rev
	h.mu.Unlock()
	return rev, nil
}

// raiseRev rewrites the sentinel until etcd's revision reaches rev: etcd's revision
// only moves one write at a time. The writes go in parallel; minikit servers sharing
// the etcd just see their next commit conflict once and retry.
func (e *Etcd) raiseRev(ctx context.Context, rev int64) (int64, error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		cur      int64
	)
	resp, err := e.cli.Get(ctx, e.sentinel, clientv3.WithKeysOnly())
	if err != nil {
		return 0, e.wrap("reading the store revision", err)
	}
	cur = resp.Header.Revision
	for cur < rev && firstErr == nil {
		n := min(rev-cur, padParallel)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := e.cli.Put(ctx, e.sentinel, "")
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				} else if err == nil && r.Header.Revision > cur {
					cur = r.Header.Revision
				}
			}()
		}
		wg.Wait()
	}
	if firstErr != nil {
		return 0, e.wrap(fmt.Sprintf("raising the store revision to %d", rev), firstErr)
	}
	return cur, nil
}
