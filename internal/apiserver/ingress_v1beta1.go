package apiserver

// extensions/v1beta1 Ingress, served by conversion.
//
// Kubernetes stopped serving extensions/v1beta1 Ingress in v1.22, but the chapter's
// manifests (and many tutorials) still use it. minikit accepts it as written:
// every request to /apis/extensions/v1beta1/.../ingresses is served by the
// networking.k8s.io/v1 resource — the only stored form — with bodies converted on
// the way in and out (the deprecation guide's field mapping), and the Warning
// header Kubernetes sent for the deprecated version. Nothing is stored twice, so
// an Ingress created as v1beta1 is read, watched and routed as v1.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	extv1beta1 "k8s.io/api/extensions/v1beta1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ingressV1beta1Warning is what kube-apiserver 1.14-1.21 sent for this version.
const ingressV1beta1Warning = `299 - "extensions/v1beta1 Ingress is deprecated in v1.14+, unavailable in v1.22+; use networking.k8s.io/v1 Ingress"`

var (
	ingressV1beta1GV  = schema.GroupVersion{Group: "extensions", Version: "v1beta1"}
	ingressV1beta1GVK = ingressV1beta1GV.WithKind("Ingress")
	ingressV1Resource = lookup("networking.k8s.io", "v1", "ingresses")
)

// isIngressV1beta1 reports whether a resource path (after /apis/GROUP/VERSION/)
// names extensions/v1beta1 ingresses.
func isIngressV1beta1(gv schema.GroupVersion, rest []string) bool {
	if gv != ingressV1beta1GV {
		return false
	}
	switch {
	case len(rest) >= 1 && rest[0] == "ingresses":
		return true
	case len(rest) >= 3 && rest[0] == "namespaces" && rest[2] == "ingresses":
		return true
	}
	return false
}

// serveIngressV1beta1 serves an extensions/v1beta1 ingresses request through the
// networking.k8s.io/v1 resource.
func (s *Server) serveIngressV1beta1(w http.ResponseWriter, r *http.Request, gv schema.GroupVersion, rest []string) error {
	rq, err := s.parseResourcePath(gv, rest)
	if err != nil {
		return err
	}
	w.Header().Add("Warning", ingressV1beta1Warning)
	rq.res = ingressV1Resource
	if r.Method == http.MethodPatch && rq.name != "" {
		return s.patchIngressV1beta1(w, r, rq)
	}
	inner := r.Clone(r.Context())
	inner.URL.Path = strings.Replace(r.URL.Path, "/apis/extensions/v1beta1/", "/apis/networking.k8s.io/v1/", 1)
	// Ask for JSON inside; the answer is converted, then written as the client asked.
	if wantsYAML(r) {
		inner.Header.Set("Accept", "application/json")
	}
	if (r.Method == http.MethodPost || r.Method == http.MethodPut) && rq.sub != "scale" {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		var in extv1beta1.Ingress
		warnings, err := decodeInto(body, &in, ingressV1beta1GVK, fieldValidation(r))
		if err != nil {
			return err
		}
		for _, wn := range warnings {
			w.Header().Add("Warning", "299 - "+strconv.Quote(wn))
		}
		out, err := encodeObject(IngressV1beta1ToV1(&in), ingressV1Resource.gvk())
		if err != nil {
			return err
		}
		inner.Body = readCloser{bytes.NewReader(out)}
		inner.ContentLength = int64(len(out))
		inner.Header.Set("Content-Type", "application/json")
	}
	if q := r.URL.Query().Get("watch"); (q == "true" || q == "1") && rq.name == "" && r.Method == http.MethodGet {
		cw := &watchConverter{w: w, table: wantsTable(r)}
		return s.serveResource(cw, inner, rq)
	}
	rec := &recordedResponse{header: w.Header(), code: http.StatusOK}
	if err := s.serveResource(rec, inner, rq); err != nil {
		return convertStatusError(err)
	}
	body := rec.body.Bytes()
	if !wantsTable(r) {
		body = convertIngressJSON(body)
	}
	if ct := rec.header.Get("Content-Type"); ct != "" && ct != "application/json" {
		w.WriteHeader(rec.code)
		w.Write(body)
		return nil
	}
	rec.header.Del("Content-Type")
	writeJSON(w, r, rec.code, body)
	return nil
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// patchIngressV1beta1 applies a patch written against the v1beta1 form: the
// current object is converted to v1beta1, patched, and converted back, inside
// one store transaction as any patch.
func (s *Server) patchIngressV1beta1(w http.ResponseWriter, r *http.Request, rq request) error {
	patch, err := readBody(r)
	if err != nil {
		return err
	}
	pt := patchTypeOf(r)
	mode := fieldValidation(r)
	updated, err := s.Update(ingressV1Resource, rq.namespace, rq.name, rq.sub, func(cur runtime.Object) (runtime.Object, error) {
		old := IngressV1ToV1beta1(cur.(*networkingv1.Ingress))
		curJSON, err := encodeObject(old, ingressV1beta1GVK)
		if err != nil {
			return nil, err
		}
		patched, err := applyPatch(pt, curJSON, patch, &extv1beta1.Ingress{})
		if err != nil {
			return nil, err
		}
		var in extv1beta1.Ingress
		if _, err := decodeInto(patched, &in, ingressV1beta1GVK, mode); err != nil {
			return nil, err
		}
		obj := IngressV1beta1ToV1(&in)
		if rv := obj.ResourceVersion; rv == "" || rv == cur.(*networkingv1.Ingress).ResourceVersion {
			obj.ResourceVersion = ""
		}
		return obj, nil
	})
	if err != nil {
		return convertStatusError(err)
	}
	b, err := encodeObject(IngressV1ToV1beta1(updated.(*networkingv1.Ingress)), ingressV1beta1GVK)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, b)
	return nil
}

