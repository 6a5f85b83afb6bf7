// Package layout holds the tests that keep the tree's shape: which package may
// import which (Go's internal/ rule keeps code outside the module out; these
// tests keep the components apart inside it) and that every exported
// identifier under internal/ is documented. They are unit-tier tests (see
// test/README.md): no root, they only run `go list` and parse the source.
package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/minikit/minikit"

// components are the packages that stand in for a Kubernetes component. They
// meet only through the API (STYLE rule 3): none imports another, nor the
// store, the wiring (cluster, lab) or the tools built on top (trace, topology,
// ui). Subpackages belong to their component (apiserver/validation is the API
// server's).
var components = []string{"apiserver", "controllers", "kubelet", "kubeproxy", "dns", "ingress", "loadbalancer", "netpol"}

// offLimits are the packages no component may depend on, with the components
// that may. (The rules bind components only: etcdserver, which is not one,
// uses the store too.)
var offLimits = map[string][]string{
	"store":    {"apiserver"},
	"cluster":  nil,
	"lab":      nil,
	"trace":    nil,
	"topology": nil,
	"ui":       nil,
}

// crossings are the component-to-component dependencies that remain, each
// with why and until when. Keys are "component -> dependency" (relative to the
// module). A crossing no package needs any more fails the test: remove it.
var crossings = map[string]string{}

// extraBans are further dependencies a package must not have, with why.
var extraBans = []struct {
	pkgs   []string // import paths relative to the module; "x/..." is x and below
	banned []string // import paths; "x/..." is x and below
	why    string
}{
	{[]string{"internal/ingress/..."}, []string{module + "/internal/cni/...", module + "/internal/iptables/...", module + "/internal/images/..."},
		"ingress is a reverse proxy: it does not touch the pod network, iptables or images"},
	{[]string{"internal/ingress/config", "internal/ingress/httpproxy", "internal/ingress/nginxconf"}, []string{"k8s.io/client-go/..."},
		"the ingress data plane and renderer work from a config.Config, whoever built it"},
	{[]string{"internal/dns"}, []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers"},
		"the DNS server stays lean: the clientset and informer factory (every API group) double a DNS-only process's memory by their init alone"},
}

// pkg is what `go list -json` says about one package of the module.
type pkg struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	CgoFiles     []string
	Imports      []string // direct, production files
	Deps         []string // transitive, production files
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string } // the package does not load: Deps are incomplete
}

func (p pkg) rel() string { return strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/") }

var (
	listOnce sync.Once
	listed   []pkg
	listErr  error
)

// packages runs `go list -json` on the whole module, once per test binary.
func packages(t *testing.T) []pkg {
	t.Helper()
	listOnce.Do(func() {
		cmd := exec.Command("go", "list", "-json", module+"/...")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			listErr = fmt.Errorf("go list: %v: %s", err, stderr.String())
			return
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p pkg
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				listErr = fmt.Errorf("decoding go list: %w", err)
				return
			}
			if p.Error != nil {
				listErr = fmt.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
				return
			}
			listed = append(listed, p)
		}
	})
	if listErr != nil {
		t.Fatal(listErr)
	}
	if len(listed) < 20 {
		t.Fatalf("go list found %d packages: not the whole module", len(listed))
	}
	return listed
}

// under says whether import path p is the package dir (relative to the
// module) or below it.
func under(p, dir string) bool {
	full := module + "/" + dir
	return p == full || strings.HasPrefix(p, full+"/")
}

// componentOf returns the component p belongs to, or "".
func componentOf(p string) string {
	for _, c := range components {
		if under(p, "internal/"+c) {
			return c
		}
	}
	return ""
}

// isTestHelper says whether p exists only for tests: the shared toolkit,
// the *test packages next to what they fake, everything under test/, and
// the public package for other people's tests with its subpackages.
func isTestHelper(p string) bool {
	return under(p, "internal/testutil") || under(p, "test") || under(p, "pkg/minikittest") ||
		strings.HasPrefix(p, module+"/") && strings.HasSuffix(p, "test")
}

// TestNothingImportsCmd: cmd/ holds main and its flags; everything else is a
// library that main wires, never the other way round.
func TestNothingImportsCmd(t *testing.T) {
	for _, p := range packages(t) {
		if under(p.ImportPath, "cmd") {
			continue
		}
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if under(imp, "cmd") {
				t.Errorf("%s imports %s: only cmd/ may", p.rel(), imp)
			}
		}
	}
}

