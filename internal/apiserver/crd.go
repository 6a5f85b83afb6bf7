package apiserver

import (
	"context"
	"fmt"
	"time"

	"github.com/minikit/minikit/internal/store"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdregistry "k8s.io/apiextensions-apiserver/pkg/registry/customresourcedefinition"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CustomResourceDefinitions are served like the built-in kinds (the generic
// REST code in rest.go, stored as v1 JSON in the same store), but written
// through apiextensions-apiserver's own registry strategy: a v1 object is
// defaulted with the v1 defaults, converted to the internal version,
// prepared and validated by upstream's strategy (structural schema checks,
// CEL rule compilation, names, versions), and converted back. So a CRD gets
// exactly kube-apiserver's 422s and messages.

// crdScheme knows the apiextensions.k8s.io types, their defaults and conversions.
var crdScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	apiextinstall.Install(s)
	return s
}()

var (
	crdStrategy       = crdregistry.NewStrategy(crdScheme)
	crdStatusStrategy = crdregistry.NewStatusStrategy(crdScheme)
)

// crdResource is apiextensions.k8s.io/v1 customresourcedefinitions. It is kept
// out of the resources table (whose entries the OpenAPI documents describe
// from k8s.io/api's generated models) and found through Server.lookup.
var crdResource = &resource{
	gv: apiextensionsv1.SchemeGroupVersion, name: "customresourcedefinitions", singular: "customresourcedefinition",
	kind: "CustomResourceDefinition", shortNames: []string{"crd", "crds"}, categories: []string{"api-extensions"},
	newObj: func() runtime.Object { return &apiextensionsv1.CustomResourceDefinition{} }, status: true,
	ext: crdWrites{},
}

// extStrategy prepares and validates the writes of a resource served with an
// upstream registry strategy, in place of package validation and the generic
// status and generation handling of rest.go.
type extStrategy interface {
	// create prepares a new object and validates it.
	create(obj runtime.Object) (runtime.Object, error)
	// update prepares obj, the new state of old, written through sub ("" or
	// "status"), and validates it.
	update(obj, old runtime.Object, sub string) (runtime.Object, error)
}

// crdWrites is extStrategy for CustomResourceDefinitions.
type crdWrites struct{}

func toInternalCRD(in *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, error) {
	crdScheme.Default(in)
	out := &apiextensions.CustomResourceDefinition{}
	if err := crdScheme.Convert(in, out, nil); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("converting CustomResourceDefinition %q: %v", in.Name, err))
	}
	return out, nil
}

func fromInternalCRD(in *apiextensions.CustomResourceDefinition) (*apiextensionsv1.CustomResourceDefinition, error) {
	out := &apiextensionsv1.CustomResourceDefinition{}
	if err := crdScheme.Convert(in, out, nil); err != nil {
		return nil, fmt.Errorf("converting CustomResourceDefinition %q to v1: %w", in.Name, err)
	}
	return out, nil
}

func invalidCRD(name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(apiextensionsv1.Kind("CustomResourceDefinition"), name, errs)
}

func (crdWrites) create(obj runtime.Object) (runtime.Object, error) {
	in, err := toInternalCRD(obj.(*apiextensionsv1.CustomResourceDefinition))
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	crdStrategy.PrepareForCreate(ctx, in)
	if errs := crdStrategy.Validate(ctx, in); len(errs) > 0 {
		return nil, invalidCRD(in.Name, errs)
	}
	return fromInternalCRD(in)
}

func (crdWrites) update(obj, old runtime.Object, sub string) (runtime.Object, error) {
	in, err := toInternalCRD(obj.(*apiextensionsv1.CustomResourceDefinition))
	if err != nil {
		return nil, err
	}
	oldIn, err := toInternalCRD(old.DeepCopyObject().(*apiextensionsv1.CustomResourceDefinition))
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	var errs field.ErrorList
	if sub == "status" {
		crdStatusStrategy.PrepareForUpdate(ctx, in, oldIn)
		errs = crdStatusStrategy.ValidateUpdate(ctx, in, oldIn)
	} else {
		crdStrategy.PrepareForUpdate(ctx, in, oldIn)
		errs = crdStrategy.ValidateUpdate(ctx, in, oldIn)
	}
	if len(errs) > 0 {
		return nil, invalidCRD(in.Name, errs)
	}
	return fromInternalCRD(in)
}

// markCRDForDeletion is the first delete of a CRD, as upstream's CRD storage
// does it: the CRD gets its deletionTimestamp, the customresourcecleanup
// finalizer and the Terminating condition; the CRD controller
// (crdcontroller.go) then deletes its custom resources and removes the
// finalizer, which deletes the CRD.
func (s *Server) markCRDForDeletion(tx store.Tx, key string, crd *apiextensionsv1.CustomResourceDefinition) error {
	if crd.DeletionTimestamp != nil {
		return nil
	}
	now := metav1.NewTime(s.now().Truncate(time.Second))
	crd.DeletionTimestamp = &now
	hasFinalizer := false
	for _, f := range crd.Finalizers {
		hasFinalizer = hasFinalizer || f == apiextensionsv1.CustomResourceCleanupFinalizer
	}
	if !hasFinalizer {
		crd.Finalizers = append(crd.Finalizers, apiextensionsv1.CustomResourceCleanupFinalizer)
	}
	setCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue,
		Reason:  "InstanceDeletionPending",
		Message: "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
	})
	return s.put(tx, crdResource, key, crd)
}

// setCRDCondition sets or replaces the condition of its type, keeping the
// transition time when the status does not change.
func setCRDCondition(crd *apiextensionsv1.CustomResourceDefinition, c apiextensionsv1.CustomResourceDefinitionCondition) {
	for i := range crd.Status.Conditions {
		old := &crd.Status.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = metav1.Now().Rfc3339Copy()
		}
		*old = c
		return
	}
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = metav1.Now().Rfc3339Copy()
	}
	crd.Status.Conditions = append(crd.Status.Conditions, c)
}

// crdCondition returns the condition of type t, or nil.
func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) *apiextensionsv1.CustomResourceDefinitionCondition {
	for i := range crd.Status.Conditions {
		if crd.Status.Conditions[i].Type == t {
			return &crd.Status.Conditions[i]
		}
	}
	return nil
}
