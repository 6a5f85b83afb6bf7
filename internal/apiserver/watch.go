package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/minikit/minikit/internal/store"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// bookmarkInterval is how often an idle watch that allows bookmarks is told the
// current revision, so a client resumes from a recent one.
const bookmarkInterval = 30 * time.Second

type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// serveWatch streams changes as chunked JSON lines, as the Kubernetes watch API does.
func (s *Server) serveWatch(w http.ResponseWriter, r *http.Request, rq request) error {
	ls, fs, err := selectors(r, rq.res)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if wantsTable(r) {
		// Reject an unknown includeObject before the stream starts, as for a list.
		if _, err := s.table(rq.res, nil, q.Get("includeObject")); err != nil {
			return err
		}
	}
	rvParam := q.Get("resourceVersion")
	initial := rvParam == "" || rvParam == "0" || q.Get("sendInitialEvents") == "true"
	var fromRev int64
	if !initial {
		if fromRev, err = strconv.ParseInt(rvParam, 10, 64); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", rvParam))
		}
	}
	timeout := time.Duration(1800+rand.IntN(1800)) * time.Second
	if v := q.Get("timeoutSeconds"); v != "" {
		if t, err := strconv.Atoi(v); err == nil && t > 0 {
			timeout = time.Duration(t) * time.Second
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()

	ns := rq.namespace
	if v, ok := fs.RequiresExactMatch("metadata.namespace"); ok && rq.res.namespaced && ns == "" {
		ns = v
	}
	prefix := rq.res.prefix(ns)
	var snapshot []store.KV
	if initial {
		kvs, rev, err := s.store.List(prefix)
		if err != nil {
			return err
		}
		snapshot, fromRev = kvs, rev
		if rvParam != "" && rvParam != "0" {
			// sendInitialEvents with a resourceVersion: the state must be at least that new.
			if want, err := strconv.ParseInt(rvParam, 10, 64); err == nil && want > rev {
				return apierrors.NewTimeoutError("Too large resource version", 1)
			}
		}
	}
	events, werr := s.store.Watch(ctx, prefix, fromRev)
	s.watches.Add(1)
	defer s.watches.Add(-1)

	table := wantsTable(r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	// Every write is bounded: a client that stops reading is dropped after
	// Limits.StreamWriteTimeout instead of holding this goroutine for the watch's
	// whole timeout (the store already drops a watcher that falls behind).
	sw := s.newStreamWriter(w, r)
	defer sw.done()
	enc := &watchEncoder{s: s, w: sw, res: rq.res, table: table, includeObject: q.Get("includeObject"), meta: wantsMetadata(r)}
	// gone reports a failed write: the client stopped reading (or left).
	gone := func(err error) bool {
		if err != nil {
			s.log.Debug("watch client stopped reading", "path", r.URL.Path, "err", err)
		}
		return err != nil
	}
	if errors.Is(werr, store.ErrExpired) {
		enc.status(apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", fromRev, s.store.Rev())))
		sw.flush()
		return nil
	}
	if werr != nil {
		enc.status(apierrors.NewInternalError(werr))
		sw.flush()
		return nil
	}
	for _, kv := range snapshot {
		obj, err := rq.res.decode(kv.Value)
		if err != nil || !rq.res.matches(obj, ls, fs) {
			continue
		}
		if gone(enc.object("ADDED", obj)) {
			return nil
		}
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"
	lastRev := fromRev
	if q.Get("sendInitialEvents") == "true" && bookmarks {
		enc.bookmark(lastRev, true)
	}
	if gone(sw.flush()) {
		return nil
	}

	// send writes one event; false means the stream is over.
	send := func(e store.Event) bool {
		lastRev = e.Rev
		typ, obj := s.filterEvent(rq.res, e, ls, fs)
		if obj == nil {
			return true
		}
		return !gone(enc.object(typ, obj))
	}
	// sendQueued writes the events already delivered. Several objects may
	// change at one revision (one etcd transaction), and the store delivers a
	// revision's events together: a client that resumes from the last
	// resourceVersion it saw, or from a bookmark, must have been sent all of
	// that revision, so the stream ends and bookmarks only between revisions.
	sendQueued := func() bool {
		for len(events) > 0 {
			e, ok := <-events
			if !ok || !send(e) {
				return false
			}
		}
		return true
	}

	// A custom resource's watch ends with its CRD's storage (crdStorage):
	// after crdTeardownDelay, what arrived by then is sent and the stream
	// ends. Built-in resources never end this way (nil channels block).
	var storageEnded <-chan struct{}
	var teardown <-chan time.Time
	if cr := rq.res.cr; cr != nil && cr.storage != nil {
		storageEnded = cr.storage.done
	}

	ticker := time.NewTicker(bookmarkInterval)
	defer ticker.Stop()
	for {
		select {
		case <-storageEnded:
			storageEnded = nil
			t := time.NewTimer(crdTeardownDelay)
			defer t.Stop() // runs once: storageEnded is nil from here on
			teardown = t.C
		case <-teardown:
			if sendQueued() {
				sw.flush()
			}
			return nil
		case <-ctx.Done():
			if sendQueued() {
				sw.flush()
			}
			return nil
		case <-ticker.C:
			if bookmarks {
				if !sendQueued() {
					return nil
				}
				enc.bookmark(lastRev, false)
				if gone(sw.flush()) {
					return nil
				}
			}
		case e, ok := <-events:
			if !ok {
				// Closed because we fell behind or the store closed: the client re-watches.
				return nil
			}
			if !send(e) {
				return nil
			}
			if len(events) == 0 {
				if gone(sw.flush()) {
					return nil
				}
			}
		}
	}
}

// filterEvent turns a store event into what a filtered watcher sees: an object
// entering the selection is ADDED, one leaving it is DELETED, others are skipped.
// Deleted objects are reported at the deleting revision.
func (s *Server) filterEvent(res *resource, e store.Event, ls labels.Selector, fs fields.Selector) (string, runtime.Object) {
	obj, err := res.decode(e.Value)
	if err != nil {
		s.log.Error("decoding watched object", "key", e.Key, "err", err)
		return "", nil
	}
	if e.Type == store.Deleted {
		withResourceVersion(obj, e.Rev)
	}
	now := res.matches(obj, ls, fs)
	if e.Type != store.Modified || (ls.Empty() && fs.Empty()) {
		if !now {
			return "", nil
		}
		return e.Type.String(), obj
	}
	prev := res.newObj()
	was := decodeStored(e.Prev, prev) == nil && res.matches(prev, ls, fs)
	switch {
	case now && was:
		return "MODIFIED", obj
	case now:
		return "ADDED", obj
	case was:
		// Kubernetes reports the object's new state at the new revision.
		return "DELETED", obj
	}
	return "", nil
}

type watchEncoder struct {
	s             *Server
	w             io.Writer
	res           *resource
	table         bool
	includeObject string
	meta          string // PartialObjectMetadata's version, when asked for
	buf           bytes.Buffer
}

func (e *watchEncoder) object(typ string, obj runtime.Object) error {
	var body []byte
	var err error
	if e.table {
		t, terr := e.s.table(e.res, []runtime.Object{obj}, e.includeObject)
		if terr != nil {
			return terr
		}
		body, err = json.Marshal(t)
	} else if e.meta != "" {
		body, err = json.Marshal(partialMetadata(obj, e.meta))
	} else {
		body, err = encodeObject(obj, e.res.gvk())
	}
	if err != nil {
		return err
	}
	return e.write(typ, body)
}

func (e *watchEncoder) write(typ string, body []byte) error {
	e.buf.Reset()
	if err := json.NewEncoder(&e.buf).Encode(watchEvent{Type: typ, Object: body}); err != nil {
		return err
	}
	_, err := e.w.Write(e.buf.Bytes())
	return err
}

func (e *watchEncoder) bookmark(rev int64, initialEnd bool) {
	obj := e.res.newObj()
	m := metaOf(obj)
	m.SetResourceVersion(strconv.FormatInt(rev, 10))
	if initialEnd {
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	body, _ := encodeObject(obj, e.res.gvk())
	if e.meta != "" {
		body, _ = json.Marshal(partialMetadata(obj, e.meta))
	}
	e.write("BOOKMARK", body)
}

func (e *watchEncoder) status(err error) {
	st := err.(apierrors.APIStatus).Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	st.Status = metav1.StatusFailure
	body, _ := json.Marshal(st)
	e.write("ERROR", body)
}
