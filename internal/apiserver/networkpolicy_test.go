package apiserver

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	openapiutil "k8s.io/kubectl/pkg/util/openapi"
	kubectlvalidation "k8s.io/kubectl/pkg/validation"
	"sigs.k8s.io/yaml"
)

// bookNetworkPolicy is the example of the Kubernetes documentation and of
// the book, without the fields the server defaults (policyTypes, protocols).
const bookNetworkPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: test-network-policy
spec:
  podSelector:
    matchLabels:
      role: db
  ingress:
  - from:
    - ipBlock:
        cidr: 172.17.0.0/16
        except:
        - 172.17.1.0/24
    - namespaceSelector:
        matchLabels:
          project: myproject
    - podSelector:
        matchLabels:
          role: frontend
    ports:
    - port: 6379
  egress:
  - to:
    - ipBlock:
        cidr: 10.0.0.0/24
    ports:
    - protocol: UDP
      port: 5978
      endPort: 5980
`

const badNetworkPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: bad
spec:
  podSelector: {}
  ingress:
  - ports:
    - port: 8080
      endPort: 80
`

const unknownFieldNetworkPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: typo
spec:
  podSelector: {}
  ingress:
  - form:
    - podSelector: {}
`

// TestNetworkPolicyKubectl drives the real kubectl through a NetworkPolicy's
// life: create, get (the server's table), -o yaml (the server's defaults),
// describe (kubectl's own rendering of the object), explain (the served
// OpenAPI), a rejected one with its field error, strict field validation,
// and delete.
func TestNetworkPolicyKubectl(t *testing.T) {
	a := newTestAPI(t)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, bad, typo := file("good.yaml", bookNetworkPolicy), file("bad.yaml", badNetworkPolicy), file("typo.yaml", unknownFieldNetworkPolicy)
	k := newKubectlCLI(t, a, kubectlBinaries(t)[0])
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := k.run(t, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	wantLines := func(what, out string, want ...string) {
		t.Helper()
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			got = append(got, words(l))
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: no line %q in:\n%s", what, w, out)
			}
		}
	}

	if out := run("create", "--validate=strict", "-f", good); !strings.Contains(out, "networkpolicy.networking.k8s.io/test-network-policy created") {
		t.Errorf("create: %s", out)
	}
	// The short name, as discovery announces it; AGE varies, so only its presence.
	for _, args := range [][]string{{"get", "netpol"}, {"get", "networkpolicies", "-o", "wide"}} {
		out := run(args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !slices.Equal(strings.Fields(lines[0]), []string{"NAME", "POD-SELECTOR", "AGE"}) ||
			len(strings.Fields(lines[1])) != 3 || !strings.HasPrefix(words(lines[1]), "test-network-policy role=db ") {
			t.Errorf("kubectl %s:\n%s", strings.Join(args, " "), out)
		}
	}
	wantLines("get -o yaml", run("get", "netpol", "test-network-policy", "-o", "yaml"),
		"generation: 1", "policyTypes:", "- Ingress", "- Egress", "protocol: TCP", "protocol: UDP", "- endPort: 5980")
	wantLines("describe", run("describe", "netpol", "test-network-policy"),
		"Name: test-network-policy",
		"Namespace: default",
		"PodSelector: role=db",
		"Allowing ingress traffic:",
		"To Port: 6379/TCP",
		"IPBlock:",
		"CIDR: 172.17.0.0/16",
		"Except: 172.17.1.0/24",
		"NamespaceSelector: project=myproject",
		"PodSelector: role=frontend",
		"Allowing egress traffic:",
		"To Port Range: 5978-5980/UDP",
		"CIDR: 10.0.0.0/24",
		"Policy Types: Ingress, Egress",
	)
	explain := words(run("explain", "netpol.spec.ingress.from"))
	for _, w := range []string{"GROUP: networking.k8s.io KIND: NetworkPolicy VERSION: v1", "FIELD: from <[]NetworkPolicyPeer>",
		"ipBlock <IPBlock>", "namespaceSelector <LabelSelector>", "podSelector <LabelSelector>"} {
		if !strings.Contains(explain, w) {
			t.Errorf("explain netpol.spec.ingress.from lacks %q:\n%s", w, explain)
		}
	}

	_, errOut, err := k.run(t, "create", "-f", bad)
	if want := "The NetworkPolicy \"bad\" is invalid: spec.ingress[0].ports[0].endPort: Invalid value: 80: must be greater than or equal to `port`"; err == nil || !strings.Contains(errOut, want) {
		t.Errorf("create of a bad policy: %v, stderr %q, want %q", err, errOut, want)
	}
	_, errOut, err = k.run(t, "apply", "--validate=strict", "-f", typo)
	if err == nil || !strings.Contains(errOut, `unknown field "spec.ingress[0].form"`) {
		t.Errorf("apply --validate=strict of an unknown field: %v, stderr %q", err, errOut)
	}
	for _, name := range []string{"bad", "typo"} {
		if a.exists("/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/" + name) {
			t.Errorf("the invalid policy %q was created", name)
		}
	}

	// A value upstream accepts with a warning: kubectl prints it.
	ipv6 := file("ipv6.yaml", `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: ipv6
