package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/store"
	"github.com/minikit/minikit/internal/testutil"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestCreateWithGenerateName(t *testing.T) {
	a := newTestAPI(t)
	seen := map[string]bool{}
	for range 5 {
		svc := newService("")
		svc.GenerateName = "web-"
		a.create(servicesPath, svc)
		suffix, ok := strings.CutPrefix(svc.Name, "web-")
		if !ok || len(suffix) != 5 {
			t.Errorf("generated name %q, want web- and five characters", svc.Name)
		}
		if seen[svc.Name] {
			t.Errorf("name %q generated twice", svc.Name)
		}
		seen[svc.Name] = true
		if svc.GenerateName != "web-" || svc.UID == "" || svc.ResourceVersion == "" || svc.CreationTimestamp.IsZero() {
			t.Errorf("created object lacks server-set metadata: %+v", svc.ObjectMeta)
		}
		a.read(servicesPath+"/"+svc.Name, &corev1.Service{})
	}

	// Neither name nor generateName: 422 on metadata.name.
	r := a.post(servicesPath, newService(""))
	st := r.wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "name or generateName is required")
	if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != "metadata.name" {
		t.Errorf("causes %+v, want one on metadata.name", st.Details)
	}
}

func TestGetMissing(t *testing.T) {
	a := newTestAPI(t)
	cases := []struct {
		path, message, kind string
	}{
		{servicesPath + "/x", `services "x" not found`, "services"},
		{"/api/v1/namespaces/kube-system/configmaps/x", `configmaps "x" not found`, "configmaps"},
		{nodesPath + "/x", `nodes "x" not found`, "nodes"},
		{deploymentsPath + "/x", `deployments.apps "x" not found`, "deployments"},
		{"/apis/networking.k8s.io/v1/ingressclasses/x", `ingressclasses.networking.k8s.io "x" not found`, "ingressclasses"},
		{namespacesPath + "/x", `namespaces "x" not found`, "namespaces"},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			a := a.with(t)
			st := a.get(tc.path).wantStatus(t, http.StatusNotFound, metav1.StatusReasonNotFound, "")
			if st.Message != tc.message {
				t.Errorf("message %q, want %q", st.Message, tc.message)
			}
			if st.Details == nil || st.Details.Name != "x" || st.Details.Kind != tc.kind {
				t.Errorf("details %+v, want name x kind %s", st.Details, tc.kind)
			}
		})
	}
}

