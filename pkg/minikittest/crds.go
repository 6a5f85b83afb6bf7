package minikittest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// readCRDs reads every CustomResourceDefinition in paths (files, or
// directories whose .yaml, .yml and .json files are read), skipping the
// documents of other kinds.
func readCRDs(paths []string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("reading CRDs: %w", err)
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("reading CRDs: %w", err)
		}
		for _, e := range entries {
			if !e.IsDir() && slices.Contains([]string{".yaml", ".yml", ".json"}, filepath.Ext(e.Name())) {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading CRDs: %w", err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for i := 0; ; i++ {
			var doc any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("reading CRDs from %s (document %d): %w", f, i+1, err)
			}
			raw, ok := doc.(map[string]any)
			if !ok {
				continue // empty, or no object
			}
			gv, _ := schema.ParseGroupVersion(fmt.Sprint(raw["apiVersion"]))
			if raw["kind"] != "CustomResourceDefinition" || gv.Group != apiextensionsv1.GroupName {
				continue
			}
			if gv.Version != "v1" {
				return nil, fmt.Errorf("reading CRDs from %s (document %d): %s is no longer served by Kubernetes; convert it to apiextensions.k8s.io/v1", f, i+1, raw["apiVersion"])
			}
			b, _ := yaml.Marshal(raw)
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(b, crd); err != nil {
				return nil, fmt.Errorf("reading CRDs from %s (document %d): %w", f, i+1, err)
			}
			crds = append(crds, crd)
		}
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("reading CRDs: no CustomResourceDefinition in %s", strings.Join(paths, ", "))
	}
	return crds, nil
}

// installCRDs creates the CRDs of paths and waits until every one is
// Established.
func installCRDs(ctx context.Context, cfg *rest.Config, paths []string) error {
	crds, err := readCRDs(paths)
	if err != nil {
		return err
	}
	client, err := apiextensionsclientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		if _, err := c.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating CRD %q: %w", crd.Name, err)
		}
	}
	// Established, and in discovery (as envtest waits for), where clients
	// such as controller-runtime's RESTMapper look for it.
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		for {
			cur, err := c.Get(ctx, crd.Name, metav1.GetOptions{})
			if err == nil && established(cur) {
				if err = discovered(disc, cur); err == nil {
					break
				}
			}
			select {
			case <-ctx.Done():
				why := "not Established"
				if err != nil {
					why = err.Error()
				}
				return fmt.Errorf("waiting for CRD %q: %s", crd.Name, why)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

// discovered says whether discovery lists every served version of crd.
func discovered(disc discovery.DiscoveryInterface, crd *apiextensionsv1.CustomResourceDefinition) error {
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		gv := crd.Spec.Group + "/" + v.Name
		list, err := disc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			return fmt.Errorf("discovery of %s: %w", gv, err)
		}
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == crd.Spec.Names.Plural }) {
			return fmt.Errorf("discovery of %s lists no %s", gv, crd.Spec.Names.Plural)
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