spec:
  podSelector: {}
  ingress:
  - from:
    - ipBlock:
        cidr: FD00:0::/64
`)
	out, errOut, err := k.run(t, "create", "-f", ipv6)
	if want := `Warning: spec.ingress[0].from[0].ipBlock.cidr: IPv6 CIDR value "FD00:0::/64" should be in RFC 5952 canonical format ("fd00::/64")`; err != nil || !strings.Contains(errOut, want) {
		t.Errorf("create with a non-canonical IPv6 cidr: %v\n%s%s\nwant %q", err, out, errOut, want)
	}

	if out := run("delete", "netpol", "test-network-policy", "ipv6"); !strings.Contains(out, `networkpolicy.networking.k8s.io "test-network-policy" deleted`) ||
		!strings.Contains(out, `networkpolicy.networking.k8s.io "ipv6" deleted`) {
		t.Errorf("delete: %s", out)
	}
	if out, errOut, err := k.run(t, "get", "netpol"); err != nil || !strings.Contains(errOut, "No resources found in default namespace.") {
		t.Errorf("get after delete: %v\n%s%s", err, out, errOut)
	}
}

const netpolsPath = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies"

func newNetworkPolicy(name string, labels map[string]string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
	}
}

// TestNetworkPolicyAPI: discovery, generation, watch through a client-go
// informer (as the node agents' enforcer consumes policies),
// deletecollection by label, and namespace deletion.
func TestNetworkPolicyAPI(t *testing.T) {
	a := newTestAPI(t)

	var list metav1.APIResourceList
	a.read("/apis/networking.k8s.io/v1", &list)
	i := slices.IndexFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "networkpolicies" })
	if i < 0 {
		t.Fatalf("discovery lacks networkpolicies: %+v", list.APIResources)
	}
	if r := list.APIResources[i]; !r.Namespaced || r.Kind != "NetworkPolicy" || r.SingularName != "networkpolicy" ||
		!slices.Equal(r.ShortNames, []string{"netpol"}) || !slices.Equal(r.Verbs, verbsFull) {
		t.Errorf("discovery of networkpolicies = %+v", r)
	}
	if slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "networkpolicies/status" }) {
		t.Error("networkpolicies has a status subresource; upstream has none")
	}

	cs, err := kubernetes.NewForConfig(&rest.Config{Host: a.url})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	rec := newRecorder("networkpolicies")
	if _, err := factory.Networking().V1().NetworkPolicies().Informer().AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	var np networkingv1.NetworkPolicy
	a.create(netpolsPath, newNetworkPolicy("db", map[string]string{"tier": "data"}))
	rec.await(t, "ADD default/db")
	a.create(netpolsPath, newNetworkPolicy("web", map[string]string{"tier": "front"}))
	rec.await(t, "ADD default/web")
	a.read(netpolsPath+"/db", &np)
	if np.Generation != 1 || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("created policy: generation %d, policyTypes %v", np.Generation, np.Spec.PolicyTypes)
	}
	a.patch(netpolsPath+"/db", "application/merge-patch+json", `{"metadata":{"annotations":{"note":"x"}}}`).mustCode(t, http.StatusOK, &np)
	if np.Generation != 1 {
		t.Errorf("metadata change bumped generation to %d", np.Generation)
	}
	a.patch(netpolsPath+"/db", "application/strategic-merge-patch+json",
		`{"spec":{"egress":[{"ports":[{"port":53,"protocol":"UDP"}]}],"policyTypes":["Ingress","Egress"]}}`).mustCode(t, http.StatusOK, &np)
	if np.Generation != 2 {
		t.Errorf("spec change: generation %d, want 2", np.Generation)
	}
	rec.await(t, "UPDATE default/db")
	a.patch(netpolsPath+"/db", "application/merge-patch+json", `{"spec":{"ingress":[{"ports":[{"port":"no--name"}]}]}}`).
		wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `spec.ingress[0].ports[0].port: Invalid value: "no--name"`)

	a.do(http.MethodDelete, netpolsPath+"?labelSelector=tier%3Ddata", "", nil).mustCode(t, http.StatusOK, nil)
	rec.await(t, "DELETE default/db")
	if !a.exists(netpolsPath + "/web") {
		t.Error("deletecollection by label deleted the other policy")
	}

	// Namespace deletion removes the policies in it.
	a.create(namespacesPath, newNamespace("doomed"))
	a.create("/apis/networking.k8s.io/v1/namespaces/doomed/networkpolicies", newNetworkPolicy("deny", nil))
	rec.await(t, "ADD doomed/deny")
	a.delete("/api/v1/namespaces/doomed").mustCode(t, http.StatusOK, nil)
	rec.await(t, "DELETE doomed/deny")
	testutil.Eventually(t, waitTimeout, "namespace doomed gone", a.gone("/api/v1/namespaces/doomed"))
}

// TestNamespaceNameLabel: every namespace carries kubernetes.io/metadata.name
// with its name, set on create and put back on update, as upstream's namespace
// strategy does, so namespaceSelectors can pick namespaces by name.
func TestNamespaceNameLabel(t *testing.T) {
	a := newTestAPI(t)
	const key = corev1.LabelMetadataName
	ns := newNamespace("team-a")
	ns.Labels = map[string]string{"project": "a", key: "forged"}
	a.create(namespacesPath, ns)
	var got corev1.Namespace
	a.read(namespacesPath+"/team-a", &got)
	if got.Labels[key] != "team-a" || got.Labels["project"] != "a" {
		t.Errorf("created namespace labels = %v", got.Labels)
	}
	got.Labels = map[string]string{"project": "b"}
	a.put(namespacesPath+"/team-a", &got).mustCode(t, http.StatusOK, &got)
	if got.Labels[key] != "team-a" || got.Labels["project"] != "b" {
		t.Errorf("updated namespace labels = %v", got.Labels)
	}
	a.patch(namespacesPath+"/team-a", "application/json-patch+json", `[{"op":"remove","path":"/metadata/labels"}]`).mustCode(t, http.StatusOK, &got)
	if got.Labels[key] != "team-a" {
		t.Errorf("patched namespace labels = %v", got.Labels)
	}
	for _, name := range []string{"default", "kube-system"} {
		a.read(namespacesPath+"/"+name, &got)
		if got.Labels[key] != name {
			t.Errorf("namespace %s labels = %v", name, got.Labels)
		}
	}
}

// TestNetworkPolicyOpenAPIV2: kubectl before 1.27 validates and explains from
// /openapi/v2; its validator, given minikit's document, accepts the book's
// policy and names an unknown field in a peer list.
func TestNetworkPolicyOpenAPIV2(t *testing.T) {
	a := newTestAPI(t)
	var doc struct {
		Paths       map[string]json.RawMessage `json:"paths"`
		Definitions map[string]struct {
			GVK []map[string]string `json:"x-kubernetes-group-version-kind"`
		} `json:"definitions"`
	}
	a.do(http.MethodGet, "/openapi/v2", "", nil, "Accept", "application/json").mustCode(t, http.StatusOK, &doc)
	for _, p := range []string{
		"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
		"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{name}",
		"/apis/networking.k8s.io/v1/networkpolicies",
	} {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("/openapi/v2 lacks the path %s", p)
		}
	}
	want := []map[string]string{{"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy"}}
	if got := doc.Definitions["io.k8s.api.networking.v1.NetworkPolicy"].GVK; !reflect.DeepEqual(got, want) {
		t.Errorf("io.k8s.api.networking.v1.NetworkPolicy is marked %v, want %v", got, want)
	}

	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: a.url})
	if err != nil {
		t.Fatal(err)
	}
	v := kubectlvalidation.NewSchemaValidation(schemaResources{openapiutil.NewOpenAPIParser(dc)})
	for manifest, wantErr := range map[string]string{
		bookNetworkPolicy:         "",
		unknownFieldNetworkPolicy: `unknown field "form" in io.k8s.api.networking.v1.NetworkPolicyIngressRule`,
	} {
		js, err := yaml.YAMLToJSON([]byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		err = v.ValidateBytes(js)
		if (wantErr == "" && err != nil) || (wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr))) {
			t.Errorf("client-side validation: %v, want %q", err, wantErr)
		}
	}
}