func TestCreateTwice(t *testing.T) {
	a := newTestAPI(t)
	cases := []struct {
		name, path, message string
		obj                 func() any
	}{
		{"service", servicesPath, `services "web" already exists`, func() any { return newService("web") }},
		{"configmap", configMapsPath, `configmaps "web" already exists`, func() any { return newConfigMap("web", nil) }},
		{"namespace", namespacesPath, `namespaces "default" already exists`, func() any { return newNamespace("default") }},
		{"deployment", deploymentsPath, `deployments.apps "web" already exists`, func() any { return newDeployment("web", 1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := a.with(t)
			if tc.name != "namespace" {
				a.create(tc.path, tc.obj())
			}
			rev := a.store.Rev()
			a.post(tc.path, tc.obj()).wantStatus(t, http.StatusConflict, metav1.StatusReasonAlreadyExists, tc.message)
			if a.store.Rev() != rev {
				t.Errorf("a refused create wrote to the store")
			}
		})
	}
}

func TestPutResourceVersion(t *testing.T) {
	cases := []struct {
		name string
		// rv picks the resourceVersion sent, given the one before the last update
		// and the current one.
		rv     func(stale, cur string) string
		data   map[string]string
		code   int
		reason metav1.StatusReason
		bumps  bool
	}{
		{name: "stale resourceVersion", rv: func(stale, _ string) string { return stale },
			data: map[string]string{"k": "new"}, code: 409, reason: metav1.StatusReasonConflict},
		{name: "current resourceVersion", rv: func(_, cur string) string { return cur },
			data: map[string]string{"k": "new"}, code: 200, bumps: true},
		{name: "no resourceVersion", rv: func(string, string) string { return "" },
			data: map[string]string{"k": "new"}, code: 200, bumps: true},
		{name: "no-op with resourceVersion", rv: func(_, cur string) string { return cur },
			data: map[string]string{"k": "v2"}, code: 200},
		{name: "no-op without resourceVersion", rv: func(string, string) string { return "" },
			data: map[string]string{"k": "v2"}, code: 200},
	}
	a := newTestAPI(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := a.with(t)
			name := fmt.Sprintf("cm-%d", i)
			path := configMapsPath + "/" + name
			cm := newConfigMap(name, map[string]string{"k": "v1"})
			a.create(configMapsPath, cm)
			stale := cm.ResourceVersion
			a.patch(path, "application/merge-patch+json", `{"data":{"k":"v2"}}`).mustCode(t, 200, cm)

			rev := a.store.Rev()
			put := cm.DeepCopy()
			put.ResourceVersion = tc.rv(stale, cm.ResourceVersion)
			put.Data = tc.data
			r := a.put(path, put)
			if tc.code != 200 {
				r.wantStatus(t, tc.code, tc.reason, `Operation cannot be fulfilled on configmaps "`+name+`": the object has been modified`)
			} else {
				var got corev1.ConfigMap
				r.mustCode(t, 200, &got)
				if got.Data["k"] != tc.data["k"] {
					t.Errorf("data %v, want %v", got.Data, tc.data)
				}
				if bumped := got.ResourceVersion != cm.ResourceVersion; bumped != tc.bumps {
					t.Errorf("resourceVersion went from %s to %s, want bumped=%v", cm.ResourceVersion, got.ResourceVersion, tc.bumps)
				}
				if got.UID != cm.UID || !got.CreationTimestamp.Equal(&cm.CreationTimestamp) {
					t.Errorf("update changed identity: %+v", got.ObjectMeta)
				}
			}
			if wrote := a.store.Rev() != rev; wrote != tc.bumps {
				t.Errorf("store revision went from %d to %d, want a write=%v", rev, a.store.Rev(), tc.bumps)
			}
		})
	}

	t.Run("no-op put of a service as read", func(t *testing.T) {
		a := a.with(t)
		svc := newService("noop", nodePortType)
		a.create(servicesPath, svc)
		var cur corev1.Service
		a.read(servicesPath+"/noop", &cur)
		rev := a.store.Rev()
		var got corev1.Service
		a.put(servicesPath+"/noop", &cur).mustCode(t, 200, &got)
		if got.ResourceVersion != cur.ResourceVersion || a.store.Rev() != rev {
			t.Errorf("no-op PUT moved resourceVersion %s -> %s (store %d -> %d)", cur.ResourceVersion, got.ResourceVersion, rev, a.store.Rev())
		}
		// Without clusterIP and nodePort the allocated values are kept, as kubectl
		// replace of the original manifest expects.
		bare := newService("noop", nodePortType)
		a.put(servicesPath+"/noop", bare).mustCode(t, 200, &got)
		if got.Spec.ClusterIP != cur.Spec.ClusterIP || got.Spec.Ports[0].NodePort != cur.Spec.Ports[0].NodePort {
			t.Errorf("PUT without allocations changed them: clusterIP %s -> %s, nodePort %d -> %d",
				cur.Spec.ClusterIP, got.Spec.ClusterIP, cur.Spec.Ports[0].NodePort, got.Spec.Ports[0].NodePort)
		}
		if got.ResourceVersion != cur.ResourceVersion {
			t.Errorf("PUT of the original manifest moved resourceVersion %s -> %s", cur.ResourceVersion, got.ResourceVersion)
		}
	})
}

