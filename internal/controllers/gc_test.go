package controllers

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// The custom resources of these tests: namespaced Apps and cluster-scoped
// Tenants in gc.example.com, with a schema that keeps anything.
var (
	appsGVR    = schema.GroupVersionResource{Group: "gc.example.com", Version: "v1", Resource: "apps"}
	tenantsGVR = schema.GroupVersionResource{Group: "gc.example.com", Version: "v1", Resource: "tenants"}
	crdGVR     = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

func (tc *testCluster) dynamic() dynamic.Interface {
	tc.t.Helper()
	d, err := dynamic.NewForConfig(tc.cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	return d
}

// establishCRD creates the CRD of gvr (kind, cluster-scoped or not) and
// waits until its resource is served.
func (tc *testCluster) establishCRD(gvr schema.GroupVersionResource, kind string, namespaced bool) {
	tc.t.Helper()
	scope := apiextensionsv1.ClusterScoped
	if namespaced {
		scope = apiextensionsv1.NamespaceScoped
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: gvr.Resource + "." + gvr.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvr.Group, Scope: scope,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: gvr.Resource, Kind: kind},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: gvr.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTo(true)}},
			}},
		},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		tc.t.Fatal(err)
	}
	d := tc.dynamic()
	if _, err := d.Resource(crdGVR).Create(tc.ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
		tc.t.Fatalf("creating CRD %s: %v", crd.Name, err)
	}
	testutil.Eventually(tc.t, waitTimeout, "CRD "+crd.Name+" served", func() error {
		_, err := d.Resource(gvr).List(tc.ctx, metav1.ListOptions{})
		return err
	})
}

// ownerRef is a reference to obj of kind in apiVersion.
func ownerRef(apiVersion, kind string, obj metav1.Object, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: obj.GetName(), UID: obj.GetUID(), BlockOwnerDeletion: ptrTo(block)}
}

// createCR creates a custom resource of gvr (ns "" for a Tenant) with
// owners and finalizers.
func (tc *testCluster) createCR(gvr schema.GroupVersionResource, kind, ns, name string, owners []metav1.OwnerReference, finalizers ...string) *unstructured.Unstructured {
	tc.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind, "spec": map[string]any{}}}
	u.SetName(name)
	u.SetNamespace(ns)
	u.SetOwnerReferences(owners)
	u.SetFinalizers(finalizers)
	got, err := tc.dynamic().Resource(gvr).Namespace(ns).Create(tc.ctx, u, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("creating %s %q: %v", kind, name, err)
	}
	return got
}

func (tc *testCluster) getCR(gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	return tc.dynamic().Resource(gvr).Namespace(ns).Get(tc.ctx, name, metav1.GetOptions{})
}

func (tc *testCluster) deleteCR(gvr schema.GroupVersionResource, ns, name string, policy metav1.DeletionPropagation) {
	tc.t.Helper()
	if err := tc.dynamic().Resource(gvr).Namespace(ns).Delete(tc.ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		tc.t.Fatalf("deleting %s %q: %v", gvr.Resource, name, err)
	}
}

// removeFinalizers empties a custom resource's finalizers.
func (tc *testCluster) removeFinalizers(gvr schema.GroupVersionResource, ns, name string) {
	tc.t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := tc.dynamic().Resource(gvr).Namespace(ns).Patch(tc.ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		tc.t.Fatalf("removing finalizers of %s %q: %v", gvr.Resource, name, err)
	}
}

