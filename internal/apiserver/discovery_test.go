package apiserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// The Accept headers of aggregated discovery: client-go's (v2, then the
// legacy documents) and one asking only for v2beta1, which Kubernetes 1.35
// removed (AggregatedDiscoveryRemoveBetaType is locked on).
const (
	acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
	acceptV2beta1    = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
	aggregatedType   = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
)

// aggregated reads an aggregated discovery document.
func (a *testAPI) aggregated(path string) (apidiscoveryv2.APIGroupDiscoveryList, response) {
	a.t.Helper()
	r := a.do(http.MethodGet, path, "", nil, "Accept", acceptAggregated)
	var list apidiscoveryv2.APIGroupDiscoveryList
	r.mustCode(a.t, http.StatusOK, &list)
	return list, r
}

func findGroup(list apidiscoveryv2.APIGroupDiscoveryList, name string) *apidiscoveryv2.APIGroupDiscovery {
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i]
		}
	}
	return nil
}

func findResource(g *apidiscoveryv2.APIGroupDiscovery, version, resource string) *apidiscoveryv2.APIResourceDiscovery {
	if g == nil {
		return nil
	}
	for _, v := range g.Versions {
		if v.Version != version {
			continue
		}
		for i := range v.Resources {
			if v.Resources[i].Resource == resource {
				return &v.Resources[i]
			}
		}
	}
	return nil
}

// subresources renders a resource's subresources as "name:group/version/Kind:verbs".
func subresources(r *apidiscoveryv2.APIResourceDiscovery) []string {
	var out []string
	for _, s := range r.Subresources {
		k := s.ResponseKind
		out = append(out, fmt.Sprintf("%s:%s/%s/%s:%s", s.Subresource, k.Group, k.Version, k.Kind, strings.Join(s.Verbs, ",")))
	}
	return out
}

