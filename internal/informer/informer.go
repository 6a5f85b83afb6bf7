// Package informer holds the few lines every consumer of client-go informers
// otherwise writes again: unwrapping the tombstone a deletion can arrive as,
// a handler that only says "something changed", and waiting for a factory's
// caches with an error that names the one that did not sync.
//
// A delete notification carries cache.DeletedFinalStateUnknown instead of the
// object when the watch missed the deletion and a re-list found the object
// gone; the last known object is inside. Handlers that type-assert the object
// would silently drop such deletions, so they go through Object or As.
package informer

import (
	"context"
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Object returns the object of an informer notification, the last known
// state inside a tombstone for a deletion the watch missed.
func Object(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// As returns the object of an informer notification as a T, unwrapping a
// tombstone; ok is false when it is not a T.
func As[T any](obj any) (T, bool) {
	v, ok := Object(obj).(T)
	return v, ok
}

// OnChange is a handler that calls f on every notification: for consumers
// that recompute everything from their listers on any change.
func OnChange(f func()) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f() },
		UpdateFunc: func(any, any) { f() },
		DeleteFunc: func(any) { f() },
	}
}

// AddHandler registers h with each of infs.
func AddHandler(h cache.ResourceEventHandler, infs ...cache.SharedIndexInformer) error {
	for _, inf := range infs {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// WaitForSync waits until the started informers of every factory have
// synced, or ctx ends; the error names a cache that did not sync.
func WaitForSync(ctx context.Context, factories ...informers.SharedInformerFactory) error {
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("syncing the %v cache: %w", typ, ctx.Err())
			}
		}
	}
	return nil
}
