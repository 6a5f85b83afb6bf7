package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/store"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// event is one line of a watch stream.
type event struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// meta decodes the event object's kind and metadata.
func (e event) meta(t testing.TB) metav1.PartialObjectMetadata {
	t.Helper()
	var m metav1.PartialObjectMetadata
	if err := json.Unmarshal(e.Object, &m); err != nil {
		t.Fatalf("decoding %s event object: %v: %s", e.Type, err, e.Object)
	}
	return m
}

func (e event) String() string { return e.Type + " " + string(e.Object) }

// watchStream reads a watch response line by line in the background.
type watchStream struct {
	t      testing.TB
	events chan event
	err    chan error // the decoder's final error, io.EOF when the server ended the stream
	cancel context.CancelFunc
}

// watch opens a watch and returns once the server has answered 200.
func (a *testAPI) watch(t testing.TB, path string, header ...string) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := a.client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("watching %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("watching %s: HTTP %d: %s", path, resp.StatusCode, b)
	}
	w := &watchStream{t: t, events: make(chan event, 1024), err: make(chan error, 1), cancel: cancel}
	go func() {
		defer resp.Body.Close()
		defer close(w.events)
		dec := json.NewDecoder(resp.Body)
		for {
			var e event
			if err := dec.Decode(&e); err != nil {
				w.err <- err
				return
			}
			select {
			case w.events <- e:
			case <-ctx.Done(): // nobody reads any more
				w.err <- ctx.Err()
				return
			}
		}
	}()
	t.Cleanup(cancel)
	return w
}

const watchDeadline = 10 * time.Second

// next returns the next event, failing the test if none comes in time.
func (w *watchStream) next() event {
	w.t.Helper()
	select {
	case e, ok := <-w.events:
		if !ok {
			w.t.Fatalf("watch ended: %v", <-w.err)
		}
		return e
	case <-time.After(watchDeadline):
		w.t.Fatalf("no watch event within %v", watchDeadline)
	}
	return event{}
}

// expect reads the next event and checks its type and object name.
func (w *watchStream) expect(typ, name string) metav1.PartialObjectMetadata {
	w.t.Helper()
	e := w.next()
	m := e.meta(w.t)
	if e.Type != typ || m.Name != name {
		w.t.Fatalf("got %s %s, want %s %s", e.Type, m.Name, typ, name)
	}
	return m
}

// ended waits for the server to end the stream.
func (w *watchStream) ended() {
	w.t.Helper()
	select {
	case e, ok := <-w.events:
		if ok {
			w.t.Fatalf("got %s, want the watch to end", e)
		}
	case <-time.After(watchDeadline):
		w.t.Fatalf("watch did not end within %v", watchDeadline)
	}
	if err := <-w.err; !errors.Is(err, io.EOF) {
		t := w.t
		t.Errorf("watch ended with %v, want a clean end of stream", err)
	}
}

// listRV is the resourceVersion of a list of path, where a watch would start.
func (a *testAPI) listRV(path string) string {
	a.t.Helper()
	var l metav1.List
	a.read(path, &l)
	return l.ResourceVersion
}

