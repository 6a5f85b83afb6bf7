// Package validationtest loads the bad manifests of
// internal/apiserver/validation/testdata: manifests kubectl users commonly
// get wrong, each with the field path and message Kubernetes answers with.
// The validation tests check them against Validate; the API server's tests
// post them and expect a 422 naming the same field. They are test data, so
// they live in files rather than in the validation package's code.
//
// It does not import package validation, so that package's own tests can
// import it; only tests import it.
package validationtest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BadManifest is an invalid manifest and what the API must say about it.
// YAML is a complete manifest (apiVersion, kind, no metadata.namespace, so
// the server puts namespaced objects in "default") that is invalid for one
// reason only; every error Validate returns for it, after Default, is on
// Field, and one of them contains Message.
type BadManifest struct{ Name, YAML, Field, Message string }

// BadManifests reads every dir/*.yaml (dir is validation's testdata
// directory, relative to the test's package). A file holds the bad
// manifests of one kind as YAML documents separated by "---" lines; each
// document starts with its expectations as comment lines:
//
//	# name: service-port-zero
//	# field: spec.ports[0].port
//	# message: must be between 1 and 65535, inclusive
//	apiVersion: v1
//	kind: Service
//	...
//
// YAML is the rest of the document, exactly as written. Names are unique.
func BadManifests(t testing.TB, dir string) []BadManifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad manifests in %s/*.yaml (%v)", dir, err)
	}
	var all []BadManifest
	seen := map[string]string{}
	for _, f := range files {
		ms, err := parse(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if other, dup := seen[m.Name]; dup {
				t.Fatalf("bad manifest %q is in %s and %s", m.Name, other, f)
			}
			seen[m.Name] = f
		}
		all = append(all, ms...)
	}
	return all
}

// parse reads the documents of one file.
func parse(file string) ([]BadManifest, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []BadManifest
	var cur *BadManifest
	var yaml strings.Builder
	line := 0
	finish := func() error {
		if cur == nil {
			return nil
		}
		cur.YAML = yaml.String()
		if cur.Name == "" || cur.Field == "" || cur.Message == "" || strings.TrimSpace(cur.YAML) == "" {
			return fmt.Errorf("%s:%d: document %q lacks its name, field, message or manifest", file, line, cur.Name)
		}
		out = append(out, *cur)
		cur = nil
		yaml.Reset()
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line++
		text := sc.Text()
		if text == "---" {
			if err := finish(); err != nil {
				return nil, err
			}
			continue
		}
		if cur == nil {
			cur = &BadManifest{}
		}
		if yaml.Len() == 0 {
			if key, value, ok := header(text); ok {
				switch key {
				case "name":
					cur.Name = value
				case "field":
					cur.Field = value
				case "message":
					cur.Message = value
				default:
					return nil, fmt.Errorf("%s:%d: unknown header %q", file, line, key)
				}
				continue
			}
		}
		yaml.WriteString(text + "\n")
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return out, nil
}

// header splits a "# key: value" line.
func header(line string) (key, value string, ok bool) {
	rest, ok := strings.CutPrefix(line, "# ")
	if !ok {
		return "", "", false
	}
	key, value, ok = strings.Cut(rest, ": ")
	return key, value, ok && !strings.Contains(key, " ")
}
