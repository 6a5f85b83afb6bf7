// Package store owns minikit's persistent state: a key/value space with one global
// revision counter, transactions that commit atomically, and watches that deliver
// committed changes in revision order.
//
// The revision is the resourceVersion of the API: every commit bumps it once, and every
// key written in that commit carries it as its mod revision. A commit holds one Update,
// or, on the etcd backend, possibly several concurrent ones (group commit): several
// Updates may then share one revision, as the keys of one etcd transaction do, but a key
// is written at most once per revision, so two Updates of one key never share one.
// Callers see only Interface; two backends implement it: Bolt (bbolt, one file, one
// server) and Etcd (an etcd cluster that several servers share; docs/datastore.md).
package store

import (
	"context"
	"errors"
)

// Errors callers test for with errors.Is.
var (
	ErrNotFound = errors.New("key not found")
	ErrExists   = errors.New("key already exists")
	// ErrExpired means a watch asked for revisions older than the kept history.
	ErrExpired = errors.New("requested revision is older than the kept history")
	ErrClosed  = errors.New("store is closed")
)

// KV is one stored value and the revisions at which it was created and last modified.
type KV struct {
	Key       string
	Value     []byte
	CreateRev int64
	ModRev    int64
}

// EventType says what happened to a key.
type EventType int

// The three kinds of change.
const (
	Added EventType = iota + 1
	Modified
	Deleted
)

// String is the watch event type's name in the Kubernetes API (ADDED, ...).
func (t EventType) String() string {
	switch t {
	case Added:
		return "ADDED"
	case Modified:
		return "MODIFIED"
	case Deleted:
		return "DELETED"
	}
	return "UNKNOWN"
}

// Event is one committed change. For Deleted, Value is the last value the key had.
// For Modified, Prev is the value before the change, so filtered watchers can tell
// an object entering or leaving their selection.
type Event struct {
	Type  EventType
	Key   string
	Value []byte
	Prev  []byte
	Rev   int64
}

// Tx is a read-write transaction. Every write in it gets the revision Rev(), which
// other transactions committed together with it may share (Interface.Update).
type Tx interface {
	// Rev is the revision this transaction commits at.
	Rev() int64
	Get(key string) (KV, bool)
	// List returns the keys under prefix in key order.
	List(prefix string) []KV
	// Create fails with ErrExists if key is present.
	Create(key string, value []byte) error
	// Put creates or replaces key.
	Put(key string, value []byte) error
	// Delete fails with ErrNotFound if key is absent.
	Delete(key string) error
}

// Interface is the storage contract the API server is written against.
type Interface interface {
	Get(key string) (KV, error)
	// List returns the keys under prefix and the revision the list is consistent with.
	List(prefix string) ([]KV, int64, error)
	// Update runs fn in one write transaction. If fn returns an error nothing is
	// written. On success the committed revision is returned and watchers see the
	// changes after commit, in revision order. The revision is fn's Tx.Rev(); it is
	// greater than the revision of every Update that returned before this one was
	// called, and other concurrent Updates may commit at the same revision (the etcd
	// backend commits them together) but never write a key this one wrote.
	Update(fn func(tx Tx) error) (int64, error)
	// Watch delivers every change under prefix with a revision greater than fromRev.
	// fromRev 0 means "from now". The channel closes when ctx ends, the store closes,
	// or the watcher falls too far behind (the caller then re-watches).
	Watch(ctx context.Context, prefix string, fromRev int64) (<-chan Event, error)
	// Rev is the latest committed revision.
	Rev() int64
	Close() error
}
