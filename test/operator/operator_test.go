// Package operator_test installs what users install in a lab and runs the
// kind of controller they test in CI against it: the Gateway API CRD bundle
// with kubectl apply --server-side (then a route through its typed client, read
// back with the bundle's defaults), then a controller-runtime manager, in the test process, reconciles a
// custom resource (a Website) into a Deployment and a Service with
// server-side apply, and writes the Website's status through the status
// subresource with server-side apply; the Service answers a pod, and
// deleting the Website collects what it owns.
package operator_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	agnhost    = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	fieldOwner = "website-controller"
)

var websiteGVK = schema.GroupVersionKind{Group: "demo.minikit.io", Version: "v1", Kind: "Website"}

func websiteCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "websites.demo.minikit.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "demo.minikit.io", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "websites", Singular: "website", Kind: "Website", ListKind: "WebsiteList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"replicas": {Type: "integer", Default: &apiextensionsv1.JSON{Raw: []byte("2")}, Minimum: ptr.To(1.0)},
						}},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"readyReplicas":      {Type: "integer"},
							"url":                {Type: "string"},
							"observedGeneration": {Type: "integer"},
						}},
					},
				}},
			}},
		},
	}
}

// reconciler makes a Website's Deployment and Service with server-side
// apply, then applies its status.
type reconciler struct{ c client.Client }

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	site := &unstructured.Unstructured{}
	site.SetGroupVersionKind(websiteGVK)
	if err := r.c.Get(ctx, req.NamespacedName, site); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	replicas, _, _ := unstructured.NestedInt64(site.Object, "spec", "replicas")
	owner := metav1ac.OwnerReference().WithAPIVersion(websiteGVK.GroupVersion().String()).WithKind(websiteGVK.Kind).
		WithName(site.GetName()).WithUID(site.GetUID()).WithController(true).WithBlockOwnerDeletion(true)
	labels := map[string]string{"website": site.GetName()}
	dep := appsv1ac.Deployment(site.GetName(), site.GetNamespace()).WithOwnerReferences(owner).
		WithSpec(appsv1ac.DeploymentSpec().WithReplicas(int32(replicas)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().
				WithContainers(corev1ac.Container().WithName("web").WithImage(agnhost).
					WithArgs("netexec", "--http-port=8080", "--udp-port=-1").
					WithPorts(corev1ac.ContainerPort().WithContainerPort(8080)).
					WithReadinessProbe(corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().
						WithPath("/hostname").WithPort(intstr.FromInt32(8080))))))))
	if err := r.c.Apply(ctx, dep, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return reconcile.Result{}, fmt.Errorf("applying the Deployment: %w", err)
	}
	svc := corev1ac.Service(site.GetName(), site.GetNamespace()).WithOwnerReferences(owner).
		WithSpec(corev1ac.ServiceSpec().WithSelector(labels).
			WithPorts(corev1ac.ServicePort().WithName("http").WithPort(80).WithTargetPort(intstr.FromInt32(8080))))
	if err := r.c.Apply(ctx, svc, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return reconcile.Result{}, fmt.Errorf("applying the Service: %w", err)
	}
	var d appsv1.Deployment
	if err := r.c.Get(ctx, req.NamespacedName, &d); err != nil {
		return reconcile.Result{}, err
	}
	status := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": websiteGVK.GroupVersion().String(), "kind": websiteGVK.Kind,
		"metadata": map[string]any{"name": site.GetName(), "namespace": site.GetNamespace()},
		"status": map[string]any{
			"readyReplicas":      int64(d.Status.ReadyReplicas),
			"url":                fmt.Sprintf("http://%s.%s.svc.cluster.local/", site.GetName(), site.GetNamespace()),
			"observedGeneration": site.GetGeneration(),
		},
	}}
	if err := r.c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(status), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return reconcile.Result{}, fmt.Errorf("applying the status: %w", err)
	}
	return reconcile.Result{}, nil
}

