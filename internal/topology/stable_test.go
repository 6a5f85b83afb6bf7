package topology

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestStable: the same lab made again — another lab name, other pod name
// suffixes, sandbox names, veth hash names, MACs, interface indexes,
// ClusterIPs and allocated NodePorts — draws the same stable picture, and
// the stable picture has none of those.
func TestStable(t *testing.T) {
	b, err := os.ReadFile("testdata/lab.json")
	if err != nil {
		t.Fatal(err)
	}
	var tr []byte
	if tr, err = os.ReadFile("testdata/trace-nodeport.json"); err != nil {
		t.Fatal(err)
	}
	again := strings.NewReplacer(
		"gg1-", "other-",
		"65d8764c9-fzv96", "7f9b6c5d4-abcde", "65d8764c9-j49p2", "7f9b6c5d4-fghij", "65d8764c9-m7ffq", "7f9b6c5d4-klmno",
		"65d8764c9", "7f9b6c5d4",
		"mk-b7157e-", "mk-0f0f0f-", "mk-eda45b-", "mk-1e1e1e-",
		"veth34398ce8", "veth00000001", "vethc81f33c5", "veth00000002", "vethc0a57aa2", "veth00000003",
		"10.104.194.99", "10.111.1.1", "10.100.212.6", "10.110.2.2", "31716", "32123",
		`"index": 4`, `"index": 9`,
		"0a:58:0a:f4", "0a:58:0a:aa",
	)
	var g1, g2 Graph
	if err := json.Unmarshal(b, &g1); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(again.Replace(string(b))), &g2); err != nil {
		t.Fatal(err)
	}
	g2.Lab = "other"
	r1, r2 := loadTrace(t, "nodeport"), loadTrace(t, "nodeport")
	if err := json.Unmarshal([]byte(again.Replace(string(tr))), r2); err != nil {
		t.Fatal(err)
	}
	s1, h1 := Stable(&g1, PathOf(&g1, r1, 1))
	s2, h2 := Stable(&g2, PathOf(&g2, r2, 1))
	var svg1, svg2, j1, j2 bytes.Buffer
	WriteSVG(&svg1, s1, h1)
	WriteSVG(&svg2, s2, h2)
	WriteJSON(&j1, s1)
	WriteJSON(&j2, s2)
	if svg1.String() != svg2.String() {
		t.Errorf("the same lab made again draws another stable picture:\n%s\n---\n%s", svg1.String(), svg2.String())
	}
	if j1.String() != j2.String() {
		t.Errorf("stable JSON differs:\n%s\n---\n%s", j1.String(), j2.String())
	}
	out := svg1.String() + j1.String()
	for _, h := range h1 {
		out += h.Element + " " + h.Label + "\n"
	}
	for _, volatile := range []string{"gg1", "fzv96", "65d8764c9", "mk-", "veth34398ce8", "vethc81f33c5", "10.104.194.99", "31716", "0a:58", "fe80:"} {
		if strings.Contains(out, volatile) {
			t.Errorf("the stable picture still has %q", volatile)
		}
	}
	for _, kept := range []string{"default/hostnames-1", "default/hostnames-3", "veth-hostnames-3", "80:30007/TCP", "10.96.0.10", "10.244.1.2", "DNAT to 10.244.1.2:9376"} {
		if !strings.Contains(out, kept) {
			t.Errorf("the stable picture lacks %q", kept)
		}
	}
	ids := elementIDs(s1)
	for _, h := range h1 {
		if ids[h.Element] != h.Kind {
			t.Errorf("stable hop %+v names no %s of the stable graph", h, h.Kind)
		}
	}
}
