package store

import (
	"context"
	"strings"
	"sync"
)

// watcherBuffer bounds how far one watcher may fall behind before it is closed; the
// client then resumes from its last revision, which the history usually still holds.
const watcherBuffer = 4096

// hub keeps a bounded history of committed events and fans them out to watchers.
// publish is called with the store's write lock held, so events arrive in revision order.
type hub struct {
	mu       sync.Mutex
	history  []Event // ring, oldest first once full
	start    int     // index of the oldest event in history
	size     int
	bytes    int   // sum of eventBytes over history
	maxBytes int   // bound on bytes (the oldest revisions go first)
	floor    int64 // every event with Rev > floor is in history
	watchers map[*watcher]struct{}
	closed   bool
}

type watcher struct {
	prefix string
	ch     chan Event
	done   bool
	// dropped is closed when the watcher is dropped (its context ended,
	// it fell behind, or the hub closed), which ends the goroutine waiting
	// for its context.
	dropped chan struct{}
}

// historyBytes bounds the memory the history holds besides its event count:
// an event carries the object before and after, a few KiB for a pod, so 20,000
// of them could hold well over 100 MiB. Like etcd's compaction, this only
// shortens how far back a watch can resume; a client further behind relists
// after its 410 Expired.
const historyBytes = 16 << 20

func newHub(capacity int, rev int64) *hub {
	return &hub{history: make([]Event, capacity), maxBytes: historyBytes, floor: rev, watchers: map[*watcher]struct{}{}}
}

// eventBytes is what an event in the history holds on to.
func eventBytes(e Event) int { return len(e.Key) + len(e.Value) + len(e.Prev) }

func (h *hub) publish(rev int64, events []Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range events {
		n := eventBytes(e)
		for h.size > 0 && (h.size == len(h.history) || h.bytes+n > h.maxBytes) {
			h.floor = h.history[h.start].Rev
			// Events of one revision are dropped together so the floor stays exact.
			for h.size > 0 && h.history[h.start].Rev == h.floor {
				h.bytes -= eventBytes(h.history[h.start])
				h.history[h.start] = Event{} // let the objects go
				h.start = (h.start + 1) % len(h.history)
				h.size--
			}
		}
		h.history[(h.start+h.size)%len(h.history)] = e
		h.size++
		h.bytes += n
		for w := range h.watchers {
			h.send(w, e)
		}
	}
}

// send must be called with h.mu held.
func (h *hub) send(w *watcher, e Event) {
	if w.done || !strings.HasPrefix(e.Key, w.prefix) {
		return
	}
	select {
	case w.ch <- e:
	default:
		h.drop(w)
	}
}

func (h *hub) drop(w *watcher) {
	if !w.done {
		w.done = true
		close(w.ch)
		close(w.dropped)
		delete(h.watchers, w)
	}
}

func (h *hub) watch(ctx context.Context, prefix string, fromRev int64) (<-chan Event, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if fromRev != 0 && fromRev < h.floor {
		return nil, ErrExpired
	}
	w := &watcher{prefix: prefix, ch: make(chan Event, watcherBuffer), dropped: make(chan struct{})}
	if fromRev != 0 {
		for i := 0; i < h.size; i++ {
			e := h.history[(h.start+i)%len(h.history)]
			if e.Rev > fromRev {
				h.send(w, e)
			}
		}
		if w.done {
			return nil, ErrExpired
		}
	}
	h.watchers[w] = struct{}{}
	go func() {
		select {
		case <-ctx.Done():
			h.mu.Lock()
			h.drop(w)
			h.mu.Unlock()
		case <-w.dropped:
		}
	}()
	return w.ch, nil
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for w := range h.watchers {
		h.drop(w)
	}
}