func TestControllerRuntimeOperator(t *testing.T) {
	l := testenv.NewLab(t, 2)
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The add-on a course installs next: the Gateway API bundle, unmodified,
	// with the kubectl apply --server-side its docs give.
	installGatewayAPI(t, l.Kubeconfig())

	ext := apiextensionsclientset.NewForConfigOrDie(cfg)
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, websiteCRD(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the Website CRD Established", func() error {
		crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "websites.demo.minikit.io", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", crd.Status.Conditions)
	})

	log.SetLogger(logr.FromSlogHandler(testutil.Logger(t).Handler()))
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	site := &unstructured.Unstructured{}
	site.SetGroupVersionKind(websiteGVK)
	err = ctrl.NewControllerManagedBy(mgr).For(site).Owns(&appsv1.Deployment{}).Complete(&reconciler{c: mgr.GetClient()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	// A user's Website, created with kubectl-style client-side create.
	c := mgr.GetClient()
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.minikit.io/v1", "kind": "Website",
		"metadata": map[string]any{"name": "blog", "namespace": "default"},
		"spec":     map[string]any{},
	}}
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}

	// The controller's status reaches 2 ready replicas (the schema's default).
	testutil.Eventually(t, 90*time.Second, "the Website's status shows 2 ready replicas", func() error {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(websiteGVK)
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "blog"}, got); err != nil {
			return err
		}
		ready, _, _ := unstructured.NestedInt64(got.Object, "status", "readyReplicas")
		if ready != 2 {
			return fmt.Errorf("status %v", got.Object["status"])
		}
		var statusEntry bool
		for _, e := range got.GetManagedFields() {
			statusEntry = statusEntry || (e.Manager == fieldOwner && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "status")
		}
		if !statusEntry {
			return fmt.Errorf("no Apply entry of %s for the status subresource: %v", fieldOwner, got.GetManagedFields())
		}
		return nil
	})

	// The Service it made answers from the lab's client host, from one of
	// the Website's pods.
	var svcIP string
	{
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "blog"}, &d); err != nil {
			t.Fatal(err)
		}
		if len(d.OwnerReferences) != 1 || d.OwnerReferences[0].Kind != "Website" {
			t.Fatalf("the Deployment's owners %v", d.OwnerReferences)
		}
		var applied bool
		for _, e := range d.ManagedFields {
			applied = applied || (e.Manager == fieldOwner && e.Operation == metav1.ManagedFieldsOperationApply)
		}
		if !applied {
			t.Fatalf("the Deployment's managedFields %v", d.ManagedFields)
		}
		cs := testenv.Client(t, l)
		svc, err := cs.CoreV1().Services("default").Get(ctx, "blog", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svcIP = svc.Spec.ClusterIP
	}
	cs := testenv.Client(t, l)
	clientPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "reader"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: agnhost, Args: []string{"pause"}}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, clientPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := testenv.WaitPodReady(t, cs, "default", "reader")
	testutil.Eventually(t, 60*time.Second, "the Website's Service answers a pod, from a blog pod that saw the pod's address", func() error {
		out, err := testenv.Exec(t, l, "reader", "curl", "-s", "--max-time", "3", "http://"+svcIP+"/hostname")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if !strings.HasPrefix(out, "blog-") {
			return fmt.Errorf("answered %q, not a blog pod", out)
		}
		seen, err := testenv.Exec(t, l, "reader", "curl", "-s", "--max-time", "3", "http://"+svcIP+"/clientip")
		if err != nil {
			return fmt.Errorf("%v: %s", err, seen)
		}
		if host, _, _ := strings.Cut(seen, ":"); host != reader.Status.PodIP {
			return fmt.Errorf("the backend saw %q, the reader is %s", seen, reader.Status.PodIP)
		}
		return nil
	})

	// A spec change: the controller applies the new replica count.
	if err := c.Patch(ctx, w, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":3}}`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 90*time.Second, "3 ready replicas with the new generation observed", func() error {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(websiteGVK)
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "blog"}, got); err != nil {
			return err
		}
		ready, _, _ := unstructured.NestedInt64(got.Object, "status", "readyReplicas")
		observed, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration")
		if ready != 3 || observed != got.GetGeneration() || got.GetGeneration() != 2 {
			return fmt.Errorf("generation %d, status %v", got.GetGeneration(), got.Object["status"])
		}
		return nil
	})

	// Deleting the Website collects its Deployment and Service.
	if err := c.Delete(ctx, w); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the Website's Deployment and Service collected", func() error {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "blog"}, &d); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Deployment: %v", err)
		}
		cs := testenv.Client(t, l)
		if _, err := cs.CoreV1().Services("default").Get(ctx, "blog", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Service: %v", err)
		}
		return nil
	})
}

