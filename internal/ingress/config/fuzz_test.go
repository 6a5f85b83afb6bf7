package config

import (
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

// FuzzRoute builds a configuration from two Ingress paths and hosts taken from
// the fuzzer (any text: Build must cope with what the API would refuse), then
// routes a fuzzed request host and path through it: CleanPath, Server and Match
// never panic; CleanPath's result is absolute, has no "//", "/./" or "/../"
// and is stable; Match always answers; outside regex mode the answer is the
// Kubernetes rule (an Exact path equal to the request, else the longest
// element-wise Prefix match) and never a location whose path does not match.
//
//	go test -run XXX -fuzz FuzzRoute -fuzztime 60s ./internal/ingress/config/
func FuzzRoute(f *testing.F) {
	f.Add("foo.bar.com", "/foo", uint8(1), "/foo/bar", uint8(0), false, "foo.bar.com", "/foo/bar/baz")
	f.Add("*.bar.com", "/", uint8(1), "/aaa", uint8(0), false, "x.bar.com", "/aaa/../aaa/%62")
	f.Add("", "/tea(/|$)(.*)", uint8(2), "/coffee", uint8(1), true, "cafe", "/TEA/x")
	f.Add("a.b", "/a/", uint8(1), "/a", uint8(0), false, "a.b", "//a/./b/")
	f.Add("a.b", "/%2e%2e", uint8(2), "/(", uint8(2), true, "A.B", "/..")
	f.Add("a.b", "/x", uint8(0), "/x/", uint8(1), false, "a.b", "/x%00")
	f.Fuzz(func(t *testing.T, host, p1 string, t1 uint8, p2 string, t2 uint8, regex bool, reqHost, reqPath string) {
		types := []networkingv1.PathType{networkingv1.PathTypeExact, networkingv1.PathTypePrefix, networkingv1.PathTypeImplementationSpecific}
		w := newWorld()
		ing := w.ingress("fuzz", host, path{types[int(t1)%3], p1}, path{types[int(t2)%3], p2})
		if regex {
			ing.Annotations = map[string]string{AnnotationUseRegex: "true"}
		}
		c := Build(w.in)

		clean, ok := CleanPath(reqPath)
		if ok {
			if !strings.HasPrefix(clean, "/") {
				t.Fatalf("CleanPath(%q) = %q, not absolute", reqPath, clean)
			}
			for _, bad := range []string{"//", "/./", "/../"} {
				if strings.Contains(clean, bad) {
					t.Fatalf("CleanPath(%q) = %q contains %q", reqPath, clean, bad)
				}
			}
			if strings.HasSuffix(clean, "/..") || strings.HasSuffix(clean, "/.") {
				t.Fatalf("CleanPath(%q) = %q ends in a dot segment", reqPath, clean)
			}
			if !strings.Contains(clean, "%") {
				if again, ok := CleanPath(clean); !ok || again != clean {
					t.Fatalf("CleanPath not stable: %q -> %q -> %q (%v)", reqPath, clean, again, ok)
				}
			}
		} else {
			clean = "/"
		}
		s := c.Server(strings.ToLower(reqHost))
		if s == nil {
			t.Fatalf("no server for %q", reqHost)
		}
		l := s.Match(clean)
		if l == nil {
			t.Fatalf("Match(%q) = nil", clean)
		}
		l.Rewrite(clean)
		if s.UseRegex || l == s.Root {
			return
		}
		// Literal mode: check the answer against the rule itself.
		if !l.matches(clean) {
			t.Fatalf("Match(%q) answered %s %q, which does not match", clean, l.PathType, l.Path)
		}
		best := -1
		for _, o := range s.Locations {
			if o.PathType == networkingv1.PathTypeExact && o.Path == clean {
				if l.PathType != networkingv1.PathTypeExact || l.Path != clean {
					t.Fatalf("Match(%q) answered %s %q over Exact %q", clean, l.PathType, l.Path, o.Path)
				}
				return
			}
			if o.PathType != networkingv1.PathTypeExact && o.matches(clean) && len(o.norm) > best {
				best = len(o.norm)
			}
		}
		if l.PathType != networkingv1.PathTypeExact && len(l.norm) != best {
			t.Fatalf("Match(%q) answered Prefix %q, but a longer prefix (%d bytes) matches", clean, l.Path, best)
		}
	})
}
