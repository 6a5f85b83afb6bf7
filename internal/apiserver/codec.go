package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// maxBodyBytes bounds a request body, as kube-apiserver's 3 MiB limit does.
const maxBodyBytes = 3 << 20

// readRawBody reads a bounded request body as sent.
func readRawBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, bodyReadError(err)
	}
	if len(body) > maxBodyBytes {
		return nil, tooLarge()
	}
	return body, nil
}

// readBody reads a bounded request body and converts YAML to JSON.
func readBody(r *http.Request) ([]byte, error) {
	body, err := readRawBody(r)
	if err != nil {
		return nil, err
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/vnd.kubernetes.protobuf" {
		return protobufToJSON(body)
	}
	if strings.Contains(ct, "yaml") {
		j, err := yaml.YAMLToJSON(body)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml: %v", err))
		}
		body = j
	}
	return body, nil
}

// protobufCodec decodes the protobuf bodies that client-go's typed clients (and so
// some kubectl commands) send. Responses are always JSON, which those clients accept.
// The apiextensions clientset sends CRDs as protobuf too.
var protobufCodec = protobuf.NewSerializer(protobufScheme, protobufScheme)

var protobufScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}()

func protobufToJSON(body []byte) ([]byte, error) {
	obj, _, err := protobufCodec.Decode(body, nil, nil)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding protobuf request body: %v", err))
	}
	gvks, _, err := protobufScheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("unknown kind in protobuf request body: %v", err))
	}
	return encodeObject(obj, gvks[0])
}

// patchTypeOf is a PATCH request's patch type: its Content-Type without
// parameters.
func patchTypeOf(r *http.Request) types.PatchType {
	return types.PatchType(strings.TrimSpace(strings.Split(r.Header.Get("Content-Type"), ";")[0]))
}

// fieldValidation is the request's fieldValidation mode: Ignore, Warn (default) or Strict.
func fieldValidation(r *http.Request) string {
	switch v := r.URL.Query().Get("fieldValidation"); v {
	case "Ignore", "Strict":
		return v
	}
	return "Warn"
}

// decodeInto decodes JSON into obj, checking apiVersion and kind against want and
// reporting unknown or duplicate fields per the fieldValidation mode. Warnings are
// returned for the caller to send as Warning headers.
func decodeInto(body []byte, obj runtime.Object, want schema.GroupVersionKind, mode string) (warnings []string, err error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(body, &tm); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding request body: %v", err))
	}
	if tm.Kind != "" && tm.Kind != want.Kind {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the kind of the object (%s) does not match the kind of the request (%s)", tm.Kind, want.Kind))
	}
	if tm.APIVersion != "" && tm.APIVersion != want.GroupVersion().String() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", tm.APIVersion, want.GroupVersion().String()))
	}
	var strict []error
	if u, ok := obj.(*unstructured.Unstructured); ok {
		// A custom resource: duplicate fields are found here, unknown ones
		// are the schema's to report (crVersion.normalize).
		var m map[string]any
		if strict, err = sigsjson.UnmarshalStrict(body, &m, sigsjson.DisallowDuplicateFields); err != nil || m == nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding request body as %s: %v", want.Kind, err))
		}
		u.Object = m
		u.SetGroupVersionKind(want)
	} else if strict, err = sigsjson.UnmarshalStrict(body, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding request body as %s: %v", want.Kind, err))
	}
	if len(strict) == 0 || mode == "Ignore" {
		return nil, nil
	}
	var msgs []string
	for _, e := range strict {
		msgs = append(msgs, e.Error())
	}
	if mode == "Strict" {
		return nil, apierrors.NewBadRequest("strict decoding error: " + strings.Join(msgs, ", "))
	}
	return msgs, nil
}

// decodeStored decodes an object read from the store (trusted, case-sensitive).
func decodeStored(data []byte, obj runtime.Object) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return decodeUnstructured(data, u)
	}
	return sigsjson.UnmarshalCaseSensitivePreserveInts(data, obj)
}

// decodeUnstructured decodes a JSON object with integers as int64, as
// unstructured content holds them.
func decodeUnstructured(data []byte, u *unstructured.Unstructured) error {
	var m map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &m); err != nil {
		return err
	}
	if m == nil {
		return fmt.Errorf("not a JSON object")
	}
	u.Object = m
	return nil
}

// encodeObject sets obj's TypeMeta and marshals it.
func encodeObject(obj runtime.Object, gvk schema.GroupVersionKind) ([]byte, error) {
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return json.Marshal(obj)
}

// wantsYAML reports whether the client asked for YAML over JSON.
func wantsYAML(r *http.Request) bool {
	a := r.Header.Get("Accept")
	return strings.Contains(a, "application/yaml") && !strings.Contains(a, "application/json")
}

// wantsTable reports whether the client asked for a meta.k8s.io Table.
func wantsTable(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "as=Table")
}

// wantsMetadata reports the meta.k8s.io version of PartialObjectMetadata
// the client asked for (client-go's metadata client and metadata informers:
// as=PartialObjectMetadata for get and watch, as=PartialObjectMetadataList
// for list), or "" for whole objects.
func wantsMetadata(r *http.Request) string {
	for _, mt := range strings.Split(r.Header.Get("Accept"), ",") {
		params := map[string]string{}
		for _, p := range strings.Split(mt, ";")[1:] {
			if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok {
				params[k] = v
			}
		}
		if (params["as"] == "PartialObjectMetadata" || params["as"] == "PartialObjectMetadataList") && params["g"] == "meta.k8s.io" &&
			(params["v"] == "v1" || params["v"] == "v1beta1") {
			return params["v"]
		}
	}
	return ""
}

// partialMetadata is obj's metadata as a PartialObjectMetadata of the given
// meta.k8s.io version.
func partialMetadata(obj runtime.Object, version string) *metav1.PartialObjectMetadata {
	p := meta.AsPartialObjectMetadata(metaOf(obj))
	p.TypeMeta = metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/" + version}
	return p
}

// writeJSON writes a JSON (or YAML, if asked) body.
func writeJSON(w http.ResponseWriter, r *http.Request, code int, body []byte) {
	if r != nil && wantsYAML(r) {
		if y, err := yaml.JSONToYAML(body); err == nil {
			w.Header().Set("Content-Type", "application/yaml")
			w.WriteHeader(code)
			w.Write(y)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(body)
	if len(body) == 0 || body[len(body)-1] != '\n' {
		w.Write([]byte("\n"))
	}
}

func writeValue(w http.ResponseWriter, r *http.Request, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, r, apierrors.NewInternalError(err), nil)
		return
	}
	writeJSON(w, r, code, b)
}

// setResourceVersion rewrites metadata.resourceVersion in stored JSON without a full
// decode, used where a deleted object is reported at the deleting revision.
func withResourceVersion(obj runtime.Object, rev int64) {
	metaOf(obj).SetResourceVersion(fmt.Sprint(rev))
}

func sortStrings(s []string) []string { sort.Strings(s); return s }

// listJSON assembles a List body from stored items without re-encoding them.
func listJSON(kind, apiVersion string, rev int64, items [][]byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"%d"},"items":[`, kind, apiVersion, rev)
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteString("]}")
	return b.Bytes()
}