// installGatewayAPI applies the Gateway API v1.6.3 experimental channel's
// CRDs from the module cache with kubectl apply --server-side over the standard ones the server installed, waits until
// kubectl sees them Established, and checks kubectl explain and the bundle's
// own CEL message on a route that breaks one of its rules.
func installGatewayAPI(t *testing.T, kubeconfig string) {
	t.Helper()
	dir := testutil.ModuleDir(t, "sigs.k8s.io/gateway-api@v1.6.3")
	kubectl := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	files, _ := filepath.Glob(filepath.Join(dir, "config", "crd", "experimental", "gateway.networking.*.yaml"))
	// The server installed the standard channel under its own field manager
	// (docs/differences.md); taking the experimental fields over is a conflict
	// that, as on any cluster with an installed bundle, needs forcing.
	args := []string{"apply", "--server-side", "--force-conflicts"}
	for _, f := range files {
		// The safe-upgrades ValidatingAdmissionPolicy is not served (docs/differences.md).
		if !strings.Contains(f, "_vap_") {
			args = append(args, "-f", f)
		}
	}
	if len(args) < 12 {
		t.Fatalf("CRD files: %v", files)
	}
	if out, err := kubectl("", args...); err != nil {
		t.Fatalf("kubectl apply --server-side of the Gateway API bundle: %v\n%s", err, out)
	}
	// kubectl wait fails at once on a CRD whose controller has not written
	// its status yet, on any cluster: ask again until it holds.
	testutil.Eventually(t, 90*time.Second, "kubectl wait --for=condition=Established crd --all", func() error {
		if out, err := kubectl("", "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"); err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
		return nil
	})
	if out, err := kubectl("", "explain", "httproute.spec.rules.matches"); err != nil || !strings.Contains(out, "headers") {
		t.Fatalf("kubectl explain httproute.spec.rules.matches: %v\n%s", err, out)
	}
	route := "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: bad\nspec:\n  rules:\n  - matches:\n" +
		"    - path:\n        type: PathPrefix\n        value: no-slash\n"
	if out, err := kubectl(route, "apply", "--server-side", "-f", "-"); err == nil || !strings.Contains(out, "value must be an absolute path and start with '/'") {
		t.Fatalf("a route breaking the bundle's rule: %v\n%s", err, out)
	}
	// The typed client controllers use (sigs.k8s.io/gateway-api's types in
	// controller-runtime's scheme) writes a route with a bare rule and reads
	// it back with the bundle's defaults: a PathPrefix "/" match, a Service
	// backend of weight 1.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := gatewayv1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	gc, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	typed := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "typed", Namespace: "default"},
		Spec: gatewayv1.HTTPRouteSpec{Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{
			BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "web", Port: ptr.To(gatewayv1.PortNumber(80))}}}}}}}}
	if err := gc.Create(ctx, typed); err != nil {
		t.Fatalf("creating an HTTPRoute with the typed client: %v", err)
	}
	var back gatewayv1.HTTPRoute
	if err := gc.Get(ctx, client.ObjectKeyFromObject(typed), &back); err != nil {
		t.Fatal(err)
	}
	r := back.Spec.Rules[0]
	if len(r.Matches) != 1 || r.Matches[0].Path == nil || *r.Matches[0].Path.Type != gatewayv1.PathMatchPathPrefix || *r.Matches[0].Path.Value != "/" ||
		r.BackendRefs[0].Kind == nil || *r.BackendRefs[0].Kind != "Service" || r.BackendRefs[0].Weight == nil || *r.BackendRefs[0].Weight != 1 {
		t.Errorf("the route as stored: %+v", r)
	}
	if err := gc.Delete(ctx, typed); err != nil {
		t.Fatal(err)
	}
}
