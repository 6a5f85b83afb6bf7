package kubeproxy

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

// The conntrack timeouts kube-proxy sets at start with its default
// configuration; a failure of one does not keep the other from being set.
func TestSetConntrackSysctls(t *testing.T) {
	got := map[string]string{}
	err := SetConntrackSysctls(func(name, value string) error {
		got[name] = value
		if strings.HasSuffix(name, "established") {
			return errors.New("read-only file system")
		}
		return nil
	}, false)
	want := map[string]string{
		"net/netfilter/nf_conntrack_tcp_timeout_established": "86400",
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "3600",
	}
	if !maps.Equal(got, want) {
		t.Errorf("set %v, want %v", got, want)
	}
	if err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("error = %v, want the failed write's", err)
	}
}

// With --conntrack-tcp-be-liberal (the nftables mode's lab setting) the
// liberal TCP tracking is switched on too.
func TestSetConntrackSysctlsBeLiberal(t *testing.T) {
	got := map[string]string{}
	if err := SetConntrackSysctls(func(name, value string) error { got[name] = value; return nil }, true); err != nil {
		t.Fatal(err)
	}
	if got["net/netfilter/nf_conntrack_tcp_be_liberal"] != "1" || len(got) != 3 {
		t.Errorf("set %v, want the timeouts and nf_conntrack_tcp_be_liberal=1", got)
	}
}
