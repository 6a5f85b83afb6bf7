package apiserver

import (
	"net/http"
	"strings"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kube-openapi/pkg/common"
)

// The OpenAPI documents describe the REST routes minikit serves. kube-openapi's
// builders take them as common.RouteContainer values (kube-apiserver adapts its
// go-restful web services to that interface); these small types describe the
// routes of the resources table directly.

type oaParam struct {
	name, desc string
	kind       common.ParameterKind
	typ        string
	required   bool
}

func (p oaParam) Name() string                           { return p.name }
func (p oaParam) Description() string                    { return p.desc }
func (p oaParam) Required() bool                         { return p.required }
func (p oaParam) Kind() common.ParameterKind             { return p.kind }
func (p oaParam) DataType() string                       { return p.typ }
func (p oaParam) AllowMultiple() bool                    { return false }
func (r oaResponse) Code() int                           { return r.code }
func (r oaResponse) Message() string                     { return r.msg }
func (r oaResponse) Model() interface{}                  { return r.model }
func (c oaContainer) RootPath() string                   { return c.root }
func (c oaContainer) PathParameters() []common.Parameter { return nil }
func (c oaContainer) Routes() []common.Route             { return c.routes }

type oaResponse struct {
	code  int
	msg   string
	model any
}

type oaContainer struct {
	root   string
	routes []common.Route
}

type oaRoute struct {
	method, path, op, desc string
	params                 []common.Parameter
	consumes, produces     []string
	meta                   map[string]any
	body                   any
	resps                  []common.StatusCodeResponse
}

func (r *oaRoute) Method() string                                   { return r.method }
func (r *oaRoute) Path() string                                     { return r.path }
func (r *oaRoute) OperationName() string                            { return r.op }
func (r *oaRoute) Parameters() []common.Parameter                   { return r.params }
func (r *oaRoute) Description() string                              { return r.desc }
func (r *oaRoute) Consumes() []string                               { return r.consumes }
func (r *oaRoute) Produces() []string                               { return r.produces }
func (r *oaRoute) Metadata() map[string]interface{}                 { return r.meta }
func (r *oaRoute) RequestPayloadSample() interface{}                { return r.body }
func (r *oaRoute) ResponsePayloadSample() interface{}               { return nil }
func (r *oaRoute) StatusCodeResponses() []common.StatusCodeResponse { return r.resps }

func pathParam(name, desc string) common.Parameter {
	return oaParam{name: name, desc: desc, kind: common.PathParameterKind, typ: "string", required: true}
}

func queryParam(name, typ, desc string) common.Parameter {
	return oaParam{name: name, desc: desc, kind: common.QueryParameterKind, typ: typ}
}

var (
	paramName      = pathParam("name", "name of the resource")
	paramNamespace = pathParam("namespace", "object name and auth scope, such as for teams and projects")
	paramPretty    = queryParam("pretty", "string", "If 'true', then the output is pretty printed.")
	paramDryRun    = queryParam("dryRun", "string", "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed")
	paramManager   = queryParam("fieldManager", "string", "fieldManager is a name associated with the actor or entity that is making these changes.")
	paramFieldVal  = queryParam("fieldValidation", "string", "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict")
	paramForce     = queryParam("force", "boolean", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people.")
	paramBody      = oaParam{name: "body", kind: common.BodyParameterKind, required: true}
	paramGrace     = queryParam("gracePeriodSeconds", "integer", "The duration in seconds before the object should be deleted.")
	paramPropagate = queryParam("propagationPolicy", "string", "Whether and how garbage collection will be performed. Acceptable values are: 'Orphan', 'Background', 'Foreground'.")
	listParams     = []common.Parameter{
		queryParam("allowWatchBookmarks", "boolean", "allowWatchBookmarks requests watch events with type \"BOOKMARK\"."),
		queryParam("continue", "string", "The continue option should be set when retrieving more results from the server."),
		queryParam("fieldSelector", "string", "A selector to restrict the list of returned objects by their fields. Defaults to everything."),
		queryParam("labelSelector", "string", "A selector to restrict the list of returned objects by their labels. Defaults to everything."),
		queryParam("limit", "integer", "limit is a maximum number of responses to return for a list call."),
		queryParam("resourceVersion", "string", "resourceVersion sets a constraint on what resource versions a request may be served from."),
		queryParam("timeoutSeconds", "integer", "Timeout for the list/watch call."),
		queryParam("watch", "boolean", "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications."),
	}
	mimeObject = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
	mimeWatch  = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch"}
	mimePatch  = []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"}
)

// opPrefix is the part of kube-apiserver's operation IDs naming the group
// version: CoreV1, AppsV1, NetworkingV1, ExtensionsV1beta1.
func opPrefix(gv schema.GroupVersion) string {
	g := gv.Group
	if g == "" {
		g = "core"
	}
	g, _, _ = strings.Cut(g, ".")
	return strings.ToUpper(g[:1]) + g[1:] + strings.ToUpper(gv.Version[:1]) + gv.Version[1:]
}

// rootPath is where a group version's resources live: /api/v1, /apis/apps/v1.
func rootPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.String()
}