func TestPatch(t *testing.T) {
	type port struct {
		port   int32
		target int
	}
	cases := []struct {
		name, patchType, patch string
		code                   int
		reason                 metav1.StatusReason
		ports                  []port
		labels                 map[string]string
	}{
		{name: "merge patch adds a label", patchType: "application/merge-patch+json",
			patch: `{"metadata":{"labels":{"tier":"web"}}}`,
			code:  200, ports: []port{{80, 8080}, {443, 8443}}, labels: map[string]string{"tier": "web"}},
		{name: "merge patch replaces the port list", patchType: "application/merge-patch+json",
			patch: `{"spec":{"ports":[{"name":"https","port":443,"targetPort":9443}]}}`,
			code:  200, ports: []port{{443, 9443}}},
		{name: "json patch", patchType: "application/json-patch+json",
			patch: `[{"op":"add","path":"/metadata/labels","value":{"tier":"web"}},{"op":"replace","path":"/spec/ports/0/targetPort","value":9090}]`,
			code:  200, ports: []port{{80, 9090}, {443, 8443}}, labels: map[string]string{"tier": "web"}},
		{name: "strategic merge patch merges ports by number", patchType: "application/strategic-merge-patch+json",
			patch: `{"spec":{"ports":[{"port":443,"targetPort":9443}]}}`,
			code:  200, ports: []port{{80, 8080}, {443, 9443}}},
		{name: "strategic merge patch adds a port", patchType: "application/strategic-merge-patch+json",
			patch: `{"spec":{"ports":[{"name":"metrics","port":9100}]}}`,
			code:  200, ports: []port{{80, 8080}, {443, 8443}, {9100, 9100}}},
		{name: "strategic merge patch deletes a port", patchType: "application/strategic-merge-patch+json",
			patch: `{"spec":{"ports":[{"port":80,"$patch":"delete"}]}}`,
			code:  200, ports: []port{{443, 8443}}},
		{name: "stale resourceVersion in the patch", patchType: "application/merge-patch+json",
			patch: `{"metadata":{"resourceVersion":"2","labels":{"tier":"web"}}}`,
			code:  409, reason: metav1.StatusReasonConflict},
		{name: "patch making the object invalid", patchType: "application/merge-patch+json",
			patch: `{"spec":{"ports":[{"port":0}]}}`,
			code:  422, reason: metav1.StatusReasonInvalid},
	}
	a := newTestAPI(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := a.with(t)
			name := fmt.Sprintf("web-%d", i)
			svc := newService(name, func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)})
			})
			a.create(servicesPath, svc)
			r := a.patch(servicesPath+"/"+name, tc.patchType, tc.patch)
			if tc.code != 200 {
				r.wantStatus(t, tc.code, tc.reason, "")
				var cur corev1.Service
				a.read(servicesPath+"/"+name, &cur)
				if cur.ResourceVersion != svc.ResourceVersion {
					t.Errorf("refused patch changed the object")
				}
				return
			}
			var got corev1.Service
			r.mustCode(t, 200, &got)
			var ports []port
			for _, p := range got.Spec.Ports {
				ports = append(ports, port{p.Port, p.TargetPort.IntValue()})
			}
			slices.SortFunc(ports, func(x, y port) int { return int(x.port - y.port) })
			if !slices.Equal(ports, tc.ports) {
				t.Errorf("ports %v, want %v", ports, tc.ports)
			}
			for k, v := range tc.labels {
				if got.Labels[k] != v {
					t.Errorf("label %s=%q, want %q", k, got.Labels[k], v)
				}
			}
			if got.Spec.ClusterIP != svc.Spec.ClusterIP || got.UID != svc.UID {
				t.Errorf("patch changed clusterIP %s -> %s or uid", svc.Spec.ClusterIP, got.Spec.ClusterIP)
			}
			if got.ResourceVersion == svc.ResourceVersion {
				t.Errorf("patch did not bump resourceVersion")
			}
		})
	}
	t.Run("patch of a missing object", func(t *testing.T) {
		a := a.with(t)
		a.patch(servicesPath+"/missing", "application/merge-patch+json", `{}`).
			wantStatus(t, 404, metav1.StatusReasonNotFound, `services "missing" not found`)
	})
}

