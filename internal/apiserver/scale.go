package apiserver

import (
	"net/http"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// scaleParts reads what the scale subresource shows of obj: the spec's
// replicas (nil when unset), the status replicas and the selector.
func scaleParts(obj runtime.Object) (replicas **int32, status int32, sel string) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Replicas, o.Status.Replicas, selectorString(o.Spec.Selector)
	case *appsv1.ReplicaSet:
		return &o.Spec.Replicas, o.Status.Replicas, selectorString(o.Spec.Selector)
	case *appsv1.StatefulSet:
		return &o.Spec.Replicas, o.Status.Replicas, selectorString(o.Spec.Selector)
	case *corev1.ReplicationController:
		// An RC's selector is a plain map (Kubernetes shows it as a.b=c,...).
		return &o.Spec.Replicas, o.Status.Replicas, labels.SelectorFromSet(o.Spec.Selector).String()
	}
	return nil, 0, ""
}

func selectorString(ls *metav1.LabelSelector) string {
	if ls == nil {
		return ""
	}
	if s, err := metav1.LabelSelectorAsSelector(ls); err == nil {
		return s.String()
	}
	return ""
}

func scaleOf(obj runtime.Object) *autoscalingv1.Scale {
	spec, status, sel := scaleParts(obj)
	replicas := int32(1)
	if spec != nil && *spec != nil {
		replicas = **spec
	}
	m := metaOf(obj)
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{Kind: scaleGVK.Kind, APIVersion: scaleGVK.GroupVersion().String()},
		ObjectMeta: metav1.ObjectMeta{
			Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
			ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp(),
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: replicas},
		Status: autoscalingv1.ScaleStatus{Replicas: status, Selector: sel},
	}
}

// serveScale implements the autoscaling/v1 scale subresource of Deployments,
// ReplicaSets, ReplicationControllers and StatefulSets, which
// `kubectl scale` uses.
func (s *Server) serveScale(w http.ResponseWriter, r *http.Request, rq request) error {
	body, err := readScaleBody(r)
	if err != nil {
		return err
	}
	var updated runtime.Object
	switch r.Method {
	case http.MethodGet:
		updated, err = s.get(rq.res, rq.namespace, rq.name)
	case http.MethodPut, http.MethodPatch:
		updated, err = s.update(rq.res, rq.namespace, rq.name, "", writeOpts{applied: true, dryRun: isDryRun(r)}, func(cur runtime.Object) (runtime.Object, error) {
			d := metaOf(cur)
			sc, mf, err := scaleWrite(r, rq.res, body, cur, scaleOf(cur))
			if err != nil {
				return nil, err
			}
			if sc.ResourceVersion != "" && sc.ResourceVersion != d.GetResourceVersion() {
				return nil, apierrors.NewConflict(rq.res.gr(), rq.name, errConflict)
			}
			replicas := sc.Spec.Replicas
			spec, _, _ := scaleParts(cur)
			if spec == nil {
				return nil, apierrors.NewMethodNotSupported(rq.res.gr(), "scale")
			}
			*spec = &replicas
			d.SetManagedFields(mf)
			d.SetResourceVersion("")
			return cur, nil
		})
	default:
		return apierrors.NewMethodNotSupported(rq.res.gr(), strings.ToLower(r.Method))
	}
	if err != nil {
		return err
	}
	sc, err := scaleView(rq.res, updated, scaleOf(updated))
	if err != nil {
		return err
	}
	writeValue(w, r, http.StatusOK, sc)
	return nil
}

// readScaleBody reads a scale write's body: an apply as sent (YAML or
// JSON), anything else as readBody gives it; GET has none.
func readScaleBody(r *http.Request) ([]byte, error) {
	switch {
	case r.Method != http.MethodPut && r.Method != http.MethodPatch:
		return nil, nil
	case isApply(r):
		if err := checkWriteOptions(r, "PatchOptions", true); err != nil {
			return nil, err
		}
		return readRawBody(r)
	default:
		kind := "UpdateOptions"
		if r.Method == http.MethodPatch {
			kind = "PatchOptions"
		}
		if err := checkWriteOptions(r, kind, false); err != nil {
			return nil, err
		}
		return readBody(r)
	}
}

// requestedScale is the Scale a PUT or PATCH of a scale subresource asks
// for: the PUT's body, or the patch applied to cur, the Scale as it is now.
func requestedScale(r *http.Request, body []byte, cur *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	if r.Method == http.MethodPatch {
		cj, err := encodeObject(cur, scaleGVK)
		if err != nil {
			return nil, err
		}
		pt := patchTypeOf(r)
		if body, err = applyPatch(pt, cj, body, &autoscalingv1.Scale{}); err != nil {
			return nil, err
		}
	}
	sc := &autoscalingv1.Scale{}
	if _, err := decodeInto(body, sc, scaleGVK, "Ignore"); err != nil {
		return nil, err
	}
	return sc, nil
}