func TestWatchStreamsChangesInOrder(t *testing.T) {
	a := newTestAPI(t)
	rv := a.listRV(configMapsPath)
	w := a.watch(t, configMapsPath+"?watch=true&resourceVersion="+rv)
	other := a.watch(t, "/api/v1/namespaces/kube-system/configmaps?watch=true&resourceVersion="+rv)
	all := a.watch(t, "/api/v1/configmaps?watch=true&resourceVersion="+rv)

	cm := newConfigMap("c", map[string]string{"k": "v1"})
	a.create(configMapsPath, cm)
	var patched corev1.ConfigMap
	a.patch(configMapsPath+"/c", "application/merge-patch+json", `{"data":{"k":"v2"}}`).mustCode(t, 200, &patched)
	var deleted corev1.ConfigMap
	a.delete(configMapsPath+"/c").mustCode(t, 200, &deleted)
	a.create("/api/v1/namespaces/kube-system/configmaps", newConfigMap("sys", nil))

	for _, s := range []*watchStream{w, all} {
		want := []struct{ typ, rv string }{
			{"ADDED", cm.ResourceVersion},
			{"MODIFIED", patched.ResourceVersion},
			{"DELETED", deleted.ResourceVersion},
		}
		for _, e := range want {
			if m := s.expect(e.typ, "c"); m.ResourceVersion != e.rv {
				t.Errorf("%s event at resourceVersion %s, want %s as the write answered", e.typ, m.ResourceVersion, e.rv)
			}
		}
		if deleted.ResourceVersion == patched.ResourceVersion {
			t.Errorf("delete answered the last resourceVersion, not the deleting one")
		}
	}
	all.expect("ADDED", "sys")
	other.expect("ADDED", "sys") // and not c

	// Objects in events are complete and typed, as client-go decodes them.
	a.create(configMapsPath, newConfigMap("typed", map[string]string{"k": "v"}))
	var got corev1.ConfigMap
	if err := json.Unmarshal(w.next().Object, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "ConfigMap" || got.APIVersion != "v1" || got.Namespace != "default" || got.Data["k"] != "v" || got.UID == "" {
		t.Errorf("event object %+v lacks kind, namespace, data or uid", got)
	}
}

func TestWatchResume(t *testing.T) {
	a := newTestAPI(t)
	start := a.listRV(configMapsPath)
	rvs := map[string]string{"start": start}
	for _, n := range []string{"a", "b", "c"} {
		cm := newConfigMap(n, nil)
		a.create(configMapsPath, cm)
		rvs[n] = cm.ResourceVersion
	}
	cases := []struct {
		from string
		want []string // ADDED events before the live one
	}{
		{"start", []string{"a", "b", "c"}},
		{"a", []string{"b", "c"}},
		{"b", []string{"c"}},
		{"c", nil},
	}
	var lives []string // created by earlier cases, after c
	for i, tc := range cases {
		t.Run("from "+tc.from, func(t *testing.T) {
			a := a.with(t)
			w := a.watch(t, configMapsPath+"?watch=true&resourceVersion="+rvs[tc.from])
			for _, n := range append(tc.want, lives...) {
				w.expect("ADDED", n)
			}
			// A live change comes next: nothing older was replayed after it.
			live := fmt.Sprintf("live-%d", i)
			a.create(configMapsPath, newConfigMap(live, nil))
			lives = append(lives, live)
			w.expect("ADDED", live)
		})
	}
}

func TestWatchTooOldResourceVersion(t *testing.T) {
	a := newTestAPIWith(t, apiOptions{history: 10})
	first := newConfigMap("c", map[string]string{"n": "0"})
	a.create(configMapsPath, first)
	for i := 1; i < 50; i++ {
		a.patch(configMapsPath+"/c", "application/merge-patch+json", fmt.Sprintf(`{"data":{"n":"%d"}}`, i)).mustCode(t, 200, nil)
	}

	w := a.watch(t, configMapsPath+"?watch=true&resourceVersion="+first.ResourceVersion)
	e := w.next()
	if e.Type != "ERROR" {
		t.Fatalf("got %s, want ERROR", e)
	}
	var st metav1.Status
	if err := json.Unmarshal(e.Object, &st); err != nil {
		t.Fatal(err)
	}
	if st.Kind != "Status" || st.Code != http.StatusGone || st.Reason != metav1.StatusReasonExpired || st.Status != metav1.StatusFailure {
		t.Errorf("ERROR object %+v, want a Failure Status 410 Expired", st)
	}
	w.ended()

	// A resourceVersion inside the kept history still resumes.
	recent := strconv.FormatInt(a.store.Rev()-2, 10)
	w = a.watch(t, configMapsPath+"?watch=true&resourceVersion="+recent)
	w.expect("MODIFIED", "c")
	w.expect("MODIFIED", "c")
}

func TestWatchFieldSelector(t *testing.T) {
	a := newTestAPI(t)
	a.create(nodesPath, newNode("n1"))
	a.create(nodesPath, newNode("n2"))
	rv := a.listRV(podsPath)
	w := a.watch(t, podsPath+"?watch=true&fieldSelector=spec.nodeName%3Dn1&resourceVersion="+rv)
	byLabel := a.watch(t, podsPath+"?watch=true&labelSelector=app%3Dweb&resourceVersion="+rv)

	a.create(podsPath, newPod("elsewhere", "n2", nil)) // never on n1
	p := newPod("p", "", map[string]string{"app": "web"})
	a.create(podsPath, p)
	byLabel.expect("ADDED", "p")

	steps := []struct {
		name string
		do   func(t *testing.T)
		want string // event type the nodeName=n1 watch sees for p, "" for none
	}{
		{"bound to n1 by an update", func(t *testing.T) {
			var cur corev1.Pod
			a.read(podsPath+"/p", &cur)
			cur.Spec.NodeName = "n1"
			a.put(podsPath+"/p", &cur).mustCode(t, 200, nil)
		}, "ADDED"},
		{"status update on n1", func(t *testing.T) {
			a.patch(podsPath+"/p/status", "application/merge-patch+json", `{"status":{"phase":"Running"}}`).mustCode(t, 200, nil)
		}, "MODIFIED"},
		{"moved to n2", func(t *testing.T) {
			// The API refuses to rebind a pod, as Kubernetes does; the move is
			// written to the store directly, as a restore or a migration could.
			r := a.patch(podsPath+"/p", "application/merge-patch+json", `{"spec":{"nodeName":"n2"}}`)
			r.wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "pod updates may not change fields")
			key := lookup("", "v1", "pods").key("default", "p")
			if _, err := a.store.Update(func(tx store.Tx) error {
				kv, _ := tx.Get(key)
				var cur corev1.Pod
				if err := json.Unmarshal(kv.Value, &cur); err != nil {
					return err
				}
				cur.Spec.NodeName = "n2"
				b, err := json.Marshal(&cur)
				if err != nil {
					return err
				}
				return tx.Put(key, b)
			}); err != nil {
				t.Fatal(err)
			}
		}, "DELETED"},
		{"updated on n2", func(t *testing.T) {
			a.patch(podsPath+"/p", "application/merge-patch+json", `{"metadata":{"annotations":{"x":"y"}}}`).mustCode(t, 200, nil)
		}, ""},
	}
	// Steps run in order on one pair of watches, so not as subtests.
	for _, st := range steps {
		st.do(t)
		byLabel.expect("MODIFIED", "p")
		if st.want == "" {
			continue
		}
		e := w.next()
		var got corev1.Pod
		if err := json.Unmarshal(e.Object, &got); err != nil {
			t.Fatal(err)
		}
		if e.Type != st.want || got.Name != "p" {
			t.Fatalf("%s: got %s %s, want %s p", st.name, e.Type, got.Name, st.want)
		}
		if e.Type == "DELETED" && got.Spec.NodeName != "n2" {
			t.Errorf("%s: DELETED event carries nodeName %q, want the new state (n2)", st.name, got.Spec.NodeName)
		}
	}

	// Leaving a label selection through the API is a DELETED event too.
	a.patch(podsPath+"/p", "application/merge-patch+json", `{"metadata":{"labels":{"app":"db"}}}`).mustCode(t, 200, nil)
	byLabel.expect("DELETED", "p")

	// A sentinel bound to n1: had anything else reached the n1 watch, it would come first.
	a.create(podsPath, newPod("sentinel", "n1", nil))
	w.expect("ADDED", "sentinel")
}