// TestAggregatedDiscoveryBuiltins: /api and /apis answer an aggregated
// discovery request with kube-apiserver's documents (subresources under
// their parent, scope, singular names, short names, categories, response
// kinds), with an ETag that a client sends back for a 304; other requests
// get the legacy documents.
func TestAggregatedDiscoveryBuiltins(t *testing.T) {
	a := newTestAPI(t)

	core, r := a.aggregated("/api")
	if ct := r.header.Get("Content-Type"); ct != aggregatedType {
		t.Errorf("/api Content-Type %q, want %q", ct, aggregatedType)
	}
	if core.Kind != "APIGroupDiscoveryList" || core.APIVersion != "apidiscovery.k8s.io/v2" || len(core.Items) != 1 || core.Items[0].Name != "" {
		t.Fatalf("/api: %s %s with %d groups", core.APIVersion, core.Kind, len(core.Items))
	}
	if v := core.Items[0].Versions; len(v) != 1 || v[0].Version != "v1" || v[0].Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent {
		t.Errorf("/api versions %+v", v)
	}
	for _, tc := range []struct {
		list                apidiscoveryv2.APIGroupDiscoveryList
		group, version, res string
		scope               apidiscoveryv2.ResourceScope
		singular, kind      string
		shortNames          []string
		categories          []string
		subresources        []string
	}{
		{list: core, res: "pods", version: "v1", scope: apidiscoveryv2.ScopeNamespace, singular: "pod", kind: "Pod",
			shortNames: []string{"po"}, categories: []string{"all"},
			subresources: []string{"status://Pod:get,patch,update", "log://Pod:get",
				"attach://PodAttachOptions:create,get", "exec://PodExecOptions:create,get",
				"portforward://PodPortForwardOptions:create,get", "proxy://PodProxyOptions:create,delete,get,patch,update"}},
		{list: core, res: "serviceaccounts", version: "v1", scope: apidiscoveryv2.ScopeNamespace, singular: "serviceaccount",
			kind: "ServiceAccount", shortNames: []string{"sa"},
			subresources: []string{"token:authentication.k8s.io/v1/TokenRequest:create"}},
		{list: core, res: "namespaces", version: "v1", scope: apidiscoveryv2.ScopeCluster, singular: "namespace", kind: "Namespace",
			shortNames: []string{"ns"}, subresources: []string{"status://Namespace:get,patch,update", "finalize://Namespace:update"}},
		{group: "apps", version: "v1", res: "deployments", scope: apidiscoveryv2.ScopeNamespace, singular: "deployment",
			kind: "Deployment", shortNames: []string{"deploy"}, categories: []string{"all"},
			subresources: []string{"status://Deployment:get,patch,update", "scale:autoscaling/v1/Scale:get,patch,update"}},
		{group: "apiextensions.k8s.io", version: "v1", res: "customresourcedefinitions", scope: apidiscoveryv2.ScopeCluster,
			singular: "customresourcedefinition", kind: "CustomResourceDefinition", shortNames: []string{"crd", "crds"},
			categories: []string{"api-extensions"}, subresources: []string{"status://CustomResourceDefinition:get,patch,update"}},
	} {
		t.Run(tc.res, func(t *testing.T) {
			list := tc.list
			if tc.group != "" {
				list, _ = a.aggregated("/apis")
			}
			res := findResource(findGroup(list, tc.group), tc.version, tc.res)
			if res == nil {
				t.Fatalf("no %s in the %q group's %s", tc.res, tc.group, tc.version)
			}
			if res.Scope != tc.scope || res.SingularResource != tc.singular || res.ResponseKind == nil ||
				*res.ResponseKind != (metav1.GroupVersionKind{Kind: tc.kind}) {
				t.Errorf("scope %s, singular %q, responseKind %+v", res.Scope, res.SingularResource, res.ResponseKind)
			}
			if !slices.Equal(res.ShortNames, tc.shortNames) || !slices.Equal(res.Categories, tc.categories) {
				t.Errorf("shortNames %v, categories %v", res.ShortNames, res.Categories)
			}
			if !slices.Equal(res.Verbs, []string(verbsFull)) {
				t.Errorf("verbs %v", res.Verbs)
			}
			if got := subresources(res); !slices.Equal(got, tc.subresources) {
				t.Errorf("subresources\n got %v\nwant %v", got, tc.subresources)
			}
		})
	}

	// The groups are the legacy /apis groups, in the same order, every
	// version Current.
	apis, r := a.aggregated("/apis")
	var legacy metav1.APIGroupList
	a.read("/apis", &legacy)
	var names, legacyNames []string
	for _, g := range apis.Items {
		names = append(names, g.Name)
		for _, v := range g.Versions {
			if v.Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent || len(v.Resources) == 0 {
				t.Errorf("%s/%s: freshness %q, %d resources", g.Name, v.Version, v.Freshness, len(v.Resources))
			}
		}
	}
	for _, g := range legacy.Groups {
		legacyNames = append(legacyNames, g.Name)
	}
	if !slices.Equal(names, legacyNames) {
		t.Errorf("aggregated groups %v, legacy %v", names, legacyNames)
	}

	// ETag and 304, as upstream's handler: the hash of the document, the
	// same for the same document.
	etag := r.header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || len(etag) != 2+128 || r.header.Get("Vary") != "Accept" {
		t.Errorf("ETag %q, Vary %q", etag, r.header.Get("Vary"))
	}
	if again := a.do(http.MethodGet, "/apis", "", nil, "Accept", acceptAggregated, "If-None-Match", etag); again.code != http.StatusNotModified || len(again.body) != 0 {
		t.Errorf("If-None-Match with the current ETag: HTTP %d, %d bytes", again.code, len(again.body))
	}
	if other := a.do(http.MethodGet, "/apis", "", nil, "Accept", acceptAggregated, "If-None-Match", `"stale"`); other.code != http.StatusOK {
		t.Errorf("If-None-Match with another ETag: HTTP %d", other.code)
	}
	if _, coreAgain := a.aggregated("/api"); coreAgain.header.Get("ETag") == etag {
		t.Error("/api and /apis have the same ETag")
	}

	// Protobuf, which client-go asks for when configured for it.
	pb := a.do(http.MethodGet, "/apis", "", nil, "Accept", "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	if ct := pb.header.Get("Content-Type"); pb.code != http.StatusOK || !strings.HasPrefix(ct, "application/vnd.kubernetes.protobuf") {
		t.Fatalf("protobuf aggregated discovery: HTTP %d, Content-Type %q", pb.code, ct)
	}
	decoded, _, err := discoveryCodecs.UniversalDeserializer().Decode(pb.body, nil, nil)
	if l, ok := decoded.(*apidiscoveryv2.APIGroupDiscoveryList); err != nil || !ok || len(l.Items) != len(apis.Items) {
		t.Errorf("protobuf aggregated discovery: %T, %v", decoded, err)
	}
	if pb.header.Get("ETag") != etag {
		t.Errorf("protobuf ETag %q, JSON %q: upstream hashes the document, not its encoding", pb.header.Get("ETag"), etag)
	}

	// Without the aggregated media type, and with the removed v2beta1 alone,
	// the legacy documents.
	for _, accept := range []string{"application/json", acceptV2beta1} {
		var groups metav1.APIGroupList
		a.do(http.MethodGet, "/apis", "", nil, "Accept", accept).mustCode(t, http.StatusOK, &groups)
		if groups.Kind != "APIGroupList" || len(groups.Groups) == 0 {
			t.Errorf("Accept %s: %s with %d groups, want the legacy APIGroupList", accept, groups.Kind, len(groups.Groups))
		}
		var versions metav1.APIVersions
		a.do(http.MethodGet, "/api", "", nil, "Accept", accept).mustCode(t, http.StatusOK, &versions)
		if versions.Kind != "APIVersions" {
			t.Errorf("Accept %s on /api: %s, want APIVersions", accept, versions.Kind)
		}
	}
}

