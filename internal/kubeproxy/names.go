package kubeproxy

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"

	"github.com/minikit/minikit/internal/iptables"
)

// Chain-name prefixes, as kube-proxy's iptables mode names them.
const (
	chainServices         = "KUBE-SERVICES"
	chainExternalServices = "KUBE-EXTERNAL-SERVICES"
	chainNodePorts        = "KUBE-NODEPORTS"
	chainPostrouting      = "KUBE-POSTROUTING"
	chainMarkMasq         = "KUBE-MARK-MASQ"
	chainForward          = "KUBE-FORWARD"
	chainProxyFirewall    = "KUBE-PROXY-FIREWALL"
	chainCanary           = "KUBE-PROXY-CANARY"
	// chainFirewall is kubelet's KUBE-FIREWALL, which kube-proxy also writes.
	chainFirewall = "KUBE-FIREWALL"

	prefixSVC = "KUBE-SVC-"
	prefixSVL = "KUBE-SVL-"
	prefixEXT = "KUBE-EXT-"
	prefixFW  = "KUBE-FW-"
	prefixSEP = "KUBE-SEP-"
)

// masqMark is 1<<14 printed with %#08x, exactly as kube-proxy writes it with its
// default masqueradeBit; iptables normalises it to 0x4000 when listing.
var masqMark = fmt.Sprintf("%#08x", 1<<14)

// portProtoHash is kube-proxy's recipe: the first 16 characters of the RFC 4648
// base32 encoding of sha256(servicePortName + protocol), where protocol is
// lower case and the pieces are concatenated without separators.
func portProtoHash(servicePortName, protocol string) string {
	sum := sha256.Sum256([]byte(servicePortName + protocol))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// endpointHash is portProtoHash with the endpoint ("ip:port") appended.
func endpointHash(servicePortName, protocol, endpoint string) string {
	sum := sha256.Sum256([]byte(servicePortName + protocol + endpoint))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// servicePortName is kube-proxy's ServicePortName.String(): "ns/name", plus
// ":port" only when the port is named.
func servicePortName(namespace, name, port string) string {
	if port == "" {
		return namespace + "/" + name
	}
	return namespace + "/" + name + ":" + port
}

// ownedChain reports whether a chain is one the service proxy creates: every
// KUBE-* chain but the network policy enforcer's (package netpol, which the
// proxy must not import): KUBE-NWPLCY-* and KUBE-POD-FW-*. The node agent's
// MINIKIT-* chains are not the proxy's either. Full syncs keep the chains that
// are not the proxy's, with the jumps into them, and Cleanup leaves them alone.
func ownedChain(name string) bool {
	return strings.HasPrefix(name, "KUBE-") && !strings.HasPrefix(name, "KUBE-NWPLCY-") && !strings.HasPrefix(name, "KUBE-POD-FW-")
}

// ServiceChain reports whether a chain is a per-service or per-endpoint chain,
// the kind partial syncs create and delete.
func ServiceChain(name string) bool {
	for _, p := range []string{prefixSVC, prefixSVL, prefixEXT, prefixFW, prefixSEP} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// probability formats 1/n as kube-proxy does ("%0.10f").
func probability(n int) string { return fmt.Sprintf("%0.10f", 1.0/float64(n)) }

// policyHook reports whether a built-in chain's rule is the network policy
// enforcer's jump into KUBE-NWPLCY-FORWARD. By contract (np-contract.md) it is
// rule 1 of FORWARD, so that policy judges pod traffic before the proxy's
// KUBE-FORWARD accepts marked or established packets: a full sync writes it
// back above the proxy's own jumps.
func policyHook(line string) bool {
	args := iptables.SplitRule(line)
	n := len(args)
	return n >= 2 && (args[n-2] == "-j" || args[n-2] == "-g") && args[n-1] == "KUBE-NWPLCY-FORWARD"
}
