package apiserver

import (
	"net/http"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func scaleOf(d *appsv1.Deployment) *autoscalingv1.Scale {
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	sel := ""
	if d.Spec.Selector != nil {
		if s, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
			sel = s.String()
		}
	}
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{Kind: scaleGVK.Kind, APIVersion: scaleGVK.GroupVersion().String()},
		ObjectMeta: metav1.ObjectMeta{
			Name: d.Name, Namespace: d.Namespace, UID: d.UID,
			ResourceVersion: d.ResourceVersion, CreationTimestamp: d.CreationTimestamp,
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: replicas},
		Status: autoscalingv1.ScaleStatus{Replicas: d.Status.Replicas, Selector: sel},
	}
}

// serveScale implements the autoscaling/v1 scale subresource of Deployments, which
// `kubectl scale` uses.
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
			d := cur.(*appsv1.Deployment)
			sc := scaleOf(d)
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
			if sc.ResourceVersion != "" && sc.ResourceVersion != d.ResourceVersion {
				return nil, apierrors.NewConflict(rq.res.gr(), rq.name, errConflict)
			}
			replicas := sc.Spec.Replicas
			d.Spec.Replicas = &replicas
			d.ResourceVersion = ""
			return d, nil
		})
	default:
		return apierrors.NewMethodNotSupported(rq.res.gr(), strings.ToLower(r.Method))
	}
	if err != nil {
		return err
	}
	writeValue(w, r, http.StatusOK, scaleOf(updated.(*appsv1.Deployment)))
	return nil
}
