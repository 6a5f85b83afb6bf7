package apiserver

import (
	"fmt"
	"net/http"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// scalable is what the scale subresource reads and writes of an object.
type scalable struct {
	meta     *metav1.ObjectMeta
	replicas **int32 // spec.replicas
	status   int32   // status.replicas
	selector *metav1.LabelSelector
}

// scalableOf returns the scale fields of a kind with a scale subresource.
func scalableOf(obj runtime.Object) scalable {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return scalable{&o.ObjectMeta, &o.Spec.Replicas, o.Status.Replicas, o.Spec.Selector}
	case *appsv1.StatefulSet:
		return scalable{&o.ObjectMeta, &o.Spec.Replicas, o.Status.Replicas, o.Spec.Selector}
	}
	panic(fmt.Sprintf("%T has no scale subresource", obj))
}

func scaleOf(obj runtime.Object) *autoscalingv1.Scale {
	d := scalableOf(obj)
	replicas := int32(1)
	if *d.replicas != nil {
		replicas = **d.replicas
	}
	sel := ""
	if d.selector != nil {
		if s, err := metav1.LabelSelectorAsSelector(d.selector); err == nil {
			sel = s.String()
		}
	}
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{Kind: scaleGVK.Kind, APIVersion: scaleGVK.GroupVersion().String()},
		ObjectMeta: metav1.ObjectMeta{
			Name: d.meta.Name, Namespace: d.meta.Namespace, UID: d.meta.UID,
			ResourceVersion: d.meta.ResourceVersion, CreationTimestamp: d.meta.CreationTimestamp,
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: replicas},
		Status: autoscalingv1.ScaleStatus{Replicas: d.status, Selector: sel},
	}
}

// serveScale implements the autoscaling/v1 scale subresource of Deployments and
// StatefulSets, which `kubectl scale` uses.
func (s *Server) serveScale(w http.ResponseWriter, r *http.Request, rq request) error {
	var body []byte
	var err error
	if r.Method == http.MethodPut || r.Method == http.MethodPatch {
		if body, err = readBody(r); err != nil {
			return err
		}
	}
	var updated runtime.Object
	switch r.Method {
	case http.MethodGet:
		updated, err = s.get(rq.res, rq.namespace, rq.name)
	case http.MethodPut, http.MethodPatch:
		updated, err = s.Update(rq.res, rq.namespace, rq.name, "", func(cur runtime.Object) (runtime.Object, error) {
			d := scalableOf(cur)
			sc := scaleOf(cur)
			if r.Method == http.MethodPut {
				sc = &autoscalingv1.Scale{}
				if _, err := decodeInto(body, sc, scaleGVK, "Ignore"); err != nil {
					return nil, err
				}
			} else {
				cj, err := encodeObject(sc, scaleGVK)
				if err != nil {
					return nil, err
				}
				pt := types.PatchType(strings.TrimSpace(strings.Split(r.Header.Get("Content-Type"), ";")[0]))
				pj, err := applyPatch(pt, cj, body, &autoscalingv1.Scale{})
				if err != nil {
					return nil, err
				}
				sc = &autoscalingv1.Scale{}
				if _, err := decodeInto(pj, sc, scaleGVK, "Ignore"); err != nil {
					return nil, err
				}
			}
			if sc.ResourceVersion != "" && sc.ResourceVersion != d.meta.ResourceVersion {
				return nil, apierrors.NewConflict(rq.res.gr(), rq.name, errConflict)
			}
			replicas := sc.Spec.Replicas
			*d.replicas = &replicas
			d.meta.ResourceVersion = ""
			return cur, nil
		})
	default:
		return apierrors.NewMethodNotSupported(rq.res.gr(), strings.ToLower(r.Method))
	}
	if err != nil {
		return err
	}
	writeValue(w, r, http.StatusOK, scaleOf(updated))
	return nil
}
