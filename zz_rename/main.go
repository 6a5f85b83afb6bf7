// Temporary: renames package-level identifiers (PKGPATH.OLD=NEW ...) everywhere they are used.
package main

import (
	"fmt"
	"go/token"
	"go/types"
	"os"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

type edit struct {
	off, n int
	text   string
}

func main() {
	ren := map[string]string{}
	for _, a := range os.Args[1:] {
		k, v, _ := strings.Cut(a, "=")
		ren[k] = v
	}
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo, Tests: true}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		panic(err)
	}
	wd, _ := os.Getwd()
	edits := map[string]map[int]edit{}
	add := func(fset *token.FileSet, pos token.Pos, name string, obj types.Object) {
		if obj == nil || obj.Pkg() == nil || obj.Parent() != obj.Pkg().Scope() {
			return
		}
		nn, ok := ren[obj.Pkg().Path()+"."+obj.Name()]
		if !ok {
			return
		}
		f := fset.File(pos)
		if !strings.HasPrefix(f.Name(), wd+"/") {
			return
		}
		if edits[f.Name()] == nil {
			edits[f.Name()] = map[int]edit{}
		}
		off := f.Offset(pos)
		edits[f.Name()][off] = edit{off, len(name), nn}
	}
	for _, p := range pkgs {
		for id, obj := range p.TypesInfo.Uses {
			add(p.Fset, id.Pos(), id.Name, obj)
		}
		for id, obj := range p.TypesInfo.Defs {
			add(p.Fset, id.Pos(), id.Name, obj)
		}
	}
	for f, es := range edits {
		b, _ := os.ReadFile(f)
		var l []edit
		for _, e := range es {
			l = append(l, e)
		}
		sort.Slice(l, func(i, j int) bool { return l[i].off > l[j].off })
		for _, e := range l {
			b = append(b[:e.off], append([]byte(e.text), b[e.off+e.n:]...)...)
		}
		os.WriteFile(f, b, 0o644)
	}
	fmt.Println("files:", len(edits))
}