func TestWatchInitialEvents(t *testing.T) {
	a := newTestAPI(t)
	for _, n := range []string{"a", "b", "c"} {
		a.create(configMapsPath, newConfigMap(n, nil))
	}
	listRV := a.listRV(configMapsPath)
	cases := []struct {
		name, query string
		bookmark    bool
	}{
		{"watch list, as client-go informers do",
			"sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=", true},
		{"watch list not older than a known version",
			"sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=" + listRV, true},
		{"legacy watch without a resourceVersion", "", false},
		{"legacy watch from resourceVersion 0", "resourceVersion=0", false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := a.with(t)
			w := a.watch(t, configMapsPath+"?watch=true&"+tc.query)
			for _, n := range []string{"a", "b", "c"} {
				w.expect("ADDED", n)
			}
			if tc.bookmark {
				e := w.next()
				m := e.meta(t)
				if e.Type != "BOOKMARK" || m.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
					t.Fatalf("got %s, want a BOOKMARK annotated %s=true", e, metav1.InitialEventsAnnotationKey)
				}
				if m.Kind != "ConfigMap" || m.APIVersion != "v1" {
					t.Errorf("bookmark object is %s %s, want a v1 ConfigMap", m.APIVersion, m.Kind)
				}
				if rv, _ := strconv.ParseInt(m.ResourceVersion, 10, 64); m.ResourceVersion == "" || rv < mustInt(t, listRV) {
					t.Errorf("bookmark at resourceVersion %q, want at least %s", m.ResourceVersion, listRV)
				}
			}
			live := fmt.Sprintf("live-%d", i)
			a.create(configMapsPath, newConfigMap(live, nil))
			w.expect("ADDED", live)
			a.delete(configMapsPath+"/"+live).mustCode(t, 200, nil)
			w.expect("DELETED", live)
		})
	}
	t.Run("not older than a future version", func(t *testing.T) {
		a := a.with(t)
		future := strconv.FormatInt(a.store.Rev()+100, 10)
		r := a.get(configMapsPath + "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=" + future)
		if r.code < 400 || r.code >= 600 || r.code == 500 {
			t.Errorf("watch from a future version answered HTTP %d: %s", r.code, r.body)
		}
		r.status(t)
	})
}