func TestStatusSubresource(t *testing.T) {
	a := newTestAPI(t)
	d := newDeployment("web", 2)
	d.Status.Replicas = 42 // a client may not set status on create
	a.post(deploymentsPath, d).mustCode(t, http.StatusCreated, nil)
	d = &appsv1.Deployment{}
	a.read(deploymentsPath+"/web", d)
	if d.Status.Replicas != 0 || d.Generation != 1 {
		t.Fatalf("created deployment has status.replicas %d generation %d, want 0 and 1", d.Status.Replicas, d.Generation)
	}
	path := deploymentsPath + "/web"
	steps := []struct {
		name, path string
		mutate     func(*appsv1.Deployment)
		// What the stored object has afterwards.
		specReplicas, statusReplicas int32
		generation                   int64
	}{
		{name: "status write changes status only", path: path + "/status",
			mutate: func(d *appsv1.Deployment) {
				d.Spec.Replicas = ptrTo[int32](9)
				d.Status.Replicas = 2
				d.Labels = map[string]string{"x": "y"}
			},
			specReplicas: 2, statusReplicas: 2, generation: 1},
		{name: "main write changes spec only", path: path,
			mutate:       func(d *appsv1.Deployment) { d.Spec.Replicas = ptrTo[int32](3); d.Status.Replicas = 7 },
			specReplicas: 3, statusReplicas: 2, generation: 2},
		{name: "main write of metadata keeps generation", path: path,
			mutate:       func(d *appsv1.Deployment) { d.Labels = map[string]string{"tier": "web"} },
			specReplicas: 3, statusReplicas: 2, generation: 2},
		{name: "status write with status unchanged is a no-op", path: path + "/status",
			mutate:       func(d *appsv1.Deployment) { d.Spec.Paused = true },
			specReplicas: 3, statusReplicas: 2, generation: 2},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			a := a.with(t)
			var cur appsv1.Deployment
			a.read(path, &cur)
			st.mutate(&cur)
			a.put(st.path, &cur).mustCode(t, 200, nil)
			var got appsv1.Deployment
			a.read(path, &got)
			if *got.Spec.Replicas != st.specReplicas || got.Status.Replicas != st.statusReplicas || got.Generation != st.generation {
				t.Errorf("spec.replicas %d status.replicas %d generation %d, want %d %d %d",
					*got.Spec.Replicas, got.Status.Replicas, got.Generation, st.specReplicas, st.statusReplicas, st.generation)
			}
			if st.path == path+"/status" && (got.Labels["x"] != "" || got.Spec.Paused) {
				t.Errorf("status write changed metadata or spec: labels %v paused %v", got.Labels, got.Spec.Paused)
			}
		})
	}

	// The Service status lifecycle conformance spec: a status patch may
	// carry metadata, which Kubernetes' service status strategy keeps.
	t.Run("service status with metadata", func(t *testing.T) {
		a := a.with(t)
		a.create(servicesPath, newService("lb", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }))
		var got corev1.Service
		a.patch(servicesPath+"/lb/status", "application/merge-patch+json",
			`{"metadata":{"annotations":{"patchedstatus":"true"}},"spec":{"type":"ClusterIP"},"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.1"}]}}}`).mustCode(t, 200, &got)
		if got.Annotations["patchedstatus"] != "true" || got.Spec.Type != corev1.ServiceTypeLoadBalancer ||
			len(got.Status.LoadBalancer.Ingress) != 1 || got.Status.LoadBalancer.Ingress[0].IP != "203.0.113.1" {
			t.Errorf("after status patch: annotations %v type %s status %+v", got.Annotations, got.Spec.Type, got.Status)
		}
	})

	t.Run("pod status", func(t *testing.T) {
		a := a.with(t)
		p := newPod("p", "", nil)
		a.create(podsPath, p)
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = "10.244.0.5"
		p.Spec.ActiveDeadlineSeconds = ptrTo[int64](5)
		var got corev1.Pod
		a.put(podsPath+"/p/status", p).mustCode(t, 200, &got)
		if got.Status.Phase != corev1.PodRunning || got.Status.PodIP != "10.244.0.5" || got.Spec.ActiveDeadlineSeconds != nil {
			t.Errorf("pod after status write: phase %s podIP %s activeDeadlineSeconds %v", got.Status.Phase, got.Status.PodIP, got.Spec.ActiveDeadlineSeconds)
		}
		var patched corev1.Pod
		a.patch(podsPath+"/p/status", "application/merge-patch+json", `{"status":{"podIP":"10.244.0.6"},"metadata":{"labels":{"a":"b"}}}`).mustCode(t, 200, &patched)
		if patched.Status.PodIP != "10.244.0.6" || patched.Labels["a"] != "" {
			t.Errorf("status patch: podIP %s labels %v", patched.Status.PodIP, patched.Labels)
		}
	})
	t.Run("no status subresource on configmaps", func(t *testing.T) {
		a := a.with(t)
		a.create(configMapsPath, newConfigMap("c", nil))
		a.get(configMapsPath+"/c/status").wantStatus(t, 404, metav1.StatusReasonNotFound, "")
	})
}

func ptrTo[T any](v T) *T { return &v }

