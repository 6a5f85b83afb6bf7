package netpol

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// Names of what the enforcer owns (np-contract: the service proxy treats
// every chain with these prefixes as not its own).
const (
	ChainHook       = "KUBE-NWPLCY-FORWARD"
	PrefixPolicy    = "KUBE-NWPLCY-"
	PrefixPod       = "KUBE-POD-FW-"
	PrefixSet       = "KUBE-NP-"
	PrefixSet6      = "KUBE-NP6-" // the IPv6 enforcer's sets
	hookComment     = "kubernetes network policy"
	markAllow       = "0x10000"
	markAllowMasked = markAllow + "/" + markAllow
)

// Owned reports whether an iptables chain is the enforcer's.
func Owned(chain string) bool {
	return strings.HasPrefix(chain, PrefixPolicy) || strings.HasPrefix(chain, PrefixPod)
}

// OwnedSet reports whether an ipset is the enforcer's, of either family.
func OwnedSet(name string) bool {
	return strings.HasPrefix(name, PrefixSet) || strings.HasPrefix(name, PrefixSet6)
}

// hash16 is the first 16 characters of the base32 sha256 of key, as
// kube-proxy names its chains: names stay within iptables' 28 characters
// (KUBE-NWPLCY- and KUBE-POD-FW- are 12) and ipset's 31 (KUBE-NP6- is 9).
func hash16(key string) string {
	sum := sha256.Sum256([]byte(key))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

func policyChain(ns, name, dir string) string { return PrefixPolicy + hash16(ns+"/"+name+"/"+dir) }
func podChain(ns, name, dir string) string    { return PrefixPod + hash16(ns+"/"+name+"/"+dir) }

// commentText makes s safe as the argument of --comment: printable ASCII
// without quotes or backslashes, at most 255 bytes (the xt_comment limit).
// Names come from the API, which validates them, but the enforcer must not
// trust that: nothing in an object may become iptables syntax.
func commentText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < 255; i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '\'' {
			c = '_'
		}
		b.WriteByte(c)
	}
	return b.String()
}

func comment(s string) string { return `-m comment --comment "` + commentText(s) + `"` }
