// Package v1 is the Website API: a web site of N replicas of an image behind
// a Service, which the website controller makes.
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the Website API's group and version.
var GroupVersion = schema.GroupVersion{Group: "example.minikit.dev", Version: "v1"}

// AddToScheme registers Website and WebsiteList.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Website{}, &WebsiteList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Website asks for a Deployment of Spec.Image and a Service in front of it.
type Website struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WebsiteSpec   `json:"spec"`
	Status            WebsiteStatus `json:"status,omitempty"`
}

// WebsiteSpec is what the user wants.
type WebsiteSpec struct {
	Replicas *int32   `json:"replicas,omitempty"`
	Image    string   `json:"image"`
	Args     []string `json:"args,omitempty"`
	// Port is the container's HTTP port; the Service serves it on port 80.
	Port int32 `json:"port,omitempty"`
}

// WebsiteStatus is what the controller observed.
type WebsiteStatus struct {
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	ReadyReplicas      int32  `json:"readyReplicas,omitempty"`
	URL                string `json:"url,omitempty"`
}

// WebsiteList is a list of Websites.
type WebsiteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Website `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (w *Website) DeepCopyObject() runtime.Object { return w.DeepCopy() }

// DeepCopy copies w.
func (w *Website) DeepCopy() *Website {
	if w == nil {
		return nil
	}
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if w.Spec.Replicas != nil {
		r := *w.Spec.Replicas
		out.Spec.Replicas = &r
	}
	out.Spec.Args = append([]string(nil), w.Spec.Args...)
	return &out
}

// DeepCopyObject implements runtime.Object.
func (l *WebsiteList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Website, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopy()
	}
	return &out
}
