package gateway

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

//go:embed crds/standard/*.yaml crds/experimental/*.yaml
var bundleFS embed.FS

// The bundle's version and its channels (the values of ChannelAnnotation).
const (
	BundleVersion       = "v1.6.3"
	ChannelStandard     = "standard"
	ChannelExperimental = "experimental"
	BundleAnnotation    = "gateway.networking.k8s.io/bundle-version"
	ChannelAnnotation   = "gateway.networking.k8s.io/channel"
	// FieldManager owns what Install applies, as k3s's deploy controller owns
	// its add-ons' fields.
	FieldManager = "minikit-gateway-api"
)

// BundleCRD is one CustomResourceDefinition of the bundle: its name and
// channel, and its manifest as JSON, byte for byte what the release's YAML says.
type BundleCRD struct {
	Name    string
	Channel string
	JSON    []byte
}

// Bundle returns the CRDs of a channel, sorted by name. Documents that are not
// CRDs (the safe-upgrades ValidatingAdmissionPolicy and its binding) are left
// out; see the package doc. The manifests are read once per process (every
// server start applies them; the JSON is shared and must not be modified).
func Bundle(channel string) ([]BundleCRD, error) {
	read, ok := bundles[channel]
	if !ok {
		return nil, fmt.Errorf("gateway API channel %q: must be %q or %q", channel, ChannelStandard, ChannelExperimental)
	}
	out, err := read()
	return slices.Clone(out), err
}

var bundles = map[string]func() ([]BundleCRD, error){
	ChannelStandard:     sync.OnceValues(func() ([]BundleCRD, error) { return readBundle(ChannelStandard) }),
	ChannelExperimental: sync.OnceValues(func() ([]BundleCRD, error) { return readBundle(ChannelExperimental) }),
}

// readBundle reads a channel's manifests from the embedded release.
func readBundle(channel string) ([]BundleCRD, error) {
	dir := path.Join("crds", channel)
	entries, err := bundleFS.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []BundleCRD
	for _, e := range entries {
		b, err := bundleFS.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", e.Name(), err)
			}
			js, err := yaml.YAMLToJSON(doc)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", e.Name(), err)
			}
			if len(bytes.TrimSpace(js)) == 0 || string(js) == "null" {
				continue
			}
			var crd apiextensionsv1.CustomResourceDefinition // only its TypeMeta and metadata are read
			if err := json.Unmarshal(js, &struct {
				*metav1.TypeMeta   `json:",inline"`
				*metav1.ObjectMeta `json:"metadata"`
			}{&crd.TypeMeta, &crd.ObjectMeta}); err != nil {
				return nil, fmt.Errorf("reading %s: %w", e.Name(), err)
			}
			if crd.Kind != "CustomResourceDefinition" {
				continue
			}
			out = append(out, BundleCRD{Name: crd.Name, Channel: crd.Annotations[ChannelAnnotation], JSON: js})
		}
	}
	slices.SortFunc(out, func(a, b BundleCRD) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// waitEstablished polls the named CRDs until each is Established.
func waitEstablished(ctx context.Context, crds CRDs, names []string) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for _, name := range names {
		for {
			c, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err == nil && Established(c) {
				break
			}
			select {
			case <-ctx.Done():
				if err == nil {
					err = errors.New("not Established")
				}
				return fmt.Errorf("waiting for CustomResourceDefinition %q: %w (%w)", name, err, ctx.Err())
			case <-t.C:
			}
		}
	}
	return nil
}

// Established reports whether the CRD's Established condition is True.
func Established(c *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// CRDs is the part of the apiextensions client Install uses
// (apiextensionsv1client.CustomResourceDefinitionInterface satisfies it).
type CRDs interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*apiextensionsv1.CustomResourceDefinition, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*apiextensionsv1.CustomResourceDefinition, error)
}

// Install applies the bundle's CRDs of a channel with server-side apply
// (field manager FieldManager, forcing conflicts, as an add-on installer
// does), so a server that restarts re-applies them as a no-op and a CRD edited
// by hand is put back. Following the bundle's safe-upgrades policy, it
// refuses to apply an experimental CRD over a standard one; every CRD is still
// tried and the refusals and failures are returned together. It returns once
// every CRD it applied is Established (or ctx ends), so a server that is up
// serves the Gateway API kinds: `kubectl get gateways` right after `lab up`
// finds the resource, and nothing writes the CRDs' status after Install.
func Install(ctx context.Context, crds CRDs, channel string, log *slog.Logger) error {
	bundle, err := Bundle(channel)
	if err != nil {
		return err
	}
	var errs []error
	var applied []string
	for _, c := range bundle {
		if c.Channel == ChannelExperimental {
			old, err := crds.Get(ctx, c.Name, metav1.GetOptions{})
			switch {
			case err == nil && old.Annotations[ChannelAnnotation] != ChannelExperimental:
				errs = append(errs, fmt.Errorf("applying CustomResourceDefinition %q: installing experimental CRDs on top of standard channel CRDs is prohibited (the bundle's safe-upgrades policy); delete the Gateway API CRDs to switch channels", c.Name))
				continue
			case err != nil && !apierrors.IsNotFound(err):
				errs = append(errs, fmt.Errorf("reading CustomResourceDefinition %q: %w", c.Name, err))
				continue
			}
		}
		force := true
		if _, err := crds.Patch(ctx, c.Name, types.ApplyPatchType, c.JSON, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}); err != nil {
			errs = append(errs, fmt.Errorf("applying CustomResourceDefinition %q: %w", c.Name, err))
			continue
		}
		applied = append(applied, c.Name)
	}
	if err := waitEstablished(ctx, crds, applied); err != nil {
		errs = append(errs, err)
	}
	if log != nil {
		log.Debug("applied the Gateway API bundle", "component", "gateway", "version", BundleVersion, "channel", channel, "crds", len(bundle), "errors", len(errs))
	}
	return errors.Join(errs...)
}
