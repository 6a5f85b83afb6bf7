package printers

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream, but minikit serves it and `kubectl get endpoints` must print it.

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// listMax is how many endpoints, ports or hosts a cell lists before
// summarizing the rest as "+ N more...".
const listMax = 3

var serviceColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Type", corev1.ServiceSpec{}.SwaggerDoc()["type"]),
	column("Cluster-IP", corev1.ServiceSpec{}.SwaggerDoc()["clusterIP"]),
	column("External-IP", corev1.ServiceSpec{}.SwaggerDoc()["externalIPs"]),
	column("Port(s)", corev1.ServiceSpec{}.SwaggerDoc()["ports"]),
	ageColumn,
	wideColumn("Selector", corev1.ServiceSpec{}.SwaggerDoc()["selector"]),
}

func serviceCells(svc *corev1.Service, now time.Time) []interface{} {
	// An empty type is what the API defaults to ClusterIP.
	typ := svc.Spec.Type
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	clusterIP := svc.Spec.ClusterIP
	if len(svc.Spec.ClusterIPs) > 0 {
		clusterIP = svc.Spec.ClusterIPs[0]
	}
	return []interface{}{
		svc.Name,
		string(typ),
		orNone(clusterIP), // headless services show their "None"
		serviceExternalIP(svc, typ),
		orNone(servicePorts(svc.Spec.Ports)),
		age(svc.CreationTimestamp, now),
		labels.FormatLabels(svc.Spec.Selector),
	}
}

func serviceExternalIP(svc *corev1.Service, typ corev1.ServiceType) string {
	switch typ {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		return orNone(strings.Join(svc.Spec.ExternalIPs, ","))
	case corev1.ServiceTypeLoadBalancer:
		var addrs []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			addrs = appendAddress(addrs, in.IP, in.Hostname)
		}
		addrs = sortedUnique(addrs)
		addrs = append(addrs, svc.Spec.ExternalIPs...)
		if len(addrs) == 0 {
			return "<pending>"
		}
		return strings.Join(addrs, ",")
	case corev1.ServiceTypeExternalName:
		return svc.Spec.ExternalName
	}
	return "<unknown>"
}

// appendAddress appends a load balancer ingress point: its IP, else its hostname.
func appendAddress(addrs []string, ip, hostname string) []string {
	switch {
	case ip != "":
		return append(addrs, ip)
	case hostname != "":
		return append(addrs, hostname)
	}
	return addrs
}

func sortedUnique(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// servicePorts is "80/TCP" per port, "80:30080/TCP" with a node port.
func servicePorts(ports []corev1.ServicePort) string {
	pieces := make([]string, len(ports))
	for i, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP // the API default
		}
		if p.NodePort > 0 {
			pieces[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, proto)
		} else {
			pieces[i] = fmt.Sprintf("%d/%s", p.Port, proto)
		}
	}
	return strings.Join(pieces, ",")
}

var endpointsColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Endpoints", corev1.Endpoints{}.SwaggerDoc()["subsets"]),
	ageColumn,
}

func endpointsCells(ep *corev1.Endpoints, now time.Time) []interface{} {
	return []interface{}{ep.Name, formatEndpoints(ep), age(ep.CreationTimestamp, now)}
}

