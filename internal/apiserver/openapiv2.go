package apiserver

import (
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// buildOpenAPIV2 builds the swagger 2.0 document of every served group version.
// kubectl before 1.27 (Debian's kubernetes-client is 1.20) knows only this one:
// it fetches it as protobuf before every apply, validates manifests against its
// definitions and explains fields from it. Newer kubectl uses /openapi/v3.
func buildOpenAPIV2() (*spec.Swagger, error) {
	var containers []common.RouteContainer
	for _, gv := range servedGroupVersions() {
		containers = append(containers, openAPIRouteContainer(gv))
	}
	return builder.BuildOpenAPISpecFromRoutes(containers, &common.Config{
		Info:              openAPIInfo(),
		GetDefinitions:    openAPIDefinitions,
		GetDefinitionName: openAPIDefinitionNamer(),
	})
}