func TestListSelectors(t *testing.T) {
	a := newTestAPI(t)
	a.create(namespacesPath, newNamespace("other"))
	for _, p := range []struct{ ns, name, node, app string }{
		{"default", "p1", "n1", "a"},
		{"default", "p2", "n1", "b"},
		{"default", "p3", "n2", "a"},
		{"default", "p4", "", "b"},
		{"other", "p5", "n1", "a"},
	} {
		a.create("/api/v1/namespaces/"+p.ns+"/pods", newPod(p.name, p.node, map[string]string{"app": p.app}))
	}
	cases := []struct {
		path   string
		query  string
		want   []string
		code   int
		reason metav1.StatusReason
	}{
		{path: podsPath, want: []string{"default/p1", "default/p2", "default/p3", "default/p4"}},
		{path: podsPath, query: "labelSelector=app=a", want: []string{"default/p1", "default/p3"}},
		{path: podsPath, query: "labelSelector=app!=a", want: []string{"default/p2", "default/p4"}},
		{path: podsPath, query: "labelSelector=app in (a,b),app notin (b)", want: []string{"default/p1", "default/p3"}},
		{path: podsPath, query: "labelSelector=tier", want: nil},
		{path: podsPath, query: "fieldSelector=metadata.name=p2", want: []string{"default/p2"}},
		{path: podsPath, query: "fieldSelector=spec.nodeName=n1", want: []string{"default/p1", "default/p2"}},
		{path: podsPath, query: "fieldSelector=spec.nodeName!=n1", want: []string{"default/p3", "default/p4"}},
		{path: podsPath, query: "fieldSelector=spec.nodeName=", want: []string{"default/p4"}},
		{path: podsPath, query: "fieldSelector=status.phase=Pending,spec.nodeName=n2", want: []string{"default/p3"}},
		{path: podsPath, query: "labelSelector=app=a&fieldSelector=spec.nodeName=n1", want: []string{"default/p1"}},
		{path: "/api/v1/pods", query: "fieldSelector=spec.nodeName=n1", want: []string{"default/p1", "default/p2", "other/p5"}},
		{path: "/api/v1/pods", query: "fieldSelector=metadata.namespace=other", want: []string{"other/p5"}},
		{path: "/api/v1/pods", query: "fieldSelector=metadata.namespace!=default", want: []string{"other/p5"}},
		{path: podsPath, query: "fieldSelector=spec.foo=x", code: 400, reason: metav1.StatusReasonBadRequest},
		{path: "/api/v1/services", query: "fieldSelector=spec.nodeName=n1", code: 400, reason: metav1.StatusReasonBadRequest},
		{path: podsPath, query: "fieldSelector=spec.nodeName==n1==", code: 400, reason: metav1.StatusReasonBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.path+"?"+tc.query, func(t *testing.T) {
			a := a.with(t)
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			r := a.get(tc.path + "?" + q.Encode())
			if tc.code != 0 {
				r.wantStatus(t, tc.code, tc.reason, "")
				return
			}
			var list corev1.PodList
			r.mustCode(t, 200, &list)
			var got []string
			for _, p := range list.Items {
				got = append(got, p.Namespace+"/"+p.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if list.Kind != "PodList" || list.APIVersion != "v1" || list.ResourceVersion != strconv.FormatInt(a.store.Rev(), 10) {
				t.Errorf("list kind %q apiVersion %q resourceVersion %q, want PodList v1 %d", list.Kind, list.APIVersion, list.ResourceVersion, a.store.Rev())
			}
		})
	}
}

func TestClusterWideList(t *testing.T) {
	a := newTestAPI(t)
	a.create(namespacesPath, newNamespace("team-a"))
	a.create(servicesPath, newService("web"))
	a.create("/api/v1/namespaces/team-a/services", newService("api"))
	var list corev1.ServiceList
	a.read("/api/v1/services", &list)
	var got []string
	for _, s := range list.Items {
		got = append(got, s.Namespace+"/"+s.Name)
		if s.Spec.ClusterIP == "" || s.ResourceVersion == "" {
			t.Errorf("listed service %s/%s lacks clusterIP or resourceVersion", s.Namespace, s.Name)
		}
	}
	slices.Sort(got)
	if want := []string{"default/kubernetes", "default/web", "team-a/api"}; !slices.Equal(got, want) {
		t.Errorf("cluster-wide services %v, want %v", got, want)
	}
	var inNS corev1.ServiceList
	a.read("/api/v1/namespaces/team-a/services", &inNS)
	if len(inNS.Items) != 1 || inNS.Items[0].Name != "api" {
		t.Errorf("team-a services %+v, want only api", inNS.Items)
	}
}

func TestScaleSubresource(t *testing.T) {
	a := newTestAPI(t)
	a.create(deploymentsPath, newDeployment("web", 2))
	path := deploymentsPath + "/web/scale"

	var sc autoscalingv1.Scale
	a.read(path, &sc)
	if sc.Kind != "Scale" || sc.APIVersion != "autoscaling/v1" || sc.Name != "web" || sc.Spec.Replicas != 2 || sc.Status.Selector != "app=web" {
		t.Fatalf("scale %+v, want autoscaling/v1 Scale web with 2 replicas and selector app=web", sc)
	}

	cases := []struct {
		name, method, contentType string
		body                      any
		code                      int
		reason                    metav1.StatusReason
		replicas                  int32 // of the deployment afterwards
	}{
		{name: "merge patch, as kubectl scale sends", method: http.MethodPatch, contentType: "application/merge-patch+json",
			body: `{"spec":{"replicas":5}}`, code: 200, replicas: 5},
		{name: "strategic merge patch", method: http.MethodPatch, contentType: "application/strategic-merge-patch+json",
			body: `{"spec":{"replicas":4}}`, code: 200, replicas: 4},
		{name: "put with a stale resourceVersion", method: http.MethodPut,
			body: &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "web", ResourceVersion: sc.ResourceVersion}, Spec: autoscalingv1.ScaleSpec{Replicas: 9}},
			code: 409, reason: metav1.StatusReasonConflict, replicas: 4},
		{name: "put without resourceVersion", method: http.MethodPut,
			body: &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: autoscalingv1.ScaleSpec{Replicas: 1}},
			code: 200, replicas: 1},
		{name: "negative replicas", method: http.MethodPatch, contentType: "application/merge-patch+json",
			body: `{"spec":{"replicas":-1}}`, code: 422, reason: metav1.StatusReasonInvalid, replicas: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := a.with(t)
			r := a.do(tc.method, path, tc.contentType, tc.body)
			if tc.code == 200 {
				var got autoscalingv1.Scale
				r.mustCode(t, 200, &got)
				if got.Spec.Replicas != tc.replicas {
					t.Errorf("scale answered %d replicas, want %d", got.Spec.Replicas, tc.replicas)
				}
			} else {
				r.wantStatus(t, tc.code, tc.reason, "")
			}
			var d appsv1.Deployment
			a.read(deploymentsPath+"/web", &d)
			if *d.Spec.Replicas != tc.replicas {
				t.Errorf("deployment has %d replicas, want %d", *d.Spec.Replicas, tc.replicas)
			}
		})
	}
	t.Run("no scale subresource on services", func(t *testing.T) {
		a := a.with(t)
		a.get(servicesPath+"/kubernetes/scale").wantStatus(t, 404, metav1.StatusReasonNotFound, "")
	})
	t.Run("scale of a missing deployment", func(t *testing.T) {
		a := a.with(t)
		a.get(deploymentsPath+"/missing/scale").wantStatus(t, 404, metav1.StatusReasonNotFound, `deployments.apps "missing" not found`)
	})
}