// TestComponentsMeetOnlyThroughTheAPI: no component depends, even through
// another package, on another component or on an off-limits package.
func TestComponentsMeetOnlyThroughTheAPI(t *testing.T) {
	used := map[string]bool{}
	for _, p := range packages(t) {
		c := componentOf(p.ImportPath)
		if c == "" {
			continue
		}
		for _, dep := range p.Deps {
			if key := c + " -> " + strings.TrimPrefix(dep, module+"/"); crossings[key] != "" {
				used[key] = true
				continue
			}
			if d := componentOf(dep); d != "" && d != c {
				t.Errorf("%s (%s) depends on %s (%s): components meet only through the API", p.rel(), c, dep, d)
			}
			for off, allowed := range offLimits {
				if under(dep, "internal/"+off) && !slices.Contains(allowed, c) {
					t.Errorf("%s (%s) depends on %s", p.rel(), c, dep)
				}
			}
		}
	}
	for key := range crossings {
		if !used[key] {
			t.Errorf("crossing %q is no longer needed: remove it from crossings", key)
		}
	}
}

// TestExtraBans checks extraBans.
func TestExtraBans(t *testing.T) {
	for _, p := range packages(t) {
		for _, b := range extraBans {
			applies := false
			for _, dir := range b.pkgs {
				applies = applies || p.ImportPath == module+"/"+dir || matchesTree(p.ImportPath, module+"/"+dir)
			}
			if !applies {
				continue
			}
			for _, dep := range p.Deps {
				for _, banned := range b.banned {
					if dep == banned || matchesTree(dep, banned) {
						t.Errorf("%s depends on %s: %s", p.rel(), dep, b.why)
					}
				}
			}
		}
	}
}

// matchesTree says whether path p is in pattern "x/...": x or below.
func matchesTree(p, pattern string) bool {
	x, ok := strings.CutSuffix(pattern, "/...")
	return ok && (p == x || strings.HasPrefix(p, x+"/"))
}

// TestProductionCodeImportsNoTestHelpers: internal/testutil and the *test
// packages (fakes, in-process servers) are for _test.go files; a production
// package that depends on one ships test code in the binary.
func TestProductionCodeImportsNoTestHelpers(t *testing.T) {
	for _, p := range packages(t) {
		if isTestHelper(p.ImportPath) {
			continue
		}
		for _, dep := range p.Deps {
			if strings.HasPrefix(dep, module+"/") && isTestHelper(dep) {
				t.Errorf("%s depends on %s, a test helper", p.rel(), dep)
			}
		}
	}
}

// undocumentedAllowed lists, per package, exported identifiers that may stay
// undocumented, each with why. It is empty: every exported identifier of
// internal/ has a doc comment.
var undocumentedAllowed = map[string][]string{}

// TestExportedIdentifiersAreDocumented: every exported function, method (of
// an exported type), type, constant and variable in internal/'s production
// files has a doc comment (a grouped declaration's comment covers the group;
// a trailing line comment covers a constant or variable). Generated files are
// exempt.
func TestExportedIdentifiersAreDocumented(t *testing.T) {
	var missing []string
	for _, p := range packages(t) {
		if !under(p.ImportPath, "internal") {
			continue
		}
		var found []string
		fset := token.NewFileSet()
		for _, name := range slices.Concat(p.GoFiles, p.CgoFiles) {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if ast.IsGenerated(f) {
				continue
			}
			found = append(found, undocumented(f)...)
		}
		allowed := undocumentedAllowed[p.rel()]
		for _, id := range found {
			if slices.Contains(allowed, id) {
				continue
			}
			missing = append(missing, p.rel()+": "+id)
		}
		for _, id := range allowed {
			if !slices.Contains(found, id) {
				t.Errorf("%s: %s is documented (or gone) now: remove it from undocumentedAllowed", p.rel(), id)
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d exported identifiers without a doc comment:\n\t%s", len(missing), strings.Join(missing, "\n\t"))
	}
}

// undocumented returns the exported identifiers of f without a doc comment,
// methods as Type.Method.
func undocumented(f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Doc != nil {
				continue
			}
			if d.Recv == nil {
				out = append(out, d.Name.Name)
				continue
			}
			if recv := receiverName(d.Recv.List[0].Type); ast.IsExported(recv) {
				out = append(out, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			if d.Doc != nil {
				continue // documents the declaration, grouped or not
			}
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && s.Doc == nil {
						out = append(out, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && s.Doc == nil && s.Comment == nil {
							out = append(out, n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// receiverName is the type name of a method receiver: T, *T, T[P], *T[P].
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
