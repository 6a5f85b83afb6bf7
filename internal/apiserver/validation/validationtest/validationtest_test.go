package validationtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseKeepsTheManifestAsWritten(t *testing.T) {
	f := filepath.Join(t.TempDir(), "service.yaml")
	const doc = "# name: a\n# field: spec.ports[0].port\n# message: must be between 1 and 65535, inclusive\n" +
		"apiVersion: v1\nkind: Service\n# a comment in the manifest stays\nmetadata:\n  name: web\n---\n" +
		"# name: b\n# field: spec.ports[0].name\n# message: `Duplicate value: \"http\"`\napiVersion: v1\nkind: Service\n"
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := parse(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []BadManifest{
		{Name: "a", Field: "spec.ports[0].port", Message: "must be between 1 and 65535, inclusive",
			YAML: "apiVersion: v1\nkind: Service\n# a comment in the manifest stays\nmetadata:\n  name: web\n"},
		{Name: "b", Field: "spec.ports[0].name", Message: "`Duplicate value: \"http\"`", YAML: "apiVersion: v1\nkind: Service\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d manifests, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("manifest %d:\ngot  %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestParseRejectsAnIncompleteDocument(t *testing.T) {
	for name, doc := range map[string]string{
		"no message":     "# name: a\n# field: spec\napiVersion: v1\nkind: Service\n",
		"no manifest":    "# name: a\n# field: spec\n# message: m\n",
		"unknown header": "# name: a\n# fields: spec\n# message: m\napiVersion: v1\n",
	} {
		f := filepath.Join(t.TempDir(), "x.yaml")
		if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := parse(f); err == nil || !strings.Contains(err.Error(), "x.yaml:") {
			t.Errorf("%s: parse error %v, want one naming the file and line", name, err)
		}
	}
}

// The validation package's own files load: 128 manifests when they moved
// out of the code, with unique names.
func TestTheValidationTestdataLoads(t *testing.T) {
	if n := len(BadManifests(t, "../testdata")); n < 128 {
		t.Errorf("%d bad manifests in ../testdata, want at least 128", n)
	}
}
