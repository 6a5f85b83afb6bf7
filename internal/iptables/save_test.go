package iptables

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The rules iptsim walks in its tests, dumped from lab nodes with
// iptables-save (-c for some): ParseSave reads every line, and printing what
// it read as iptables-save prints gives the file back, comments aside. The
// runner's view of the same text (parseSave) has the same chains, policies
// and rules.
func TestParseSaveReadsSavedLabRules(t *testing.T) {
	files, err := filepath.Glob("iptsim/testdata/*.save")
	if err != nil || len(files) == 0 {
		t.Fatalf("no save files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			tables, err := ParseSave(string(b))
			if err != nil {
				t.Fatal(err)
			}
			var order []string
			var want []string
			counters := false
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if strings.HasPrefix(l, "#") {
					continue
				}
				if strings.HasPrefix(l, "*") {
					order = append(order, l[1:])
				}
				counters = counters || strings.HasPrefix(l, "[")
				want = append(want, l)
			}
			var got []string
			for _, name := range order {
				tbl := tables[name]
				got = append(got, "*"+name)
				for _, c := range tbl.Chains {
					if !c.Declared {
						t.Errorf("%s/%s: not declared", name, c.Name)
					}
					got = append(got, fmt.Sprintf(":%s %s [%d:%d]", c.Name, c.Policy, c.Packets, c.Bytes))
				}
				for _, c := range tbl.Chains {
					for _, r := range c.Rules {
						if !reflect.DeepEqual(r.Args, SplitRule(r.Text)) || r.Args[1] != c.Name {
							t.Errorf("%s/%s: args %q of %q", name, c.Name, r.Args, r.Text)
						}
						if counters {
							got = append(got, fmt.Sprintf("[%d:%d] %s", r.Packets, r.Bytes, r.Text))
						} else {
							got = append(got, r.Text)
						}
					}
				}
				got = append(got, "COMMIT")
			}
			if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
				t.Errorf("printed back:\n%s\nwant:\n%s", g, w)
			}

			// The runner's view, keeping every chain.
			state := parseSave(b, order, func(string, string) bool { return true })
			for _, name := range order {
				for _, c := range tables[name].Chains {
					sc := state[name].Chain(c.Name)
					if sc == nil {
						t.Errorf("runner lost %s/%s", name, c.Name)
						continue
					}
					if sc.Policy != c.Policy || len(sc.Rules) != len(c.Rules) {
						t.Errorf("runner's %s/%s: policy %s, %d rules; want %s, %d", name, c.Name, sc.Policy, len(sc.Rules), c.Policy, len(c.Rules))
					}
				}
			}
		})
	}
}

// The forms the two callers rely on, and the lines ParseSave refuses.
func TestParseSaveForms(t *testing.T) {
	save := `*nat
:PREROUTING ACCEPT [6:360]
:UNUSED - [0:0]
[2:120] -A PREROUTING -m comment --comment "two words" -j KUBE-SERVICES
-A KUBE-SERVICES -j RETURN
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -d 10.96.0.1/32 -j RETURN
COMMIT
*filter
:FORWARD DROP
COMMIT
`
	tables, err := ParseSave(save)
	if err != nil {
		t.Fatal(err)
	}
	nat := tables["nat"]
	if got := fmt.Sprint(names(nat)); got != "[PREROUTING UNUSED KUBE-SERVICES]" {
		t.Errorf("nat chains %s", got)
	}
	pre := nat.Chain("PREROUTING")
	if pre.Policy != "ACCEPT" || pre.Packets != 6 || pre.Bytes != 360 || len(pre.Rules) != 1 {
		t.Errorf("PREROUTING %+v", pre)
	}
	if r := pre.Rules[0]; r.Packets != 2 || r.Bytes != 120 || r.Args[5] != "two words" ||
		r.Text != `-A PREROUTING -m comment --comment "two words" -j KUBE-SERVICES` {
		t.Errorf("rule %+v", r)
	}
	// Declared after a rule named it: the declaration starts it over, as
	// iptables-restore flushes a chain it declares.
	if svc := nat.Chain("KUBE-SERVICES"); !svc.Declared || len(svc.Rules) != 1 || svc.Rules[0].Text != "-A KUBE-SERVICES -d 10.96.0.1/32 -j RETURN" {
		t.Errorf("KUBE-SERVICES %+v", svc)
	}
	if fwd := tables["filter"].Chain("FORWARD"); fwd.Policy != "DROP" || fwd.Packets != 0 {
		t.Errorf("FORWARD %+v", fwd)
	}

	for bad, want := range map[string]string{
		"-A X -j ACCEPT\n":           `line 1: rule outside a table: "-A X -j ACCEPT"`,
		":X - [0:0]\n":               `line 1: chain outside a table: ":X - [0:0]"`,
		"*nat\n[1] -A X\n":           `line 2: cannot parse counters "[1]"`,
		"*nat\n[1:1 -A X\n":          `line 2: cannot parse counters in "[1:1 -A X"`,
		"*nat\nbogus\n":              `line 2: cannot parse "bogus"`,
		"*nat\n:\n":                  `line 2: cannot parse ":"`,
		"*nat\nbogus\n-A X -j Y\n-N": `line 2: cannot parse "bogus"`,
	} {
		tables, err := ParseSave(bad)
		if err == nil || err.Error() != want {
			t.Errorf("ParseSave(%q) = %v, want %s", bad, err, want)
		}
		if strings.Contains(bad, "-A X -j Y") && len(tables["nat"].Chain("X").Rules) != 1 {
			t.Errorf("ParseSave(%q) dropped the lines after the bad one", bad)
		}
	}
}

func names(t *SavedTable) []string {
	var n []string
	for _, c := range t.Chains {
		n = append(n, c.Name)
	}
	return n
}