// formatEndpoints lists ip:port for every address and port of every subset
// (bare IPs for a subset without ports, as headless services may have).
func formatEndpoints(ep *corev1.Endpoints) string {
	if len(ep.Subsets) == 0 {
		return "<none>"
	}
	var l shortList
	for _, ss := range ep.Subsets {
		if len(ss.Ports) == 0 {
			for _, a := range ss.Addresses {
				l.add(a.IP)
			}
			continue
		}
		for _, p := range ss.Ports {
			for _, a := range ss.Addresses {
				l.add(net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	return l.String()
}

// shortList keeps the first listMax items and counts the rest.
type shortList struct {
	items []string
	count int
}

func (l *shortList) add(s string) {
	if len(l.items) < listMax {
		l.items = append(l.items, s)
	}
	l.count++
}

func (l *shortList) String() string {
	s := strings.Join(l.items, ",")
	if l.count > listMax {
		return fmt.Sprintf("%s + %d more...", s, l.count-listMax)
	}
	return s
}

// orUnset is the list, or <unset> when it is empty.
func (l *shortList) orUnset() string {
	if l.count == 0 {
		return "<unset>"
	}
	return l.String()
}

var endpointSliceColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("AddressType", discoveryv1.EndpointSlice{}.SwaggerDoc()["addressType"]),
	column("Ports", discoveryv1.EndpointSlice{}.SwaggerDoc()["ports"]),
	column("Endpoints", discoveryv1.EndpointSlice{}.SwaggerDoc()["endpoints"]),
	ageColumn,
}

func endpointSliceCells(es *discoveryv1.EndpointSlice, now time.Time) []interface{} {
	var ports shortList
	for _, p := range es.Ports {
		switch {
		case p.Port != nil:
			ports.add(strconv.Itoa(int(*p.Port)))
		case p.Name != nil:
			ports.add(*p.Name)
		default:
			ports.add("*")
		}
	}
	var addrs shortList
	for _, e := range es.Endpoints {
		for _, a := range e.Addresses {
			addrs.add(a)
		}
	}
	return []interface{}{es.Name, string(es.AddressType), ports.orUnset(), addrs.orUnset(), age(es.CreationTimestamp, now)}
}

var ingressColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Class", "The name of the IngressClass resource that should be used for additional configuration"),
	column("Hosts", "Hosts that incoming requests are matched against before the ingress rule"),
	column("Address", "Address is a list containing ingress points for the load-balancer"),
	column("Ports", "Ports of TLS configurations that open"),
	ageColumn,
}

func ingressCells(ing *networkingv1.Ingress, now time.Time) []interface{} {
	class := "<none>"
	if ing.Spec.IngressClassName != nil {
		class = *ing.Spec.IngressClassName
	}
	var addrs []string
	for _, in := range ing.Status.LoadBalancer.Ingress {
		addrs = appendAddress(addrs, in.IP, in.Hostname)
	}
	ports := "80"
	if len(ing.Spec.TLS) > 0 {
		ports = "80, 443"
	}
	return []interface{}{
		ing.Name,
		class,
		ingressHosts(ing.Spec.Rules),
		strings.Join(sortedUnique(addrs), ","),
		ports,
		age(ing.CreationTimestamp, now),
	}
}

// ingressHosts lists the rules' hosts, "*" when none names one. Unlike the
// other lists, "+ N more" counts rules, hostless ones included.
func ingressHosts(rules []networkingv1.IngressRule) string {
	var hosts []string
	more := false
	for _, r := range rules {
		if len(hosts) == listMax {
			more = true
			break
		}
		if r.Host != "" {
			hosts = append(hosts, r.Host)
		}
	}
	if len(hosts) == 0 {
		return "*"
	}
	s := strings.Join(hosts, ",")
	if more {
		return fmt.Sprintf("%s + %d more...", s, len(rules)-listMax)
	}
	return s
}

var ingressClassColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Controller", "Controller that is responsible for handling this class"),
	column("Parameters", "A reference to a resource with additional parameters"),
	ageColumn,
}

func ingressClassCells(ic *networkingv1.IngressClass, now time.Time) []interface{} {
	params := "<none>"
	if p := ic.Spec.Parameters; p != nil {
		params = p.Kind
		if p.APIGroup != nil {
			params += "." + *p.APIGroup
		}
		params += "/" + p.Name
	}
	return []interface{}{ic.Name, ic.Spec.Controller, params, age(ic.CreationTimestamp, now)}
}

var serviceCIDRColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("CIDRs", networkingv1.ServiceCIDRSpec{}.SwaggerDoc()["cidrs"]),
	ageColumn,
}

func serviceCIDRCells(sc *networkingv1.ServiceCIDR, now time.Time) []interface{} {
	return []interface{}{sc.Name, strings.Join(sc.Spec.CIDRs, ","), age(sc.CreationTimestamp, now)}
}

// ipAddressColumns are kube-apiserver's: Name and ParentRef (its printer
// computes an age cell too but declares no column for it, so kubectl never
// shows one).
var ipAddressColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("ParentRef", networkingv1.IPAddressSpec{}.SwaggerDoc()["parentRef"]),
}

func ipAddressCells(ip *networkingv1.IPAddress, now time.Time) []interface{} {
	parent := "<none>"
	if r := ip.Spec.ParentRef; r != nil {
		parent = r.Resource
		if r.Group != "" {
			parent += "." + r.Group
		}
		parent = strings.ToLower(parent)
		if r.Namespace != "" {
			parent += "/" + r.Namespace
		}
		parent += "/" + r.Name
	}
	return []interface{}{ip.Name, parent}
}

var networkPolicyColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Pod-Selector", networkingv1.NetworkPolicySpec{}.SwaggerDoc()["podSelector"]),
	ageColumn,
}

func networkPolicyCells(np *networkingv1.NetworkPolicy, now time.Time) []interface{} {
	return []interface{}{np.Name, metav1.FormatLabelSelector(&np.Spec.PodSelector), age(np.CreationTimestamp, now)}
}