func TestDeleteReturnsObject(t *testing.T) {
	a := newTestAPI(t)
	svc := newService("web")
	a.create(servicesPath, svc)
	var got corev1.Service
	a.delete(servicesPath+"/web").mustCode(t, 200, &got)
	if got.Kind != "Service" || got.Name != "web" || got.UID != svc.UID || got.Spec.ClusterIP != svc.Spec.ClusterIP {
		t.Errorf("DELETE answered %s %s uid %s clusterIP %s, want the deleted service", got.Kind, got.Name, got.UID, got.Spec.ClusterIP)
	}
	if a.exists(servicesPath + "/web") {
		t.Errorf("service still there after DELETE")
	}
	a.delete(servicesPath+"/web").wantStatus(t, 404, metav1.StatusReasonNotFound, `services "web" not found`)

	t.Run("uid precondition", func(t *testing.T) {
		a := a.with(t)
		cm := newConfigMap("c", nil)
		a.create(configMapsPath, cm)
		opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrTo(types.UID("not-" + string(cm.UID)))}}
		a.do(http.MethodDelete, configMapsPath+"/c", "", &opts).wantStatus(t, 409, metav1.StatusReasonConflict, "")
		if !a.exists(configMapsPath + "/c") {
			t.Fatalf("delete with a failed precondition deleted")
		}
		opts.Preconditions.UID = &cm.UID
		a.do(http.MethodDelete, configMapsPath+"/c", "", &opts).mustCode(t, 200, nil)
		if a.exists(configMapsPath + "/c") {
			t.Errorf("delete with a matching precondition kept the object")
		}
	})
	t.Run("delete collection", func(t *testing.T) {
		a := a.with(t)
		for _, n := range []string{"x1", "x2", "y1"} {
			a.create(configMapsPath, &corev1.ConfigMap{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"group": n[:1]}},
			})
		}
		var deleted corev1.ConfigMapList
		a.delete(configMapsPath+"?labelSelector=group%3Dx").mustCode(t, 200, &deleted)
		if len(deleted.Items) != 2 {
			t.Errorf("deleted %d configmaps, want 2", len(deleted.Items))
		}
		var left corev1.ConfigMapList
		a.read(configMapsPath, &left)
		if len(left.Items) != 1 || left.Items[0].Name != "y1" {
			t.Errorf("left %+v, want y1 only", left.Items)
		}
	})
}