// convertStatusError names the extensions group in errors about ingresses, as
// kube-apiserver did for this version (`ingresses.extensions "x" not found`).
func convertStatusError(err error) error {
	se, ok := err.(apierrors.APIStatus)
	if !ok {
		return err
	}
	st := se.Status()
	st.Message = strings.ReplaceAll(st.Message, "ingresses.networking.k8s.io", "ingresses.extensions")
	if st.Details != nil && st.Details.Group == "networking.k8s.io" {
		st.Details.Group = "extensions"
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// recordedResponse keeps what the v1 handler wrote, for conversion.
type recordedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (rr *recordedResponse) Header() http.Header         { return rr.header }
func (rr *recordedResponse) WriteHeader(code int)        { rr.code = code }
func (rr *recordedResponse) Write(b []byte) (int, error) { return rr.body.Write(b) }

// watchConverter converts a watch stream event by event (each a JSON line).
type watchConverter struct {
	w       http.ResponseWriter
	table   bool
	partial []byte
}

func (wc *watchConverter) Header() http.Header { return wc.w.Header() }

// Unwrap lets http.ResponseController reach the connection (write deadlines).
func (wc *watchConverter) Unwrap() http.ResponseWriter { return wc.w }
func (wc *watchConverter) WriteHeader(code int)        { wc.w.WriteHeader(code) }
func (wc *watchConverter) Flush() {
	if f, ok := wc.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (wc *watchConverter) Write(b []byte) (int, error) {
	if wc.table {
		return wc.w.Write(b)
	}
	wc.partial = append(wc.partial, b...)
	for {
		i := bytes.IndexByte(wc.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := wc.partial[:i]
		var ev watchEvent
		out := line
		if err := json.Unmarshal(line, &ev); err == nil {
			ev.Object = convertIngressJSON(ev.Object)
			if c, err := json.Marshal(ev); err == nil {
				out = c
			}
		}
		if _, err := wc.w.Write(append(out, '\n')); err != nil {
			return 0, err
		}
		wc.partial = append(wc.partial[:0], wc.partial[i+1:]...)
	}
}

// convertIngressJSON converts a v1 Ingress or IngressList (or a Status naming
// the v1 group) to extensions/v1beta1; anything else is returned unchanged.
func convertIngressJSON(body []byte) []byte {
	var tm metav1.TypeMeta
	if json.Unmarshal(body, &tm) != nil {
		return body
	}
	switch tm.Kind {
	case "Ingress":
		var ing networkingv1.Ingress
		if decodeStored(body, &ing) != nil {
			return body
		}
		if out, err := encodeObject(IngressV1ToV1beta1(&ing), ingressV1beta1GVK); err == nil {
			return out
		}
	case "IngressList":
		var list networkingv1.IngressList
		if decodeStored(body, &list) != nil {
			return body
		}
		out := extv1beta1.IngressList{ListMeta: list.ListMeta}
		for i := range list.Items {
			out.Items = append(out.Items, *IngressV1ToV1beta1(&list.Items[i]))
		}
		if out.Items == nil {
			out.Items = []extv1beta1.Ingress{}
		}
		if b, err := encodeObject(&out, ingressV1beta1GV.WithKind("IngressList")); err == nil {
			return b
		}
	case "Status":
		return bytes.ReplaceAll(bytes.ReplaceAll(body, []byte(`"group":"networking.k8s.io"`), []byte(`"group":"extensions"`)),
			[]byte("ingresses.networking.k8s.io"), []byte("ingresses.extensions"))
	}
	return body
}

// IngressV1beta1ToV1 converts per the deprecation guide: spec.backend is
// spec.defaultBackend, serviceName/servicePort become service.name and
// service.port.number or .name, and a missing pathType is ImplementationSpecific
// (v1beta1's default, "the undefined v1beta1 behavior").
func IngressV1beta1ToV1(in *extv1beta1.Ingress) *networkingv1.Ingress {
	out := &networkingv1.Ingress{ObjectMeta: in.ObjectMeta}
	out.Spec.IngressClassName = in.Spec.IngressClassName
	out.Spec.DefaultBackend = backendV1(in.Spec.Backend)
	for _, t := range in.Spec.TLS {
		out.Spec.TLS = append(out.Spec.TLS, networkingv1.IngressTLS{Hosts: t.Hosts, SecretName: t.SecretName})
	}
	for _, rule := range in.Spec.Rules {
		r := networkingv1.IngressRule{Host: rule.Host}
		if rule.HTTP != nil {
			r.HTTP = &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{}}
			for _, p := range rule.HTTP.Paths {
				pt := networkingv1.PathTypeImplementationSpecific
				if p.PathType != nil {
					pt = networkingv1.PathType(*p.PathType)
				}
				var b networkingv1.IngressBackend
				if nb := backendV1(&p.Backend); nb != nil {
					b = *nb
				}
				r.HTTP.Paths = append(r.HTTP.Paths, networkingv1.HTTPIngressPath{Path: p.Path, PathType: &pt, Backend: b})
			}
		}
		out.Spec.Rules = append(out.Spec.Rules, r)
	}
	for _, lb := range in.Status.LoadBalancer.Ingress {
		ni := networkingv1.IngressLoadBalancerIngress{IP: lb.IP, Hostname: lb.Hostname}
		for _, p := range lb.Ports {
			ni.Ports = append(ni.Ports, networkingv1.IngressPortStatus{Port: p.Port, Protocol: p.Protocol, Error: p.Error})
		}
		out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, ni)
	}
	return out
}

func backendV1(b *extv1beta1.IngressBackend) *networkingv1.IngressBackend {
	if b == nil {
		return nil
	}
	out := &networkingv1.IngressBackend{Resource: b.Resource}
	if b.ServiceName != "" || b.Resource == nil {
		out.Service = &networkingv1.IngressServiceBackend{Name: b.ServiceName}
		if b.ServicePort.Type == intstr.String {
			out.Service.Port.Name = b.ServicePort.StrVal
		} else {
			out.Service.Port.Number = b.ServicePort.IntVal
		}
	}
	return out
}

// IngressV1ToV1beta1 is the reverse of IngressV1beta1ToV1.
func IngressV1ToV1beta1(in *networkingv1.Ingress) *extv1beta1.Ingress {
	out := &extv1beta1.Ingress{ObjectMeta: in.ObjectMeta}
	out.Spec.IngressClassName = in.Spec.IngressClassName
	out.Spec.Backend = backendV1beta1(in.Spec.DefaultBackend)
	for _, t := range in.Spec.TLS {
		out.Spec.TLS = append(out.Spec.TLS, extv1beta1.IngressTLS{Hosts: t.Hosts, SecretName: t.SecretName})
	}
	for _, rule := range in.Spec.Rules {
		r := extv1beta1.IngressRule{Host: rule.Host}
		if rule.HTTP != nil {
			r.HTTP = &extv1beta1.HTTPIngressRuleValue{Paths: []extv1beta1.HTTPIngressPath{}}
			for _, p := range rule.HTTP.Paths {
				var pt *extv1beta1.PathType
				if p.PathType != nil {
					v := extv1beta1.PathType(*p.PathType)
					pt = &v
				}
				var b extv1beta1.IngressBackend
				if nb := backendV1beta1(&p.Backend); nb != nil {
					b = *nb
				}
				r.HTTP.Paths = append(r.HTTP.Paths, extv1beta1.HTTPIngressPath{Path: p.Path, PathType: pt, Backend: b})
			}
		}
		out.Spec.Rules = append(out.Spec.Rules, r)
	}
	for _, lb := range in.Status.LoadBalancer.Ingress {
		ni := extv1beta1.IngressLoadBalancerIngress{IP: lb.IP, Hostname: lb.Hostname}
		for _, p := range lb.Ports {
			ni.Ports = append(ni.Ports, extv1beta1.IngressPortStatus{Port: p.Port, Protocol: p.Protocol, Error: p.Error})
		}
		out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, ni)
	}
	return out
}

func backendV1beta1(b *networkingv1.IngressBackend) *extv1beta1.IngressBackend {
	if b == nil {
		return nil
	}
	out := &extv1beta1.IngressBackend{Resource: b.Resource}
	if b.Service != nil {
		out.ServiceName = b.Service.Name
		if b.Service.Port.Name != "" {
			out.ServicePort = intstr.FromString(b.Service.Port.Name)
		} else {
			out.ServicePort = intstr.FromInt32(b.Service.Port.Number)
		}
	}
	return out
}
