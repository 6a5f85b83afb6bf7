package validation

import (
	"net/netip"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var supportedAddressTypes = []discoveryv1.AddressType{discoveryv1.AddressTypeFQDN, discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}

// Size limits of an EndpointSlice, as in Kubernetes.
const (
	maxSliceEndpoints = 1000
	maxSliceAddresses = 100
	maxSlicePorts     = 20000
	maxSliceTopology  = 16
	maxSliceHints     = 8
)

// validateEndpointSlice follows kubernetes pkg/apis/discovery/validation.
func validateEndpointSlice(s, old *discoveryv1.EndpointSlice) field.ErrorList {
	allErrs := validateMeta(&s.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	at := field.NewPath("addressType")
	switch {
	case s.AddressType == "":
		allErrs = append(allErrs, field.Required(at, ""))
	case !slices.Contains(supportedAddressTypes, s.AddressType):
		allErrs = append(allErrs, field.NotSupported(at, s.AddressType, supportedAddressTypes))
	}
	allErrs = append(allErrs, validateSliceEndpoints(s.Endpoints, s.AddressType, field.NewPath("endpoints"))...)
	allErrs = append(allErrs, validateSlicePorts(s.Ports, field.NewPath("ports"))...)
	if old != nil {
		allErrs = append(allErrs, immutable(s.AddressType, old.AddressType, at)...)
	}
	return allErrs
}

func validateSliceEndpoints(endpoints []discoveryv1.Endpoint, addrType discoveryv1.AddressType, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if len(endpoints) > maxSliceEndpoints {
		return append(allErrs, field.TooMany(fldPath, len(endpoints), maxSliceEndpoints))
	}
	for i, ep := range endpoints {
		p := fldPath.Index(i)
		ap := p.Child("addresses")
		if len(ep.Addresses) == 0 {
			allErrs = append(allErrs, field.Required(ap, "must contain at least 1 address"))
		} else if len(ep.Addresses) > maxSliceAddresses {
			allErrs = append(allErrs, field.TooMany(ap, len(ep.Addresses), maxSliceAddresses))
		}
		for j, a := range ep.Addresses {
			allErrs = append(allErrs, validateSliceAddress(a, addrType, ap.Index(j))...)
		}
		if ep.NodeName != nil {
			allErrs = append(allErrs, msgs(p.Child("nodeName"), *ep.NodeName, nameIsSubdomain(*ep.NodeName, false))...)
		}
		if ep.Hostname != nil {
			allErrs = append(allErrs, dns1123Label(*ep.Hostname, p.Child("hostname"))...)
		}
		tp := p.Child("deprecatedTopology")
		if len(ep.DeprecatedTopology) > maxSliceTopology {
			allErrs = append(allErrs, field.TooMany(tp, len(ep.DeprecatedTopology), maxSliceTopology))
		}
		allErrs = append(allErrs, metavalidation.ValidateLabels(ep.DeprecatedTopology, tp)...)
		if ep.Hints != nil && len(ep.Hints.ForZones) > maxSliceHints {
			allErrs = append(allErrs, field.TooMany(p.Child("hints", "forZones"), len(ep.Hints.ForZones), maxSliceHints))
		}
	}
	return allErrs
}

func validateSliceAddress(a string, addrType discoveryv1.AddressType, fldPath *field.Path) field.ErrorList {
	switch addrType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
		if errs := validation.IsValidIP(fldPath, a); len(errs) > 0 {
			return errs
		}
		addr := netip.MustParseAddr(a)
		if addrType == discoveryv1.AddressTypeIPv4 && !addr.Is4() {
			return field.ErrorList{field.Invalid(fldPath, a, "must be a valid IPv4 address")}
		}
		if addrType == discoveryv1.AddressTypeIPv6 && !addr.Is6() {
			return field.ErrorList{field.Invalid(fldPath, a, "must be a valid IPv6 address")}
		}
		return nonSpecialIP(a, fldPath)
	case discoveryv1.AddressTypeFQDN:
		return validation.IsFullyQualifiedDomainName(fldPath, a)
	}
	return nil
}

func validateSlicePorts(ports []discoveryv1.EndpointPort, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if len(ports) > maxSlicePorts {
		return append(allErrs, field.TooMany(fldPath, len(ports), maxSlicePorts))
	}
	names := map[string]bool{}
	for i, port := range ports {
		p := fldPath.Index(i)
		name := ""
		if port.Name != nil {
			name = *port.Name
		}
		if name != "" {
			allErrs = append(allErrs, dns1123Label(name, p.Child("name"))...)
		}
		if names[name] {
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), name))
		}
		names[name] = true
		if port.Protocol == nil {
			allErrs = append(allErrs, field.Required(p.Child("protocol"), ""))
		} else if !slices.Contains(supportedProtocols, *port.Protocol) {
			allErrs = append(allErrs, field.NotSupported(p.Child("protocol"), *port.Protocol, supportedProtocols))
		}
		if port.Port != nil {
			allErrs = append(allErrs, portNum(*port.Port, p.Child("port"))...)
		}
		if port.AppProtocol != nil {
			allErrs = append(allErrs, qualifiedName(*port.AppProtocol, p.Child("appProtocol"))...)
		}
	}
	return allErrs
}
