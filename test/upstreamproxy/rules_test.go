package upstreamproxy

import (
	"strings"
	"testing"
)

// Compare finds a planted difference in an ordered chain, ignores the order
// of unordered ones (but not the localhost NodePort rule's place), compares
// built-in chains by their KUBE-* jumps, and leaves excluded chains out.
func TestCompare(t *testing.T) {
	const base = `*nat
:PREROUTING ACCEPT [3:180]
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-NWPLCY-X - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
%s
-A KUBE-SERVICES -d 10.96.0.2 -j KUBE-SVC-A
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
%s
-A KUBE-SVC-A -j KUBE-SEP-1
-A KUBE-NWPLCY-X -j ACCEPT
COMMIT
`
	parse := func(svc1, nodeports, extra string) Save {
		t.Helper()
		text := strings.Replace(base, "%s", svc1, 1)
		text = strings.Replace(text, "%s", nodeports, 1)
		text = strings.Replace(text, "-A KUBE-NWPLCY-X -j ACCEPT", extra, 1)
		s, err := ParseSave(text)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	np := "-A KUBE-NODEPORTS -m comment --comment a -d 127.0.0.0/8 --dport 30001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-SVC-A\n" +
		"-A KUBE-NODEPORTS -m comment --comment a --dport 30001 -j KUBE-SVC-A\n-A KUBE-NODEPORTS --dport 30002 -j KUBE-SVC-A"
	npSwapped := "-A KUBE-NODEPORTS --dport 30002 -j KUBE-SVC-A\n" +
		"-A KUBE-NODEPORTS -m comment --comment a -d 127.0.0.0/8 --dport 30001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-SVC-A\n" +
		"-A KUBE-NODEPORTS -m comment --comment a --dport 30001 -j KUBE-SVC-A"
	npWrongPair := "-A KUBE-NODEPORTS -m comment --comment a --dport 30001 -j KUBE-SVC-A\n" +
		"-A KUBE-NODEPORTS -m comment --comment a -d 127.0.0.0/8 --dport 30001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-SVC-A\n-A KUBE-NODEPORTS --dport 30002 -j KUBE-SVC-A"
	excl := []Exclusion{{func(_, c string) bool { return strings.HasPrefix(c, "KUBE-NWPLCY-") }, "policy"}}
	a := parse("-A KUBE-SERVICES -d 10.96.0.1 -j KUBE-SVC-A", np, "-A KUBE-NWPLCY-X -j ACCEPT")
	cases := []struct {
		name  string
		other Save
		want  []string // differing chains
	}{
		{"same", parse("-A KUBE-SERVICES -d 10.96.0.1 -j KUBE-SVC-A", np, "-A KUBE-NWPLCY-X -j ACCEPT"), nil},
		{"unordered chains in another order", parse("-A KUBE-SERVICES -d 10.96.0.1 -j KUBE-SVC-A", npSwapped, "-A KUBE-NWPLCY-X -j DROP"), nil},
		{"a rule differs", parse("-A KUBE-SERVICES -d 10.96.0.9 -j KUBE-SVC-A", np, ""), []string{"nat/KUBE-SERVICES"}},
		{"localhost rule after the general one", parse("-A KUBE-SERVICES -d 10.96.0.1 -j KUBE-SVC-A", npWrongPair, ""), []string{"nat/KUBE-NODEPORTS"}},
		{"a chain only one side has", parse("-A KUBE-SERVICES -d 10.96.0.1 -j KUBE-SVC-A", np, ":KUBE-FIREWALL - [0:0]"), []string{"nat/KUBE-FIREWALL"}},
		{"a jump from a built-in chain", parse("-A KUBE-SERVICES -d 10.96.0.1 -j KUBE-SVC-A", np, "-A PREROUTING -j KUBE-NODEPORTS"), []string{"nat/PREROUTING"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range Compare(a, tc.other, []string{"nat"}, excl) {
				got = append(got, d.Table+"/"+d.Chain)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("differing chains %v, want %v", got, tc.want)
			}
		})
	}
}