func TestNamespaceDeletion(t *testing.T) {
	a := newTestAPI(t)
	a.create(nodesPath, newNode("n1"))
	a.create(namespacesPath, newNamespace("doomed"))
	const ns = "/api/v1/namespaces/doomed"
	svc := newService("web", nodePortType)
	a.create(ns+"/services", svc)
	a.create(ns+"/configmaps", newConfigMap("c", nil))
	a.create(ns+"/pods", newPod("unbound", "", nil))
	// A pod running on a node keeps the namespace Terminating until its node agent
	// (here, the test) deletes it with grace 0.
	a.create(ns+"/pods", newPod("running", "n1", nil))

	var n corev1.Namespace
	a.delete(ns).mustCode(t, 200, &n)
	if n.Status.Phase != corev1.NamespaceTerminating || n.DeletionTimestamp == nil {
		t.Fatalf("deleted namespace has phase %q deletionTimestamp %v, want Terminating and set", n.Status.Phase, n.DeletionTimestamp)
	}
	testutil.Eventually(t, waitTimeout, "namespace content but the running pod to go", func() error {
		var pods corev1.PodList
		a.read(ns+"/pods", &pods)
		for _, p := range []string{ns + "/services/web", ns + "/configmaps/c"} {
			if a.exists(p) {
				return fmt.Errorf("%s still exists", p)
			}
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d pods, want the running one", len(pods.Items))
		}
		return nil
	})
	var running corev1.Pod
	a.read(ns+"/pods/running", &running)
	if running.DeletionTimestamp == nil {
		t.Errorf("pod on a node is not terminating")
	}
	a.read(ns, &n)
	if n.Status.Phase != corev1.NamespaceTerminating {
		t.Errorf("namespace phase %q while a pod terminates, want Terminating", n.Status.Phase)
	}
	a.post(ns+"/configmaps", newConfigMap("late", nil)).
		wantStatus(t, 403, metav1.StatusReasonForbidden, "because it is being terminated")
	a.delete(ns).mustCode(t, 200, nil) // deleting again is fine
	// Updating a Terminating namespace (kubectl label, a controller) neither
	// removes it early nor lets its name be reused while content remains.
	a.patch(ns, "application/merge-patch+json", `{"metadata":{"labels":{"touched":"yes"}}}`).mustCode(t, 200, nil)
	a.read(ns, &n)
	if n.Status.Phase != corev1.NamespaceTerminating || n.Labels["touched"] != "yes" {
		t.Errorf("after a label update the namespace is %q with labels %v, want Terminating and labeled", n.Status.Phase, n.Labels)
	}
	a.post(namespacesPath, newNamespace("doomed")).wantStatus(t, 409, metav1.StatusReasonAlreadyExists, "")

	a.do(http.MethodDelete, ns+"/pods/running?gracePeriodSeconds=0", "", nil).mustCode(t, 200, nil)
	testutil.Eventually(t, waitTimeout, "namespace to go", a.gone(ns))

	// The service's allocations went with it.
	for _, key := range []string{
		allocIPPrefix + svc.Spec.ClusterIP,
		allocPortPrefix + strconv.Itoa(int(svc.Spec.Ports[0].NodePort)),
	} {
		if _, err := a.store.Get(key); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("allocation %s still held after the namespace went: %v", key, err)
		}
	}
	// And the name can be used again.
	a.create(namespacesPath, newNamespace("doomed"))
	var cms corev1.ConfigMapList
	a.read(ns+"/configmaps", &cms)
	if len(cms.Items) != 0 {
		t.Errorf("recreated namespace has old content: %+v", cms.Items)
	}
}

func TestProtectedNamespaces(t *testing.T) {
	a := newTestAPI(t)
	for _, name := range []string{"default", "kube-system", "kube-public"} {
		t.Run(name, func(t *testing.T) {
			a := a.with(t)
			a.delete(namespacesPath+"/"+name).wantStatus(t, 403, metav1.StatusReasonForbidden, "may not be deleted")
			var n corev1.Namespace
			a.read(namespacesPath+"/"+name, &n)
			if n.Status.Phase != corev1.NamespaceActive || n.DeletionTimestamp != nil {
				t.Errorf("namespace %s is %q after a refused delete", name, n.Status.Phase)
			}
		})
	}
}