// openAPIRoutes describes the routes of every resource of gv, with the verbs the
// server supports on them.
func openAPIRoutes(gv schema.GroupVersion) []common.Route {
	var routes []common.Route
	for _, res := range openAPIResources() {
		if res.gv == gv {
			routes = append(routes, resourceRoutes(res)...)
		}
	}
	return routes
}

func resourceRoutes(res *resource) []common.Route {
	gvk := res.gvk()
	obj := res.newObj()
	list, err := clientscheme.Scheme.New(res.gv.WithKind(res.kind + "List"))
	if err != nil {
		list, err = crdScheme.New(res.gv.WithKind(res.kind + "List"))
	}
	if err != nil {
		panic("openapi: no list kind for " + res.kind + ": " + err.Error())
	}
	status := &metav1.Status{}
	kindGVK := metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}
	prefix := opPrefix(res.gv)
	root := rootPath(res.gv)

	var scopeParams []common.Parameter
	collection, ns := root+"/"+res.name, ""
	if res.namespaced {
		scopeParams = []common.Parameter{paramNamespace}
		collection, ns = root+"/namespaces/{namespace}/"+res.name, "Namespaced"
	}
	item := collection + "/{name}"
	with := func(ps ...common.Parameter) []common.Parameter {
		out := append([]common.Parameter{}, scopeParams...)
		return append(out, ps...)
	}
	route := func(method, path, verb, action, op string, model runtime.Object, kind metav1.GroupVersionKind, params []common.Parameter, body any) *oaRoute {
		rt := &oaRoute{
			method: method, path: path, op: verb + prefix + op, params: params,
			produces: mimeObject, consumes: []string{"*/*"},
			meta: map[string]any{"x-kubernetes-action": action, "x-kubernetes-group-version-kind": kind},
			body: body,
		}
		rt.resps = []common.StatusCodeResponse{oaResponse{code: http.StatusOK, msg: "OK", model: model}}
		if method == http.MethodPost {
			rt.resps = append(rt.resps, oaResponse{code: http.StatusCreated, msg: "Created", model: model}, oaResponse{code: http.StatusAccepted, msg: "Accepted", model: model})
		}
		if method == http.MethodPut {
			rt.resps = append(rt.resps, oaResponse{code: http.StatusCreated, msg: "Created", model: model})
		}
		if method == http.MethodPatch {
			rt.consumes = mimePatch
			rt.resps = append(rt.resps, oaResponse{code: http.StatusCreated, msg: "Created", model: model})
		}
		if method == http.MethodDelete {
			rt.resps = append(rt.resps, oaResponse{code: http.StatusAccepted, msg: "Accepted", model: model})
		}
		if rt.params == nil {
			rt.params = []common.Parameter{}
		}
		rt.params = append(rt.params, paramPretty)
		return rt
	}
	writeParams := func(ps ...common.Parameter) []common.Parameter {
		return with(append([]common.Parameter{paramBody, paramDryRun, paramManager, paramFieldVal}, ps...)...)
	}
	kindName := ns + res.kind
	routes := []common.Route{
		route("GET", collection, "list", "list", kindName, list, kindGVK, with(listParams...), nil),
		route("POST", collection, "create", "post", kindName, obj, kindGVK, writeParams(), obj),
		route("DELETE", collection, "deletecollection", "deletecollection", kindName, status, kindGVK,
			with(append([]common.Parameter{paramBody, paramDryRun, paramGrace, paramPropagate}, listParams[1:7]...)...), &metav1.DeleteOptions{}),
		route("GET", item, "read", "get", kindName, obj, kindGVK, with(paramName), nil),
		route("PUT", item, "replace", "put", kindName, obj, kindGVK, writeParams(paramName), obj),
		route("PATCH", item, "patch", "patch", kindName, obj, kindGVK, writeParams(paramName, paramForce), &metav1.Patch{}),
		route("DELETE", item, "delete", "delete", kindName, status, kindGVK,
			with(paramName, paramBody, paramDryRun, paramGrace, paramPropagate), &metav1.DeleteOptions{}),
	}
	// The list route's produces includes the watch stream types.
	routes[0].(*oaRoute).produces = mimeWatch
	if res.namespaced {
		routes = append(routes, route("GET", root+"/"+res.name, "list", "list", res.kind+"ForAllNamespaces", list, kindGVK, listParams, nil))
		routes[len(routes)-1].(*oaRoute).produces = mimeWatch
	}
	if res.status {
		routes = append(routes,
			route("GET", item+"/status", "read", "get", kindName+"Status", obj, kindGVK, with(paramName), nil),
			route("PUT", item+"/status", "replace", "put", kindName+"Status", obj, kindGVK, writeParams(paramName), obj),
			route("PATCH", item+"/status", "patch", "patch", kindName+"Status", obj, kindGVK, writeParams(paramName, paramForce), &metav1.Patch{}))
	}
	if res.scale {
		scale := &autoscalingv1.Scale{}
		scaleGVK := metav1.GroupVersionKind{Group: autoscalingv1.GroupName, Version: "v1", Kind: "Scale"}
		routes = append(routes,
			route("GET", item+"/scale", "read", "get", kindName+"Scale", scale, scaleGVK, with(paramName), nil),
			route("PUT", item+"/scale", "replace", "put", kindName+"Scale", scale, scaleGVK, writeParams(paramName), scale),
			route("PATCH", item+"/scale", "patch", "patch", kindName+"Scale", scale, scaleGVK, writeParams(paramName, paramForce), &metav1.Patch{}))
	}
	if res.name == "pods" {
		r := route("GET", item+"/log", "read", "get", kindName+"Log", nil, kindGVK, with(paramName,
			queryParam("container", "string", "The container for which to stream logs. Defaults to only container if there is one container in the pod."),
			queryParam("follow", "boolean", "Follow the log stream of the pod. Defaults to false."),
			queryParam("previous", "boolean", "Return previous terminated container logs. Defaults to false."),
			queryParam("sinceSeconds", "integer", "A relative time in seconds before the current time from which to show logs."),
			queryParam("tailLines", "integer", "If set, the number of lines from the end of the logs to show."),
			queryParam("timestamps", "boolean", "If true, add an RFC3339 timestamp at the beginning of every line of log output."),
		), nil)
		r.produces = []string{"text/plain", "application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
		r.resps = []common.StatusCodeResponse{oaResponse{code: http.StatusOK, msg: "OK", model: ""}}
		routes = append(routes, r)
	}
	if res.name == "namespaces" {
		routes = append(routes, route("PUT", item+"/finalize", "replace", "put", "NamespaceFinalize", obj, kindGVK, writeParams(paramName), obj))
	}
	return routes
}
