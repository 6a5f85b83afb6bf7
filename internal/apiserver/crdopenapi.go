package apiserver

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// A CRD's OpenAPI documents are built by apiextensions-apiserver's builder,
// as kube-apiserver's openapi and openapiv3 controllers build them: one
// swagger 2.0 document for all its served versions, merged into the
// built-in one, and one OpenAPI 3.0 document per version, merged with the
// other CRDs of the same group version. kubectl explain and kubectl's
// client-side validation read them.

// crdDocs is the OpenAPI of one CRD.
type crdDocs struct {
	v2 *spec.Swagger
	v3 map[schema.GroupVersion]*spec3.OpenAPI
}

func buildCRDOpenAPI(crd *apiextensionsv1.CustomResourceDefinition) (*crdDocs, error) {
	d := &crdDocs{v2: &spec.Swagger{}, v3: map[schema.GroupVersion]*spec3.OpenAPI{}}
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		v2, err := builder.BuildOpenAPIV2(crd, v.Name, builder.Options{V2: true, IncludeSelectableFields: true})
		if err != nil {
			return nil, fmt.Errorf("building OpenAPI v2 of %s/%s: %w", crd.Name, v.Name, err)
		}
		// The built-in document has its defaults pruned; so must this one,
		// to merge cleanly (as upstream does).
		v2.Definitions = handler.PruneDefaults(v2.Definitions)
		if d.v2, err = builder.MergeSpecs(d.v2, v2); err != nil {
			return nil, fmt.Errorf("merging OpenAPI v2 of %s/%s: %w", crd.Name, v.Name, err)
		}
		v3, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{IncludeSelectableFields: true})
		if err != nil {
			return nil, fmt.Errorf("building OpenAPI v3 of %s/%s: %w", crd.Name, v.Name, err)
		}
		d.v3[schema.GroupVersion{Group: crd.Spec.Group, Version: v.Name}] = v3
	}
	return d, nil
}

// updateCRDOpenAPI merges the documents of the served CRDs into the
// server's OpenAPI services. The caller holds s.openapi.mu.
func (s *Server) updateCRDOpenAPI(st *staticOpenAPI) error {
	d := &s.openapi
	var v2s []*spec.Swagger
	v3s := map[string][]*spec3.OpenAPI{}
	for _, docs := range s.crds.docs() {
		v2s = append(v2s, docs.v2)
		for gv, doc := range docs.v3 {
			key := openAPIV3Key(gv)
			if len(v3s[key]) == 0 && st.v3[key] != nil {
				v3s[key] = append(v3s[key], st.v3[key]) // a CRD in a built-in group version
			}
			v3s[key] = append(v3s[key], doc)
		}
	}
	merged, err := builder.MergeSpecs(st.v2, v2s...)
	if err != nil {
		return fmt.Errorf("merging the OpenAPI v2 of CRDs: %w", err)
	}
	if err := d.v2.UpdateSpec(merged); err != nil {
		return err
	}
	keys := map[string]bool{}
	for key, docs := range v3s {
		m, err := builder.MergeSpecsV3(docs...)
		if err != nil {
			return fmt.Errorf("merging the OpenAPI v3 of %s: %w", key, err)
		}
		d.v3.UpdateGroupVersion(key, m)
		keys[key] = true
	}
	for key := range d.crdKeys {
		switch {
		case keys[key]:
		case st.v3[key] != nil:
			d.v3.UpdateGroupVersion(key, st.v3[key])
		default:
			d.v3.DeleteGroupVersion(key)
		}
	}
	d.crdKeys = keys
	return nil
}
