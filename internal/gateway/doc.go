// Package gateway is minikit's Gateway API implementation
// (gateway.networking.k8s.io/v1, bundle v1.6.3): the CRD bundle installed with
// the cluster, a controller for the GatewayClass "minikit" and a data plane on
// the Ingress controller's HTTP proxy (package ingress/httpproxy).
//
// # How a Gateway maps onto minikit
//
// Every Gateway of the class gets, from the control plane, a selector-less
// Service of type LoadBalancer in the Gateway's namespace, named
// "<gateway>-minikit" (ServiceName shortens and hashes a Gateway name that
// would make an invalid Service name), labelled gateway.networking.k8s.io/gateway-name and
// owned by the Gateway (the garbage collector removes it with the Gateway).
// The Service is the Gateway's only tie to the network:
//
//   - Its address comes from the LoadBalancer stub (package loadbalancer), which
//     allocates from --lb-pool, announces it by ARP from one node and writes
//     status.loadBalancer.ingress. A Gateway's spec.addresses (type IPAddress)
//     become the stub's request annotation metallb.io/loadBalancerIPs, so the
//     stub's checks (in the pool, not in use by another Service) decide, and
//     its Events say why an address is refused. Two Gateways asking for one
//     address are two Services asking for one address: the second stays
//     pending, and its Gateway is Programmed=False, reason AddressNotAssigned.
//     Gateway.status.addresses is copied from the Service's status.
//   - Its ports are the Gateway's distinct listener ports (several HTTP
//     listeners share port 80 and differ by hostname), protocol UDP for UDP
//     listeners and TCP for the others. Each port's targetPort
//     is a data-plane port allocated by the control plane from DataPortRange
//     (20000-29999, below the NodePort range), unique across all Gateways.
//     The allocation lives only in the Services' specs, as the stub's
//     addresses live only in their statuses: a restarted control plane re-reads
//     them and never hands a port out twice.
//   - Its EndpointSlices (managed-by gateway.minikit.io; the endpoints
//     controller leaves selector-less Services to their owner) list the
//     InternalIPs of the Ready nodes whose data plane announces itself on its
//     Node (annotation gateway.minikit.io/dataplane), with the data ports.
//
// So a client's packet to LB-IP:80 reaches the announcing node, the service
// proxy (iptables or nftables, ipMode VIP) DNATs it to some node's
// InternalIP:dataPort, and that node's proxy knows the Gateway and port from
// the local port the connection arrived on. Nothing new touches the kernel:
// the address, the ARP answers and the DNAT are the stub's and kube-proxy's,
// as for any LoadBalancer Service, which is what a student inspects with
// iptables-save and `kubectl get svc`.
//
// Why not one listener per node that finds the Gateway from the original
// destination (SO_ORIGINAL_DST)? The DNAT happens on the announcing node; when
// the endpoint is another node, that node's conntrack never saw LB-IP:80, so
// the original destination is lost. A port per Gateway port survives any
// hop. Why not hostNetwork pods per Gateway (as Envoy Gateway deploys)? minikit's
// node components are in-process; a pod per Gateway would add an image and a
// restart path for no behaviour the suite or a student can observe.
//
// # The two halves
//
//   - Control plane (server, under the controller-manager lease, as the
//     Ingress control plane): installs the CRD bundle at start (Install, every
//     server, idempotent); creates the GatewayClass "minikit" and keeps
//     every class of ControllerName Accepted; for each Gateway of the class, the Service and
//     its EndpointSlices, and Gateway status (Accepted, Programmed, addresses,
//     listeners with supportedKinds, attachedRoutes and conditions); for each
//     HTTPRoute, GRPCRoute, TLSRoute, TCPRoute and UDPRoute, status.parents
//     (Accepted, ResolvedRefs) for the parents of this controller. The status rules (allowedRoutes, hostname
//     intersection, ReferenceGrant, backend and certificate resolution) are pure functions of
//     a snapshot of the objects (status.go), tested as tables.
//   - Node (every node, node.go): watches Gateways, HTTPRoutes, GRPCRoutes,
//     TLSRoutes, TCPRoutes, UDPRoutes, ReferenceGrants, Secrets, Services and
//     EndpointSlices; from the same Compute
//     builds, per data port, the routing Table (routes.go) of the listeners
//     behind it, opens and closes data ports to match, announces itself on
//     its Node, and serves (dataplane.go) straight to ready endpoints of the
//     backend Services, weighted. Because node and control plane use the
//     same functions on the same objects, a route that status calls Accepted
//     on a valid listener is the route the proxy serves. The serving is
//     net/http's for now, not package ingress/httpproxy's: dataplane.go says
//     why and what moving onto it takes.
//
// # GRPCRoutes
//
// HTTP and HTTPS listeners take GRPCRoutes beside HTTPRoutes (supportedKinds
// lists both unless allowedRoutes.kinds narrows it). A GRPCRoute goes through
// the same rules and Table as the HTTPRoute that says the same (grpc.go says
// how a method match becomes a path match); its status is written to the
// GRPCRoute, its ReferenceGrants must name GRPCRoute. Data ports speak
// HTTP/1.1 and h2c (HTTP/2 with prior knowledge, what gRPC clients send
// without TLS); a GRPCRoute's backends are reached over h2c, and a gRPC call
// no rule matches is answered with gRPC status Unimplemented.
//
// # HTTPS listeners
//
// A listener of protocol HTTPS (tls.mode Terminate; Passthrough there is
// Accepted=False, UnsupportedValue) names its certificates in
// tls.certificateRefs: core Secrets of type kubernetes.io/tls, in the
// Gateway's namespace or in another one whose ReferenceGrant allows
// Gateways of the Gateway's namespace to refer to Secrets (v1 or v1beta1,
// one stored object). Every ref must resolve, or the listener is
// ResolvedRefs=False with the spec's reason: RefNotPermitted for a
// cross-namespace Secret no ReferenceGrant allows, InvalidCertificateRef for
// another group or kind, a missing Secret, another type, a malformed or
// mismatched pair; the message names tls.certificateRefs[i]. Such a
// listener is Programmed=False (Invalid) and not served; routes still attach
// to it and count in its attachedRoutes, as the spec says, and the
// Gateway stays Accepted (reason ListenersNotValid) and Programmed while
// another listener is valid, which the data plane keeps serving.
//
// The data port of HTTPS listeners terminates TLS (TerminateTLS) for every
// connection while the snapshot says so, with the certificate the
// ClientHello's server name picks at the handshake (PickCertificate): the
// listener whose hostname is exactly that name, else the longest wildcard
// covering it, else the listener without a hostname; no match fails the
// handshake. The request is then routed as on an HTTP listener. A changed
// Secret or ReferenceGrant is a new snapshot, served from the next
// connection on; nothing is reopened.
//
// # TLS listeners and TLSRoutes
//
// A listener of protocol TLS with tls.mode Passthrough takes TLSRoutes
// (gateway.networking.k8s.io/v1, standard channel in v1.6.3); its
// supportedKinds is TLSRoute alone, and allowedRoutes.kinds naming another
// kind is ResolvedRefs=False (InvalidRouteKinds). tls.mode Terminate on a
// TLS listener (the TLSRouteModeTerminate extended feature) is
// Accepted=False, UnsupportedValue, with no supportedKinds. certificateRefs
// on a Passthrough listener are ignored, as the spec says of that mode: the
// Gateway holds no key, the backend does. A TLSRoute goes through the
// HTTPRoute rules as the route that says the same (tlsAsHTTP), so
// attachment, hostname intersection, allowedRoutes, ReferenceGrants (from
// TLSRoute) and its ResolvedRefs reasons are shared; its status goes to the
// TLSRoute.
//
// A passthrough data port never terminates TLS (SplitPassthrough, before
// TerminateTLS on the same listener): it reads the client's records up to
// the end of the ClientHello (ReadClientHello; the hello may span several
// records), routes its server name through the port's Table (an exact
// hostname, then the longest wildcard, then a route without hostnames; the
// older route among equals), replays the bytes read to a ready endpoint of
// the backend picked by weight and splices the two connections (half closes
// passed on). A connection no route takes (no server name, a name nothing
// covers, no valid backend, no ready endpoint) is closed without a byte
// written: the client's handshake ends with EOF.
//
// # TCP and UDP listeners, TCPRoutes and UDPRoutes
//
// A listener of protocol TCP takes TCPRoutes, one of protocol UDP
// UDPRoutes (gateway.networking.k8s.io/v1, standard channel in v1.6.3);
// supportedKinds is that kind alone and allowedRoutes.kinds naming another
// is ResolvedRefs=False (InvalidRouteKinds). Both route kinds go through the
// HTTPRoute rules as the route with their parents and backendRefs
// (tcpAsHTTP, udpAsHTTP): attachment by sectionName and port, allowedRoutes
// namespaces (NotAllowedByListeners when no listener takes the kind or the
// namespace, NoMatchingParent when none matches the parentRef),
// ReferenceGrants that must name TCPRoute or UDPRoute, ResolvedRefs
// (BackendNotFound, RefNotPermitted, InvalidKind); their status goes to
// their own kind. Nothing in a TCP or UDP listener or route tells two routes
// apart, so every route that attaches is Accepted and counts in
// attachedRoutes, and the listener serves only the oldest (creationTimestamp,
// then "namespace/name"), as the spec's conflict rule says; the suite checks
// exactly that. A TCP listener shares its port with no other listener
// (ProtocolConflict with HTTP, HTTPS or TLS on it, the spec's rule); a UDP
// listener may share its port number with one over TCP: the Gateway's
// Service then has a TCP and a UDP port of that number, each with its own
// data port, and its EndpointSlice carries each with its protocol, so the
// service proxy DNATs UDP as for any UDP LoadBalancer Service (and clears
// the UDP conntrack entries its endpoint changes make stale).
//
// A TCP data port is the same listener as the others (SplitPassthrough
// takes its connections from the HTTP server while the snapshot says the
// port is a TCP listener's): each connection goes to a ready endpoint of a
// backend of the route, picked by weight, and is spliced as a passthrough
// connection is (tcproute.go). A UDP data port is a UDPRelay (udproute.go):
// a session per client address, with its own socket connected to one
// endpoint picked as for TCP; the client's datagrams go out on it, the
// endpoint's answers go back to that client from the address it sent to
// (IP_PKTINFO: the DNATed node address, so conntrack un-NATs the reply).
// A session ends after UDPIdleTimeout without a datagram either way, or
// when the current snapshot no longer serves its endpoint (the client's
// next datagram picks again); at most UDPMaxSessions per data port, past
// which a new client's datagrams are dropped, as a full conntrack table
// drops them. No route, an invalid backend picked by weight (TCPRouteRule's
// doc: its share of connections is rejected), no ready endpoint: a TCP
// connection is closed without a byte, a UDP datagram is dropped.
//
// # Filters
//
// A rule's filters are applied in the data plane (routes.go builds them
// into its Action): RequestHeaderModifier, ResponseHeaderModifier,
// RequestRedirect, URLRewrite, RequestMirror (mirror.go: a copy to one
// endpoint of each sampled mirror, fire and forget) and CORS (cors.go:
// preflights answered by the proxy); on a backendRef, the two header
// modifiers. GRPCRoute filters are read as the HTTPRoute filters of the
// same names. A filter the spec says must not be skipped never is: any
// other type (ExternalAuth, a value of a newer API, anything else on a
// backendRef) makes the route's parent Accepted=False, reason
// UnsupportedValue, with the field in the message (unsupportedFilter); an
// ExtensionRef, since minikit serves no extension kinds, makes it
// ResolvedRefs=False, reason InvalidKind. The route still attaches, its
// valid rules keep serving, and every request the faulty rule matches (or
// the faulty backendRef is picked for) gets 500 (Action.Fault,
// Backend.Invalid). A RequestMirror's backendRef resolves as a backendRef
// (ReferenceGrant, BackendNotFound in ResolvedRefs); one that does not is
// dropped, as its doc says, and the rule serves without it.
//
// # Files
//
// install.go the bundle; status.go the status rules (Compute); tls.go the
// certificateRefs and SNI; listers.go the World both halves read;
// controlplane.go the server half; routes.go the routing Table; dataplane.go
// the HTTP handler and TLS termination; mirror.go and cors.go the
// RequestMirror and CORS filters; tlsroute.go TLSRoutes, the
// ClientHello and the passthrough splice; tcproute.go TCPRoutes and the
// endpoint a TCP or UDP listener picks; udproute.go UDPRoutes and the
// UDPRelay; node.go the node half.
//
// # Not done yet (issue 32)
//
// TLS listeners in mode Terminate and the mixed modes (TLSRouteModeTerminate,
// TLSRouteModeMixed), the HTTPS extended features (misdirected-request detection by SNI and Host, frontend client
// certificate validation, per-port TLS options, HTTP/2 over TLS),
// GRPCRoute over HTTPS (the data port offers only http/1.1 in ALPN);
// mirroring a request body without Content-Length or over 1 MiB (so most
// gRPC calls: such requests are not mirrored); the PROXY protocol or any other
// way for a passthrough, TCP or UDP backend to see the client's address (it
// sees the node's); listener isolation between listeners sharing a
// port (their attachments are merged into one table); the HTTPRoute
// filter ExternalAuth, retries, destination-port
// matching (HTTPRouteDestinationPortMatching); HTTPRoute backend protocols
// (h2c by appProtocol; WebSocket through net/http works; only GRPCRoute
// backends get h2c); Conflicted
// rules beyond same port and hostname; Gateway
// spec.addresses of type Hostname or several IPs (the LB stub takes one IPv4);
// the data plane on httpproxy; a 1,000-route table is scanned linearly per
// request (index it by hostname first); Events.
//
// The GatewayClass says in status.supportedFeatures (SupportedFeatures)
// exactly the features whose conformance tests pass, so that the suite,
// given no --supported-features, reads them from the class.
//
// scripts/gateway-conformance.sh runs the upstream suite: unmodified, its
// GATEWAY-HTTP setup passes (the base Gateway with only HTTPS listeners is
// Accepted and Programmed) and so do the profile's 36 core tests, and the
// GATEWAY-GRPC profile's 14, the GATEWAY-TLS profile's 19, and the
// GATEWAY-TCP (8 TCPRoute tests) and GATEWAY-UDP (9 UDPRoute tests)
// profiles' core tests. Of
// GATEWAY-HTTP's extended features these pass and are claimed:
// HTTPRouteQueryParamMatching, HTTPRouteMethodMatching,
// HTTPRouteResponseHeaderModification,
// HTTPRouteBackendRequestHeaderModification (a backendRef's own header
// filters), HTTPRouteSchemeRedirect, HTTPRoutePortRedirect,
// HTTPRoutePathRedirect, HTTPRoute303/307/308RedirectStatusCode,
// HTTPRouteHostRewrite and HTTPRoutePathRewrite (URLRewrite),
// HTTPRouteRequestTimeout and HTTPRouteBackendTimeout (one bound, the
// smaller: the proxy makes one backend request per request; 504 past it),
// HTTPRouteNamedRouteRule and HTTPRouteParentRefPort,
// HTTPRouteRequestMirror, HTTPRouteRequestMultipleMirrors and
// HTTPRouteRequestPercentageMirror (mirror.go), HTTPRouteCORS (cors.go).
//
// # The bundle
//
// crds/standard and crds/experimental are the v1.6.3 release's
// config/crd/{standard,experimental} files, unmodified (embedded). Each
// channel also holds gateway.networking.k8s.io_vap_safeupgrades.yaml, a
// ValidatingAdmissionPolicy and its binding, not CRDs: minikit serves no
// admission policies, so Install does not apply them; it enforces their first
// rule itself for the objects it applies (experimental CRDs are not applied
// over standard ones; the channel is switched by deleting the CRDs). Their
// second rule (no bundle older than v1.5.0) holds for what Install applies.
package gateway