// TestAggregatedDiscoveryConcurrent: many clients read the cached documents
// at once (kubectl and a controller's client starting together), in JSON
// and protobuf, and each gets the whole document; under -race this proves
// no request writes what another is encoding.
func TestAggregatedDiscoveryConcurrent(t *testing.T) {
	a := newTestAPI(t)
	_, first := a.aggregated("/apis")
	etag := first.header.Get("ETag")
	accepts := []string{acceptAggregated, "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				path := "/apis"
				if j%2 == 1 {
					path = "/api"
				}
				r, err := a.try(http.MethodGet, path, "", nil, "Accept", accepts[(i+j)%2])
				switch {
				case err != nil:
					errs <- err
					return
				case r.code != http.StatusOK || len(r.body) == 0:
					errs <- fmt.Errorf("GET %s: HTTP %d, %d bytes", path, r.code, len(r.body))
					return
				case path == "/apis" && r.header.Get("ETag") != etag:
					errs <- fmt.Errorf("GET /apis: ETag %q, want %q", r.header.Get("ETag"), etag)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestAggregatedDiscoveryFollowsCRDs: an established CRD appears in /apis
// as apiextensions-apiserver publishes it (versions by priority, full
// response kinds, status and scale), with a new ETag; deleted, it leaves.
func TestAggregatedDiscoveryFollowsCRDs(t *testing.T) {
	a := newTestAPI(t)
	_, before := a.aggregated("/apis")
	a.establish(widgetCRD(), widgetsPath)

	var apis apidiscoveryv2.APIGroupDiscoveryList
	var r response
	testutil.Eventually(t, waitTimeout, "example.com in aggregated discovery", func() error {
		apis, r = a.aggregated("/apis")
		if findGroup(apis, "example.com") == nil {
			return fmt.Errorf("not there")
		}
		return nil
	})
	if r.header.Get("ETag") == before.header.Get("ETag") {
		t.Error("the ETag did not change with the document")
	}
	g := findGroup(apis, "example.com")
	var versions []string
	for _, v := range g.Versions {
		versions = append(versions, v.Version+":"+string(v.Freshness))
	}
	// v1alpha1 is not served; v1 is the preferred version, first.
	if strings.Join(versions, ",") != "v1:Current,v1beta1:Current" {
		t.Errorf("example.com versions %v", versions)
	}
	if apis.Items[len(apis.Items)-1].Name != "example.com" {
		t.Errorf("the CRD's group is not after the built-in ones")
	}
	for _, version := range []string{"v1", "v1beta1"} {
		w := findResource(g, version, "widgets")
		if w == nil {
			t.Fatalf("no widgets in example.com/%s", version)
		}
		if w.Scope != apidiscoveryv2.ScopeNamespace || w.SingularResource != "widget" ||
			*w.ResponseKind != (metav1.GroupVersionKind{Group: "example.com", Version: version, Kind: "Widget"}) ||
			!slices.Equal(w.ShortNames, []string{"wd"}) || !slices.Equal(w.Categories, []string{"all"}) ||
			!slices.Equal(w.Verbs, []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}) {
			t.Errorf("example.com/%s widgets: %+v", version, w)
		}
		want := []string{"status:example.com/v1/Widget:get,patch,update", "scale:autoscaling/v1/Scale:get,patch,update"}
		if version == "v1beta1" {
			want = nil // the CRD gives v1beta1 no subresources
		}
		if got := subresources(w); !slices.Equal(got, want) {
			t.Errorf("example.com/%s widgets subresources %v, want %v", version, got, want)
		}
	}

	// client-go's discovery client reads the aggregated document: it asks
	// for no group version's legacy list.
	var mu sync.Mutex
	var paths []string
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: a.url, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			paths = append(paths, req.URL.Path)
			mu.Unlock()
			return rt.RoundTrip(req)
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatalf("ServerGroupsAndResources: %v", err)
	}
	var widgets *metav1.APIResource
	for _, l := range lists {
		for i, res := range l.APIResources {
			if l.GroupVersion == "example.com/v1" && res.Name == "widgets" {
				widgets = &l.APIResources[i]
			}
		}
	}
	if widgets == nil || widgets.Kind != "Widget" || !widgets.Namespaced || widgets.SingularName != "widget" {
		t.Errorf("ServerGroupsAndResources: widgets %+v", widgets)
	}
	mu.Lock()
	if !slices.Equal(paths, []string{"/api", "/apis"}) {
		t.Errorf("client-go's discovery fetched %v, want only /api and /apis", paths)
	}
	mu.Unlock()

	a.delete(crdsPath+"/widgets.example.com").mustCode(t, http.StatusOK, nil)
	testutil.Eventually(t, waitTimeout, "example.com gone from aggregated discovery", func() error {
		if apis, _ := a.aggregated("/apis"); findGroup(apis, "example.com") != nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	if _, after := a.aggregated("/apis"); after.header.Get("ETag") != before.header.Get("ETag") {
		t.Error("without the CRD, the document differs from the one before it")
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestAggregatedDiscoveryWithKubectl: kubectl (which reads the aggregated
// documents) lists a CRD's resource in api-resources and gets it by its
// short name.
func TestAggregatedDiscoveryWithKubectl(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	a.post(widgetsPath, widget("w1", map[string]any{"color": "red"})).obj(t, http.StatusCreated)
	k := newKubectlCLI(t, a, kubectlBinaries(t)[0])
	out, errOut, err := k.run(t, "api-resources", "--api-group=example.com", "--no-headers")
	if err != nil {
		t.Fatalf("kubectl api-resources: %v\n%s", err, errOut)
	}
	if f := strings.Fields(out); strings.Join(f, " ") != "widgets wd example.com/v1 true Widget" {
		t.Errorf("kubectl api-resources --api-group=example.com:\n%s", out)
	}
	out, errOut, err = k.run(t, "api-resources", "--categories=api-extensions", "--no-headers", "-o", "name")
	if err != nil || strings.TrimSpace(out) != "customresourcedefinitions.apiextensions.k8s.io" {
		t.Errorf("kubectl api-resources --categories=api-extensions: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = k.run(t, "get", "wd", "-o", "name")
	if err != nil || strings.TrimSpace(out) != "widget.example.com/w1" {
		t.Errorf("kubectl get wd: %v\n%s%s", err, out, errOut)
	}
}

// watchLines follows a watch and sends each event's "TYPE:name", closing
// the channel when the server ends the stream.
func (a *testAPI) watchLines(path string) <-chan string {
	a.t.Helper()
	resp, err := a.client.Get(a.url + path)
	if err != nil {
		a.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		a.t.Fatalf("watch %s: HTTP %d", path, resp.StatusCode)
	}
	out := make(chan string, 100)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev struct {
				Type   string
				Object obj
			}
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				out <- "undecodable:" + sc.Text()
				continue
			}
			out <- ev.Type + ":" + fmt.Sprint(ev.Object.at("metadata.name"))
		}
	}()
	return out
}

// nextEvents reads events until the stream ends, failing after waitTimeout.
func nextEvents(t *testing.T, events <-chan string) []string {
	t.Helper()
	var got []string
	deadline := time.After(waitTimeout)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return got
			}
			got = append(got, e)
		case <-deadline:
			t.Fatalf("the watch did not end; events so far %v", got)
		}
	}
}

// TestCustomResourceWatchEndsWithCRD: as in kube-apiserver, a watch on
// custom resources ends when its CRD is deleted (after the cleanup's
// DELETED events) or its spec changes; a watch on another resource goes on.
func TestCustomResourceWatchEndsWithCRD(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	a.post(widgetsPath, widget("a", map[string]any{})).obj(t, http.StatusCreated)

	// A change of the CRD's spec ends the watches on its resources.
	events := a.watchLines(widgetsPath + "?watch=true")
	var crd map[string]any
	a.get(crdsPath+"/widgets.example.com").mustCode(t, http.StatusOK, &crd)
	versions := crd["spec"].(map[string]any)["versions"].([]any)
	versions[0].(map[string]any)["additionalPrinterColumns"] = []any{map[string]any{"name": "Model", "type": "string", "jsonPath": ".spec.model"}}
	a.put(crdsPath+"/widgets.example.com", crd).mustCode(t, http.StatusOK, nil)
	if got := nextEvents(t, events); !slices.Equal(got, []string{"ADDED:a"}) {
		t.Errorf("watch across a spec change: events %v", got)
	}

	// A watch on ConfigMaps, which the deletion must not end.
	configMaps := a.watchLines(configMapsPath + "?watch=true")
	// Deleted, the CRD's cleanup deletes its widgets first: the watch
	// reports that, then ends.
	events = a.watchLines(widgetsPath + "?watch=true")
	clusterWide := a.watchLines("/apis/example.com/v1beta1/widgets?watch=true")
	a.delete(crdsPath+"/widgets.example.com").mustCode(t, http.StatusOK, nil)
	if got := nextEvents(t, events); !slices.Equal(got, []string{"ADDED:a", "DELETED:a"}) {
		t.Errorf("watch across the CRD's deletion: events %v", got)
	}
	if got := nextEvents(t, clusterWide); !slices.Equal(got, []string{"ADDED:a", "DELETED:a"}) {
		t.Errorf("cluster-wide v1beta1 watch across the CRD's deletion: events %v", got)
	}
	a.create(configMapsPath, newConfigMap("after", nil))
	deadline := time.After(waitTimeout)
	for seen := false; !seen; {
		select {
		case e, ok := <-configMaps:
			if !ok {
				t.Fatal("the ConfigMap watch ended with the CRD")
			}
			seen = e == "ADDED:after"
		case <-deadline:
			t.Fatal("the ConfigMap watch did not report the new ConfigMap")
		}
	}
}
