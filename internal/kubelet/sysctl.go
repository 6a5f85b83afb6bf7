package kubelet

import "github.com/minikit/minikit/internal/cni"

// EnsureRouteLocalnet sets net.ipv4.conf.all.route_localnet=1 in the node's
// namespace for the service proxy's NodePorts on 127.0.0.1 (kube-proxy's
// iptables mode default), recorded like the agent's own sysctls so that
// minikit down puts the old value back. It is safe to call before Run.
func (a *Agent) EnsureRouteLocalnet() error {
	n := &cni.Network{HostNS: a.cfg.HostNS, Log: a.log, SysctlRecord: sysctlRecord(a.cfg.DataDir)}
	return n.EnsureRouteLocalnet()
}

// ResetRouteLocalnet puts route_localnet back to its value before
// EnsureRouteLocalnet, when the node leaves the iptables proxy mode (whose
// KUBE-FIREWALL guarded it).
func (a *Agent) ResetRouteLocalnet() error {
	n := &cni.Network{HostNS: a.cfg.HostNS, Log: a.log, SysctlRecord: sysctlRecord(a.cfg.DataDir)}
	return n.ResetRouteLocalnet()
}

// EnsureSysctl sets a sysctl of the node's namespace (a /proc/sys path),
// recording its old value for minikit down; the service proxy's conntrack
// timeouts.
func (a *Agent) EnsureSysctl(name, value string) error {
	n := &cni.Network{HostNS: a.cfg.HostNS, Log: a.log, SysctlRecord: sysctlRecord(a.cfg.DataDir)}
	return n.EnsureSysctl(name, value)
}