func mustInt(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWatchTable(t *testing.T) {
	a := newTestAPI(t)
	const accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
	cases := []struct {
		name, query string
		rowKind     string // kind of rows[0].object
	}{
		{"default includeObject", "", "PartialObjectMetadata"},
		{"includeObject=Object", "&includeObject=Object", "Service"},
		{"includeObject=None", "&includeObject=None", ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := a.with(t)
			rv := a.listRV(servicesPath)
			w := a.watch(t, servicesPath+"?watch=true&resourceVersion="+rv+tc.query, "Accept", accept)
			name := fmt.Sprintf("web-%d", i)
			a.create(servicesPath, newService(name))
			a.patch(servicesPath+"/"+name, "application/merge-patch+json", `{"metadata":{"labels":{"x":"y"}}}`).mustCode(t, 200, nil)
			for _, typ := range []string{"ADDED", "MODIFIED"} {
				e := w.next()
				var tbl metav1.Table
				if err := json.Unmarshal(e.Object, &tbl); err != nil {
					t.Fatal(err)
				}
				if e.Type != typ || tbl.Kind != "Table" || tbl.APIVersion != "meta.k8s.io/v1" || len(tbl.Rows) != 1 {
					t.Fatalf("got %s, want a %s event carrying a one-row meta.k8s.io/v1 Table", e, typ)
				}
				if len(tbl.ColumnDefinitions) == 0 || tbl.ColumnDefinitions[0].Name != "Name" || len(tbl.Rows[0].Cells) != len(tbl.ColumnDefinitions) {
					t.Errorf("table columns %+v and cells %v do not match", tbl.ColumnDefinitions, tbl.Rows[0].Cells)
				}
				if tbl.Rows[0].Cells[0] != name {
					t.Errorf("first cell %v, want %s", tbl.Rows[0].Cells[0], name)
				}
				var obj metav1.PartialObjectMetadata
				if raw := tbl.Rows[0].Object.Raw; len(raw) > 0 {
					if err := json.Unmarshal(raw, &obj); err != nil {
						t.Fatal(err)
					}
				}
				if obj.Kind != tc.rowKind || (tc.rowKind != "" && obj.Name != name) {
					t.Errorf("row object is %q named %q, want %q named %s", obj.Kind, obj.Name, tc.rowKind, name)
				}
			}
		})
	}
	t.Run("initial events as tables", func(t *testing.T) {
		a := a.with(t)
		w := a.watch(t, servicesPath+"?watch=true", "Accept", accept)
		e := w.next()
		var tbl metav1.Table
		if err := json.Unmarshal(e.Object, &tbl); err != nil || e.Type != "ADDED" || tbl.Kind != "Table" {
			t.Fatalf("got %s, want ADDED Table", e)
		}
	})
}

func TestWatchTimeout(t *testing.T) {
	a := newTestAPI(t)
	w := a.watch(t, configMapsPath+"?watch=true&timeoutSeconds=1&resourceVersion="+a.listRV(configMapsPath))
	w.ended()
}