// waitGone waits until get reports the object not found.
func (tc *testCluster) waitGone(what string, get func() error) {
	tc.t.Helper()
	testutil.Eventually(tc.t, waitTimeout, what+" deleted", func() error {
		switch err := get(); {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return errors.New("still there")
	})
}

func (tc *testCluster) crGone(gvr schema.GroupVersionResource, ns, name string) {
	tc.t.Helper()
	tc.waitGone(gvr.Resource+" "+name, func() error { _, err := tc.getCR(gvr, ns, name); return err })
}

func (tc *testCluster) createConfigMap(name string, owners ...metav1.OwnerReference) *corev1.ConfigMap {
	tc.t.Helper()
	cm, err := tc.client.CoreV1().ConfigMaps("default").Create(tc.ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", OwnerReferences: owners}}, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("creating configmap %q: %v", name, err)
	}
	return cm
}

func (tc *testCluster) configMapGone(name string) {
	tc.t.Helper()
	tc.waitGone("configmap "+name, func() error {
		_, err := tc.client.CoreV1().ConfigMaps("default").Get(tc.ctx, name, metav1.GetOptions{})
		return err
	})
}

// TestGCDeploymentOwnedByCustomResource: a Deployment owned by a custom
// resource goes with it, and its ReplicaSets and Pods with the Deployment.
func TestGCDeploymentOwnedByCustomResource(t *testing.T) {
	tc := newTestCluster(t)
	tc.establishCRD(appsGVR, "App", true)
	tc.startControllers(Config{})
	app := tc.createCR(appsGVR, "App", "default", "shop", nil)
	d := testDeployment("web", 2, "v1")
	d.OwnerReferences = []metav1.OwnerReference{ownerRef("gc.example.com/v1", "App", app, true)}
	tc.createDeployment(d)
	tc.waitActive("web", 2)

	tc.deleteCR(appsGVR, "default", "shop", metav1.DeletePropagationBackground)
	tc.waitGone("deployment web", func() error {
		_, err := tc.client.AppsV1().Deployments("default").Get(tc.ctx, "web", metav1.GetOptions{})
		return err
	})
	testutil.Eventually(t, waitTimeout, "replicasets and pods of web deleted", func() error {
		rss, err := tc.client.AppsV1().ReplicaSets("default").List(tc.ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(rss.Items) > 0 {
			return fmt.Errorf("%d replicasets left", len(rss.Items))
		}
		if all := tc.pods("default", "app=web"); len(all) > 0 {
			return errors.New(podNames(all))
		}
		return nil
	})
}

// TestGCCustomResourceOwners: custom resources owned by a ConfigMap, by a
// namespaced custom resource and by a cluster-scoped one go with their
// owners, a chain of them link by link.
func TestGCCustomResourceOwners(t *testing.T) {
	tc := newTestCluster(t)
	tc.establishCRD(appsGVR, "App", true)
	tc.establishCRD(tenantsGVR, "Tenant", false)
	tc.startControllers(Config{})

	cm := tc.createConfigMap("settings")
	tc.createCR(appsGVR, "App", "default", "of-configmap", []metav1.OwnerReference{ownerRef("v1", "ConfigMap", cm, false)})
	parent := tc.createCR(appsGVR, "App", "default", "parent", nil)
	child := tc.createCR(appsGVR, "App", "default", "child", []metav1.OwnerReference{ownerRef("gc.example.com/v1", "App", parent, false)})
	tc.createConfigMap("grandchild", ownerRef("gc.example.com/v1", "App", child, false))
	tenant := tc.createCR(tenantsGVR, "Tenant", "", "acme", nil)
	tc.createCR(appsGVR, "App", "default", "of-tenant", []metav1.OwnerReference{ownerRef("gc.example.com/v1", "Tenant", tenant, false)})

	if err := tc.client.CoreV1().ConfigMaps("default").Delete(tc.ctx, "settings", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.crGone(appsGVR, "default", "of-configmap")

	tc.deleteCR(appsGVR, "default", "parent", metav1.DeletePropagationBackground)
	tc.crGone(appsGVR, "default", "child")
	tc.configMapGone("grandchild")

	tc.deleteCR(tenantsGVR, "", "acme", metav1.DeletePropagationBackground)
	tc.crGone(appsGVR, "default", "of-tenant")
}

// TestGCForegroundDeletionOfCustomResource: a custom resource deleted in
// the foreground stays, marked, until its blocking dependent is gone; the
// dependent (held by a finalizer of its own) is deleted meanwhile.
func TestGCForegroundDeletionOfCustomResource(t *testing.T) {
	tc := newTestCluster(t)
	tc.establishCRD(appsGVR, "App", true)
	tc.startControllers(Config{})
	parent := tc.createCR(appsGVR, "App", "default", "parent", nil)
	tc.createCR(appsGVR, "App", "default", "blocker", []metav1.OwnerReference{ownerRef("gc.example.com/v1", "App", parent, true)}, "example.com/hold")
	t.Cleanup(func() { tc.removeFinalizers(appsGVR, "default", "blocker") })
	cm := tc.createConfigMap("nonblocking", ownerRef("gc.example.com/v1", "App", parent, false))

	tc.deleteCR(appsGVR, "default", "parent", metav1.DeletePropagationForeground)
	testutil.Eventually(t, waitTimeout, "blocking dependent being deleted", func() error {
		b, err := tc.getCR(appsGVR, "default", "blocker")
		if err != nil {
			return err
		}
		if b.GetDeletionTimestamp() == nil {
			return errors.New("no deletionTimestamp yet")
		}
		return nil
	})
	tc.configMapGone(cm.Name)
	// The dependent is held by its finalizer: so is its owner.
	p, err := tc.getCR(appsGVR, "default", "parent")
	if err != nil {
		t.Fatalf("owner deleted before its blocking dependent: %v", err)
	}
	if p.GetDeletionTimestamp() == nil || !slices.Contains(p.GetFinalizers(), metav1.FinalizerDeleteDependents) {
		t.Fatalf("owner not marked for foreground deletion: deletionTimestamp %v, finalizers %v", p.GetDeletionTimestamp(), p.GetFinalizers())
	}

	tc.removeFinalizers(appsGVR, "default", "blocker")
	tc.crGone(appsGVR, "default", "blocker")
	tc.crGone(appsGVR, "default", "parent")
}

// TestGCOrphanDeletionOfCustomResource: orphaning, by propagationPolicy
// (which the API server carries out) and by the orphan finalizer (which the
// collector does), leaves the dependents without the reference.
func TestGCOrphanDeletionOfCustomResource(t *testing.T) {
	tc := newTestCluster(t)
	tc.establishCRD(appsGVR, "App", true)
	tc.startControllers(Config{})

	byPolicy := tc.createCR(appsGVR, "App", "default", "by-policy", nil)
	tc.createConfigMap("orphan-1", ownerRef("gc.example.com/v1", "App", byPolicy, true))
	byFinalizer := tc.createCR(appsGVR, "App", "default", "by-finalizer", nil, metav1.FinalizerOrphanDependents)
	t.Cleanup(func() { tc.removeFinalizers(appsGVR, "default", "by-finalizer") })
	tc.createConfigMap("orphan-2", ownerRef("gc.example.com/v1", "App", byFinalizer, true))
	sentinel := tc.createCR(appsGVR, "App", "default", "sentinel", nil)
	tc.createConfigMap("collected", ownerRef("gc.example.com/v1", "App", sentinel, false))

	tc.deleteCR(appsGVR, "default", "by-policy", metav1.DeletePropagationOrphan)
	tc.deleteCR(appsGVR, "default", "by-finalizer", metav1.DeletePropagationBackground)
	tc.crGone(appsGVR, "default", "by-policy")
	tc.crGone(appsGVR, "default", "by-finalizer")
	// The collector has been at work since: a background deletion after
	// the orphaning ones has been carried out.
	tc.deleteCR(appsGVR, "default", "sentinel", metav1.DeletePropagationBackground)
	tc.configMapGone("collected")
	for _, name := range []string{"orphan-1", "orphan-2"} {
		cm, err := tc.client.CoreV1().ConfigMaps("default").Get(tc.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("orphaned dependent: %v", err)
		}
		if len(cm.OwnerReferences) != 0 {
			t.Errorf("configmap %s still references %+v", name, cm.OwnerReferences)
		}
	}
}

// TestGCCustomResourceDefinedAfterStart: the collector watches a CRD
// established after it started, and stops watching it once it is deleted.
func TestGCCustomResourceDefinedAfterStart(t *testing.T) {
	tc := newTestCluster(t)
	var ctrl *Controllers
	tc.startControllersWith(Config{}, func(c *Controllers) { ctrl = c })
	tc.establishCRD(appsGVR, "App", true)

	app := tc.createCR(appsGVR, "App", "default", "late", nil)
	tc.createConfigMap("of-late", ownerRef("gc.example.com/v1", "App", app, true))
	cm := tc.createConfigMap("owner")
	tc.createCR(appsGVR, "App", "default", "of-configmap", []metav1.OwnerReference{ownerRef("v1", "ConfigMap", cm, true)})

	tc.deleteCR(appsGVR, "default", "late", metav1.DeletePropagationBackground)
	tc.configMapGone("of-late")
	if err := tc.client.CoreV1().ConfigMaps("default").Delete(tc.ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.crGone(appsGVR, "default", "of-configmap")

	if err := tc.dynamic().Resource(crdGVR).Delete(tc.ctx, "apps.gc.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "informer of apps.gc.example.com stopped", func() error {
		if ctrl.gc.monitorFor(appsGVR.GroupResource()) != nil {
			return errors.New("still watched")
		}
		return nil
	})
	// A reference to a kind that went away names an owner that is gone; one
	// to a kind never served cannot be resolved.
	cms := ctrl.gc.monitorFor(schema.GroupResource{Resource: "configmaps"})
	dep := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default", UID: "d"}}
	for _, c := range []struct {
		ref  metav1.OwnerReference
		want ownerState
	}{
		{metav1.OwnerReference{APIVersion: "gc.example.com/v1", Kind: "App", Name: "late", UID: app.GetUID()}, ownerDangling},
		{metav1.OwnerReference{APIVersion: "never.example.com/v1", Kind: "Thing", Name: "x", UID: "x"}, ownerUnresolvable},
	} {
		if got, err := ctrl.gc.ownerState(tc.ctx, cms, dep, c.ref, false); err != nil || got != c.want {
			t.Errorf("owner %s %s: state %d, %v; want %d", c.ref.APIVersion, c.ref.Kind, got, err, c.want)
		}
	}
}

// TestGCOwnerUIDMismatch: a reference whose UID is not that of the object
// under its name counts as a missing owner: an object with no other owner
// is collected, one with another owner loses the reference.
func TestGCOwnerUIDMismatch(t *testing.T) {
	tc := newTestCluster(t)
	tc.establishCRD(appsGVR, "App", true)
	tc.startControllers(Config{})
	app := tc.createCR(appsGVR, "App", "default", "owner", nil)
	cm := tc.createConfigMap("other-owner")
	wrong := metav1.OwnerReference{APIVersion: "gc.example.com/v1", Kind: "App", Name: "owner", UID: "00000000-0000-0000-0000-000000000001"}
	tc.createConfigMap("wrong-uid", wrong)
	tc.createCR(appsGVR, "App", "default", "two-owners", []metav1.OwnerReference{wrong, ownerRef("v1", "ConfigMap", cm, false)})

	tc.configMapGone("wrong-uid")
	testutil.Eventually(t, waitTimeout, "reference with the wrong UID removed", func() error {
		u, err := tc.getCR(appsGVR, "default", "two-owners")
		if err != nil {
			return err
		}
		if refs := u.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != cm.UID {
			return fmt.Errorf("references %+v", refs)
		}
		return nil
	})
	if _, err := tc.getCR(appsGVR, "default", app.GetName()); err != nil {
		t.Errorf("the owner itself: %v", err)
	}
}

// TestGCClusterScopedDependentOfNamespacedOwner: a cluster-scoped object
// cannot be owned by a namespaced one; the collector leaves it alone and
// says so with an OwnerRefInvalidNamespace event.
func TestGCClusterScopedDependentOfNamespacedOwner(t *testing.T) {
	tc := newTestCluster(t)
	tc.establishCRD(tenantsGVR, "Tenant", false)
	tc.startControllers(Config{})
	cm := tc.createConfigMap("namespaced-owner")
	tenant := tc.createCR(tenantsGVR, "Tenant", "", "misowned", []metav1.OwnerReference{ownerRef("v1", "ConfigMap", cm, false)})

	testutil.Eventually(t, waitTimeout, "OwnerRefInvalidNamespace event", func() error {
		evs, err := tc.client.CoreV1().Events("default").List(tc.ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "OwnerRefInvalidNamespace" && ev.InvolvedObject.UID == tenant.GetUID() {
				return nil
			}
		}
		return fmt.Errorf("%d events, none for the tenant", len(evs.Items))
	})
	if _, err := tc.getCR(tenantsGVR, "", "misowned"); err != nil {
		t.Fatalf("cluster-scoped dependent of a namespaced owner: %v", err)
	}
}

// TestGCOrphanOfBuiltinOwnerByFinalizer: the orphan finalizer works for a
// built-in owner too.
func TestGCOrphanOfBuiltinOwnerByFinalizer(t *testing.T) {
	tc := newTestCluster(t)
	tc.startControllers(Config{})
	d := testDeployment("kept", 1, "v1")
	d.Finalizers = []string{metav1.FinalizerOrphanDependents}
	dep := tc.createDeployment(d)
	tc.waitActive("kept", 1)
	if err := tc.client.AppsV1().Deployments("default").Delete(tc.ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitGone("deployment kept", func() error {
		_, err := tc.client.AppsV1().Deployments("default").Get(tc.ctx, "kept", metav1.GetOptions{})
		return err
	})
	rss, err := tc.client.AppsV1().ReplicaSets("default").List(tc.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rss.Items) != 1 || ownedBy(&rss.Items[0], dep.UID) {
		t.Fatalf("replicasets after orphaning: %+v", rsRefs(rss.Items))
	}
}

func rsRefs(rss []appsv1.ReplicaSet) []string {
	var out []string
	for _, rs := range rss {
		out = append(out, fmt.Sprintf("%s %v", rs.Name, rs.OwnerReferences))
	}
	return out
}

// TestGCClusterScopedOwnerOfClusterScoped: a cluster-scoped custom resource
// owning another is collected, orphaned and deleted in the foreground as a
// namespaced one is.
func TestGCClusterScopedOwnerOfClusterScoped(t *testing.T) {
	tc := newTestCluster(t)
	tc.establishCRD(tenantsGVR, "Tenant", false)
	tc.startControllers(Config{})
	ref := func(o metav1.Object, block bool) []metav1.OwnerReference {
		return []metav1.OwnerReference{ownerRef("gc.example.com/v1", "Tenant", o, block)}
	}
	bg := tc.createCR(tenantsGVR, "Tenant", "", "bg", nil)
	tc.createCR(tenantsGVR, "Tenant", "", "bg-child", ref(bg, false))
	orphan := tc.createCR(tenantsGVR, "Tenant", "", "orphan", nil)
	tc.createCR(tenantsGVR, "Tenant", "", "orphan-child", ref(orphan, true))
	fg := tc.createCR(tenantsGVR, "Tenant", "", "fg", nil)
	tc.createCR(tenantsGVR, "Tenant", "", "fg-child", ref(fg, true), "example.com/hold")
	t.Cleanup(func() { tc.removeFinalizers(tenantsGVR, "", "fg-child") })

	tc.deleteCR(tenantsGVR, "", "orphan", metav1.DeletePropagationOrphan)
	tc.deleteCR(tenantsGVR, "", "fg", metav1.DeletePropagationForeground)
	tc.deleteCR(tenantsGVR, "", "bg", metav1.DeletePropagationBackground)
	tc.crGone(tenantsGVR, "", "bg-child")
	testutil.Eventually(t, waitTimeout, "foreground dependent being deleted", func() error {
		c, err := tc.getCR(tenantsGVR, "", "fg-child")
		if err != nil {
			return err
		}
		if c.GetDeletionTimestamp() == nil {
			return errors.New("no deletionTimestamp yet")
		}
		return nil
	})
	if p, err := tc.getCR(tenantsGVR, "", "fg"); err != nil || !slices.Contains(p.GetFinalizers(), metav1.FinalizerDeleteDependents) {
		t.Fatalf("owner deleted in the foreground before its dependent: %v", err)
	}
	c, err := tc.getCR(tenantsGVR, "", "orphan-child")
	if err != nil {
		t.Fatalf("orphaned dependent: %v", err)
	}
	if refs := c.GetOwnerReferences(); len(refs) != 0 {
		t.Errorf("orphaned dependent still references %+v", refs)
	}
	tc.removeFinalizers(tenantsGVR, "", "fg-child")
	tc.crGone(tenantsGVR, "", "fg")
}

// TestGCDependentsOfCustomResourcesOfDeletedCRD: deleting a CRD deletes its
// custom resources, and the collector their dependents.
func TestGCDependentsOfCustomResourcesOfDeletedCRD(t *testing.T) {
	tc := newTestCluster(t)
	tc.establishCRD(appsGVR, "App", true)
	tc.startControllers(Config{})
	for i := range 5 {
		app := tc.createCR(appsGVR, "App", "default", fmt.Sprintf("app-%d", i), nil)
		tc.createConfigMap(fmt.Sprintf("of-app-%d", i), ownerRef("gc.example.com/v1", "App", app, true))
	}
	if err := tc.dynamic().Resource(crdGVR).Delete(tc.ctx, "apps.gc.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		tc.configMapGone(fmt.Sprintf("of-app-%d", i))
	}
}
