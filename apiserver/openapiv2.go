package apiserver

import (
	"net/http"
	"strings"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
)

// OpenAPI v2 is served for older kubectl (Debian's kubernetes-client is 1.20):
// its client-side apply and validation fetch /openapi/v2, as protobuf, and fail
// when it is missing. The document declares no definitions, so kubectl skips
// schema validation (the server validates, naming unknown fields) and computes
// strategic merge patches from its compiled-in types, as with OpenAPI v3.
var openAPIV2JSON, openAPIV2Proto = func() ([]byte, []byte) {
	doc := &openapiv2.Document{
		Swagger:     "2.0",
		Info:        &openapiv2.Info{Title: "Kubernetes", Version: KubernetesVersion},
		Paths:       &openapiv2.Paths{},
		Definitions: &openapiv2.Definitions{},
	}
	pb, err := proto.Marshal(doc)
	if err != nil {
		panic(err)
	}
	js := []byte(`{"swagger":"2.0","info":{"title":"Kubernetes","version":"` + KubernetesVersion + `"},"paths":{},"definitions":{}}`)
	return js, pb
}()

func serveOpenAPIV2(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	if strings.Contains(r.Header.Get("Accept"), "protobuf") {
		// As kube-apiserver: the protobuf media type is not a valid
		// Content-Type (client-go fails to parse its "@").
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(openAPIV2Proto)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIV2JSON)
}
