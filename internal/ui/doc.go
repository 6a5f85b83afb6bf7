// Package ui is `minikit ui`: a web page, served by the binary, that draws a
// lab as package topology reads it (hosts = network namespaces, their
// interfaces and links, pods with their IPs), keeps it live over a watch of
// the API, and puts the lab's other tools beside it: the chain tree of a
// Service with the kernel's rule counters, `minikit trace` drawn hop by hop
// over the topology, and a DNS panel that asks the cluster DNS from inside a
// pod's network namespace with the pod's own search path.
//
// What it may do, and why:
//   - It is read-only. Every route is a GET; none writes to the API or the
//     kernel. The one packet it sends on its own is a DNS query, and the one
//     a live trace sends, each from inside a lab namespace (never the root
//     namespace). It watches Nodes, Pods, Services, EndpointSlices,
//     Ingresses, and Gateways and routes (when their CRDs are served) only: no Secret is ever read, so none can be shown.
//   - It listens on loopback by default. Off loopback (a non-loopback
//     --listen, or any request whose peer is not loopback) every request
//     must carry the lab's API token, the one in the lab's kubeconfig:
//     "Authorization: Bearer TOKEN", or ?token=TOKEN once, which sets a
//     cookie. Requests whose Host is not the listen address or loopback, and
//     cross-site requests (Sec-Fetch-Site), are refused, so a web page in the
//     same browser cannot read the lab through DNS rebinding.
//   - Everything the page needs is embedded (embed.FS) and nothing is
//     fetched from a network at run time.
//
// The page is vanilla JavaScript drawing SVG. Its layout is done by dagre
// (npm @dagrejs/dagre 3.1.3, MIT, with @dagrejs/graphlib 4.0.6 bundled in
// its dist file), vendored as assets/vendor/dagre.min.js with its licenses:
// the layered layout that Graphviz's dot does, maintained, about 50 KB, no
// dependencies, and the layout kind a network diagram wants (the underlay
// on top, the nodes, client and external under it, each node's pods under
// their node). dagre lays out the hosts and one block per node's pods; the
// pods are placed in a grid inside their block, so a node with 200 pods stays
// a compact block instead of a rank 200 boxes wide.
//
// Live updates: client-go informers watch the five kinds; a Pod event
// re-reads only that pod's namespace (Source.ReadHost) and sends it at once;
// then, debounced, the whole lab is read (Source.Collect) for what a Node,
// Service, EndpointSlice, Ingress, Gateway or route event changed and for the node's side of
// a pod's veth (reading a node's namespace alone would read all its pods). Each refresh is diffed against the graph the
// page has, and only the difference is pushed to the page as a Server-Sent
// Event ("patch"); a page that connects first gets the whole graph.
package ui
