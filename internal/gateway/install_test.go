package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/apiservertest"
	"github.com/minikit/minikit/internal/testutil"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The embedded files are the release's, byte for byte.
func TestBundleIsTheReleaseUnmodified(t *testing.T) {
	mod := testutil.ModuleDir(t, "sigs.k8s.io/gateway-api@"+BundleVersion)
	for _, ch := range []string{ChannelStandard, ChannelExperimental} {
		want, _ := filepath.Glob(filepath.Join(mod, "config", "crd", ch, "*.yaml"))
		var n int
		for _, f := range want {
			if filepath.Base(f) == "kustomization.yaml" {
				continue
			}
			n++
			up, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := bundleFS.ReadFile("crds/" + ch + "/" + filepath.Base(f))
			if err != nil {
				t.Fatalf("%s/%s is not embedded: %v", ch, filepath.Base(f), err)
			}
			if string(up) != string(ours) {
				t.Errorf("%s/%s differs from the release", ch, filepath.Base(f))
			}
		}
		if got, _ := bundleFS.ReadDir("crds/" + ch); len(got) != n {
			t.Errorf("%s: %d files embedded, the release has %d", ch, len(got), n)
		}
	}
}

func TestBundleHoldsTheChannelsCRDs(t *testing.T) {
	for _, tc := range []struct {
		channel string
		want    []string // a few names that must be there
		absent  []string
		count   int
	}{
		{ChannelStandard, []string{"gatewayclasses.gateway.networking.k8s.io", "httproutes.gateway.networking.k8s.io", "referencegrants.gateway.networking.k8s.io"},
			[]string{"xmeshes.gateway.networking.x-k8s.io"}, 10},
		{ChannelExperimental, []string{"httproutes.gateway.networking.k8s.io", "xmeshes.gateway.networking.x-k8s.io"}, nil, 13},
	} {
		b, err := Bundle(tc.channel)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, c := range b {
			names[c.Name] = true
			if c.Channel != tc.channel {
				t.Errorf("%s: %s has channel %q", tc.channel, c.Name, c.Channel)
			}
			if !strings.Contains(string(c.JSON), `"`+BundleAnnotation+`":"`+BundleVersion+`"`) {
				t.Errorf("%s: %s lacks %s=%s", tc.channel, c.Name, BundleAnnotation, BundleVersion)
			}
		}
		if len(b) != tc.count {
			t.Errorf("%s: %d CRDs, want %d (the ValidatingAdmissionPolicy is not one)", tc.channel, len(b), tc.count)
		}
		for _, n := range tc.want {
			if !names[n] {
				t.Errorf("%s: %s missing", tc.channel, n)
			}
		}
		for _, n := range tc.absent {
			if names[n] {
				t.Errorf("%s: %s should not be there", tc.channel, n)
			}
		}
	}
	if _, err := Bundle("beta"); err == nil || !strings.Contains(err.Error(), `"beta"`) {
		t.Errorf("Bundle(beta) = %v, want an error naming the channel", err)
	}
}

// Install on a real API server: the CRDs become Established, a second
// Install (a server restart) changes nothing, and experimental over standard
// is refused as the bundle's policy refuses it.
func TestInstallIsIdempotentAndGuardsTheChannel(t *testing.T) {
	api := apiservertest.Start(t)
	cs, err := apiextensionsclient.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := cs.ApiextensionsV1().CustomResourceDefinitions()
	ctx := context.Background()
	if err := Install(ctx, crds, ChannelStandard, testutil.Logger(t)); err != nil {
		t.Fatal(err)
	}
	bundle, _ := Bundle(ChannelStandard)
	rvs := map[string]string{}
	testutil.Eventually(t, 30*time.Second, "every bundle CRD Established", func() error {
		for _, c := range bundle {
			got, err := crds.Get(ctx, c.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !Established(got) {
				return errNotEstablished(c.Name)
			}
			rvs[c.Name] = got.ResourceVersion
		}
		return nil
	})
	if err := Install(ctx, crds, ChannelStandard, nil); err != nil {
		t.Fatalf("second Install: %v", err)
	}
	for _, c := range bundle {
		got, err := crds.Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != rvs[c.Name] {
			t.Errorf("%s: resourceVersion %s → %s; a re-apply of the same bundle must be a no-op", c.Name, rvs[c.Name], got.ResourceVersion)
		}
		if got.Annotations[BundleAnnotation] != BundleVersion {
			t.Errorf("%s: bundle-version %q", c.Name, got.Annotations[BundleAnnotation])
		}
	}
	err = Install(ctx, crds, ChannelExperimental, nil)
	if err == nil || !strings.Contains(err.Error(), "experimental CRDs on top of standard channel CRDs is prohibited") {
		t.Fatalf("experimental over standard: %v", err)
	}
	got, _ := crds.Get(ctx, "httproutes.gateway.networking.k8s.io", metav1.GetOptions{})
	if got.Annotations[ChannelAnnotation] != ChannelStandard {
		t.Errorf("httproutes channel is %q after a refused experimental install", got.Annotations[ChannelAnnotation])
	}
	// The experimental-only CRDs have no standard one to protect.
	if _, err := crds.Get(ctx, "xmeshes.gateway.networking.x-k8s.io", metav1.GetOptions{}); err != nil {
		t.Errorf("xmeshes: %v", err)
	}
}

type errNotEstablished string

func (e errNotEstablished) Error() string { return string(e) + " is not Established" }
