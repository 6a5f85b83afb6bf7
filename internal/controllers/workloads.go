package controllers

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Helpers shared by the StatefulSet, DaemonSet and Job controllers: each owns
// its pods directly through a controller ownerReference, finds them through
// the pod index by controller UID, and waits for the pods it has just created
// or deleted to show in the cache before acting again.

// ownedPods returns the pods controlled by owner (by UID) that match sel, in
// owner's namespace.
func (c *Controllers) ownedPods(owner metav1.Object, sel labels.Selector) ([]*corev1.Pod, error) {
	objs, err := c.podInf.GetIndexer().ByIndex(byControllerUID, string(owner.GetUID()))
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if p.Namespace == owner.GetNamespace() && sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out, nil
}

// controllerKey is "namespace/name" of the controller of obj when it is of
// kind gvk, or "".
func controllerKey(obj metav1.Object, gvk schema.GroupVersionKind) string {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != gvk.Kind {
		return ""
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != gvk.Group {
		return ""
	}
	return obj.GetNamespace() + "/" + ref.Name
}

// podsOf registers pod handlers that wake the controller of kind gvk and
// record what its expectations wait for.
func (c *Controllers) podsOf(gvk schema.GroupVersionKind, l *loop, exp *expectations) {
	c.podInf.AddEventHandler(handlers(
		func(obj any) {
			p := obj.(*corev1.Pod)
			if key := controllerKey(p, gvk); key != "" {
				exp.creationObserved(key)
				l.add(key)
			}
		},
		func(old, cur any) {
			o, p := old.(*corev1.Pod), cur.(*corev1.Pod)
			if o.ResourceVersion == p.ResourceVersion {
				return
			}
			if key := controllerKey(p, gvk); key != "" {
				if p.DeletionTimestamp != nil {
					exp.deletionObserved(key, keyOf(p))
				}
				l.add(key)
			}
			if key := controllerKey(o, gvk); key != "" && key != controllerKey(p, gvk) {
				l.add(key)
			}
		},
		func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				if key := controllerKey(p, gvk); key != "" {
					exp.deletionObserved(key, keyOf(p))
					l.add(key)
				}
			}
		},
	))
}

// podFromTemplate is a pod of template owned by owner, with extra labels.
func podFromTemplate(t *corev1.PodTemplateSpec, owner metav1.Object, gvk schema.GroupVersionKind, extra map[string]string) *corev1.Pod {
	t = t.DeepCopy()
	lbls := map[string]string{}
	for k, v := range t.Labels {
		lbls[k] = v
	}
	for k, v := range extra {
		lbls[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       owner.GetNamespace(),
			Labels:          lbls,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, gvk)},
		},
		Spec: t.Spec,
	}
}

// podNamePrefix is name + "-", cut to what the API server keeps before
// its five random characters.
func podNamePrefix(name string) string {
	p := name + "-"
	if len(p) > 58 {
		p = p[:58]
	}
	return p
}

// templateHash is a short stable hash of a pod template, in the alphabet
// Kubernetes uses for controller-revision-hash values.
func templateHash(t *corev1.PodTemplateSpec) string {
	b, _ := json.Marshal(t)
	h := fnv.New32a()
	h.Write(b)
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

func podFinishedPhase(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// podActive is a pod that is neither being deleted nor finished.
func podActive(p *corev1.Pod) bool { return p.DeletionTimestamp == nil && !podFinishedPhase(p) }

func podRunningAndReady(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && isPodReady(p)
}

// podAvailableSince reports whether p has been ready for minReadySeconds, and
// if it is ready but not yet available, how long until it is.
func podAvailableSince(p *corev1.Pod, minReadySeconds int32, now time.Time) (bool, time.Duration) {
	if !isPodReady(p) {
		return false, 0
	}
	if left := availableIn(p, minReadySeconds, now); left > 0 {
		return false, left
	}
	return true, 0
}

// ordinalOf parses the ordinal of a StatefulSet pod NAME-N, or -1.
func ordinalOf(setName, podName string) int {
	rest, ok := strings.CutPrefix(podName, setName+"-")
	if !ok || rest == "" || len(rest) > 9 {
		return -1
	}
	n := 0
	for _, r := range rest {
		if r < '0' || r > '9' {
			return -1
		}
		n = n*10 + int(r-'0')
	}
	if len(rest) > 1 && rest[0] == '0' {
		return -1
	}
	return n
}