func TestPodDeletion(t *testing.T) {
	a := newTestAPI(t)
	a.create(nodesPath, newNode("n1"))
	cases := []struct {
		name, node string
		phase      corev1.PodPhase // set through /status before deleting
		query      string
		graceful   bool
	}{
		{name: "unbound", node: ""},
		{name: "on-a-missing-node", node: "ghost"},
		{name: "on-a-node", node: "n1", graceful: true},
		{name: "on-a-node-grace-0", node: "n1", query: "?gracePeriodSeconds=0"},
		{name: "finished-on-a-node", node: "n1", phase: corev1.PodSucceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := a.with(t)
			p := newPod(tc.name, tc.node, nil)
			a.create(podsPath, p)
			path := podsPath + "/" + tc.name
			if tc.phase != "" {
				p.Status.Phase = tc.phase
				a.put(path+"/status", p).mustCode(t, 200, nil)
			}
			var got corev1.Pod
			a.do(http.MethodDelete, path+tc.query, "", nil).mustCode(t, 200, &got)
			if got.Name != tc.name || got.UID != p.UID {
				t.Errorf("DELETE answered %s %s, want the pod", got.Name, got.UID)
			}
			if !tc.graceful {
				if a.exists(path) {
					t.Errorf("pod still there")
				}
				return
			}
			if got.DeletionTimestamp == nil || got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 30 {
				t.Fatalf("graceful delete answered deletionTimestamp %v grace %v, want set and 30", got.DeletionTimestamp, got.DeletionGracePeriodSeconds)
			}
			var cur corev1.Pod
			a.read(path, &cur)
			if cur.DeletionTimestamp == nil {
				t.Fatalf("terminating pod has no deletionTimestamp")
			}
			// Deleting again with the same grace changes nothing.
			rev := a.store.Rev()
			a.delete(path).mustCode(t, 200, nil)
			if a.store.Rev() != rev {
				t.Errorf("second graceful delete wrote")
			}
			a.do(http.MethodDelete, path+"?gracePeriodSeconds=0", "", nil).mustCode(t, 200, nil)
			if a.exists(path) {
				t.Errorf("pod still there after a delete with gracePeriodSeconds=0")
			}
		})
	}
}

func TestFinalizers(t *testing.T) {
	a := newTestAPI(t)
	cases := []struct {
		name, path string
		obj        func() metav1.Object
	}{
		{"configmap", configMapsPath, func() metav1.Object { return newConfigMap("held", nil) }},
		{"service", servicesPath, func() metav1.Object { return newService("held", nodePortType) }},
		{"deployment", deploymentsPath, func() metav1.Object { return newDeployment("held", 1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := a.with(t)
			obj := tc.obj()
			obj.SetFinalizers([]string{"example.com/hold"})
			a.create(tc.path, obj)
			path := tc.path + "/held"

			var got metav1.PartialObjectMetadata
			a.delete(path).mustCode(t, 200, &got)
			if got.DeletionTimestamp == nil {
				t.Fatalf("delete of an object with finalizers answered no deletionTimestamp")
			}
			a.read(path, &got)
			if got.DeletionTimestamp == nil || !slices.Equal(got.Finalizers, []string{"example.com/hold"}) {
				t.Fatalf("object after delete: deletionTimestamp %v finalizers %v", got.DeletionTimestamp, got.Finalizers)
			}
			a.patch(path, "application/merge-patch+json", `{"metadata":{"finalizers":["example.com/hold","example.com/more"]}}`).
				wantStatus(t, 422, metav1.StatusReasonInvalid, "")
			a.patch(path, "application/merge-patch+json", `{"metadata":{"labels":{"still":"here"}}}`).mustCode(t, 200, nil)
			if !a.exists(path) {
				t.Fatalf("object went while its finalizer is set")
			}
			a.patch(path, "application/merge-patch+json", `{"metadata":{"finalizers":null}}`).mustCode(t, 200, nil)
			if a.exists(path) {
				t.Errorf("object still there after its last finalizer went")
			}
			if svc, ok := obj.(*corev1.Service); ok {
				if _, err := a.store.Get(allocIPPrefix + svc.Spec.ClusterIP); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("clusterIP %s still allocated: %v", svc.Spec.ClusterIP, err)
				}
			}
		})
	}
}
