// minikit ui: the lab's topology drawn in SVG (layout by dagre), kept live
// over /api/events, with the trace, Services/chains and DNS panels.
// DOM contract (tests rely on it): every host drawn has data-id=Host.ID and
// class "host host-KIND", its name and address in its text; every link
// drawn has data-id=Link.ID; interfaces drawn have data-id=Interface.ID; the
// current trace's hops carry class "hop". Pod list entries show NAME and IP.
"use strict";

const state = {
  lab: "",
  version: 0,
  hosts: new Map(), // id -> Host
  links: new Map(), // id -> Link
  services: [],
  ingresses: [],
  gateways: [],
  gatewayRoutes: [],
  hops: [], // current trace path's hops
  renderPending: false,
  rendered: 0, // renders done (tests and the bench read data-render)
};

const $ = (id) => document.getElementById(id);
const NS = "http://www.w3.org/2000/svg";
// A routed lab's router hangs below the underlay, beside the nodes.
const kindRank = { underlay: 0, router: 0.5, node: 1, client: 2, external: 3, pod: 4 };

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// ---- live feed ----

function connect() {
  const es = new EventSource("api/events");
  es.addEventListener("graph", (e) => {
    const m = JSON.parse(e.data);
    const g = m.graph;
    state.lab = g.lab;
    state.version = m.version;
    state.hosts = new Map((g.hosts || []).map((h) => [h.id, h]));
    state.links = new Map((g.links || []).map((l) => [l.id, l]));
    state.services = g.services || [];
    state.ingresses = g.ingresses || [];
    state.gateways = g.gateways || [];
    state.gatewayRoutes = g.gatewayRoutes || [];
    $("status").textContent = "live";
    $("status").className = "status live";
    changed(true);
  });
  es.addEventListener("patch", (e) => {
    const p = JSON.parse(e.data);
    for (const id of p.removeHosts || []) state.hosts.delete(id);
    for (const h of p.hosts || []) state.hosts.set(h.id, h);
    for (const id of p.removeLinks || []) state.links.delete(id);
    for (const l of p.links || []) state.links.set(l.id, l);
    const svcs = p.services !== undefined || p.ingresses !== undefined || p.gateways !== undefined;
    if (p.services !== undefined) state.services = p.services;
    if (p.ingresses !== undefined) state.ingresses = p.ingresses;
    if (p.gateways !== undefined) state.gateways = p.gateways;
    if (p.gatewayRoutes !== undefined) state.gatewayRoutes = p.gatewayRoutes;
    state.version = p.version;
    changed(svcs);
  });
  es.onerror = () => {
    $("status").textContent = "reconnecting…";
    $("status").className = "status down";
  };
}

function changed(lists) {
  if (state.renderPending) return;
  state.renderPending = true;
  requestAnimationFrame(() => {
    state.renderPending = false;
    render();
    renderLists(lists);
  });
}

// ---- topology ----

function sortedHosts() {
  return [...state.hosts.values()].sort((a, b) =>
    (kindRank[a.kind] ?? 5) - (kindRank[b.kind] ?? 5) ||
    (a.node || "").localeCompare(b.node || "") ||
    a.name.localeCompare(b.name) || a.id.localeCompare(b.id));
}

// An interface drawn as a dot, not a chip: a veth enslaved to a bridge
// (the bridge's port), drawn where its peer is.
function isPort(ifc) {
  return ifc.kind === "veth" && !!ifc.master;
}

function chipsOf(h) {
  return (h.interfaces || []).filter((i) => i.kind !== "loopback" && i.name !== "lo" && !isPort(i));
}

// upChip says an interface of an infrastructure host is drawn on the top
// edge of its box: its veth peer, or a peer of one of its bridge ports, is
// in a host of a lower rank (the underlay, above). The others sit on the
// bottom edge, toward the pods.
function upChip(h, c) {
  const rank = kindRank[h.kind] ?? 5;
  const peers = [c.peer, ...(h.interfaces || []).filter((p) => isPort(p) && p.master === c.name).map((p) => p.peer)];
  return peers.some((p) => {
    const other = p && state.hosts.get(hostOf(p));
    return other && (kindRank[other.kind] ?? 5) < rank;
  });
}

function chipWidth(c) {
  return c.name.length * CH + 10;
}

const CH = 7; // px per character at the chips' and boxes' font size
const POD_H = 34, POD_GAP = 10, POD_STUB = 18;

function layout(hosts) {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "TB", nodesep: 40, ranksep: 70, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  const infra = hosts.filter((h) => h.kind !== "pod");
  const pods = hosts.filter((h) => h.kind === "pod");
  const box = new Map();
  for (const h of infra) {
    const chips = chipsOf(h);
    const rowW = (up) => chips.filter((c) => upChip(h, c) === up).reduce((w, c) => w + chipWidth(c) + 4, 0) + 16;
    const text = Math.max(h.name.length, hostSub(h).length) * CH + 20;
    const w = Math.max(130, rowW(true), rowW(false), text);
    const hgt = 46;
    box.set(h.id, { w, h: hgt });
    g.setNode(h.id, { width: w, height: hgt });
  }
  // Each node's pods are one block, laid out as a grid inside it.
  const byNode = new Map();
  const nodeIDs = new Map(infra.filter((h) => h.kind === "node").map((h) => [h.name, h.id]));
  for (const p of pods) {
    const key = nodeIDs.get(p.node) || "";
    if (!byNode.has(key)) byNode.set(key, []);
    byNode.get(key).push(p);
  }
  const podW = Math.max(120, ...pods.map((p) => Math.max(p.name.length, hostAddrs(p).length) * CH + 16));
  const blocks = new Map();
  for (const [nodeID, ps] of byNode) {
    const cols = Math.max(1, Math.min(ps.length, Math.ceil(Math.sqrt(ps.length * 1.5))));
    const rows = Math.ceil(ps.length / cols);
    const bw = cols * (podW + POD_GAP) + POD_GAP;
    const bh = rows * (POD_H + POD_STUB + POD_GAP) + POD_GAP;
    const id = "block:" + nodeID;
    blocks.set(id, { nodeID, pods: ps, cols, w: bw, h: bh });
    g.setNode(id, { width: bw, height: bh });
    if (nodeID) g.setEdge(nodeID, id);
  }
  // Hosts joined by a veth (directly or through a bridge port) are edges,
  // from the lower kind rank (underlay) to the higher.
  for (const l of state.links.values()) {
    if (l.kind !== "veth") continue;
    const a = hostOf(l.a), b = hostOf(l.b);
    const ha = state.hosts.get(a), hb = state.hosts.get(b);
    if (!ha || !hb || a === b || ha.kind === "pod" || hb.kind === "pod") continue;
    const [s, t] = (kindRank[ha.kind] ?? 5) <= (kindRank[hb.kind] ?? 5) ? [a, b] : [b, a];
    g.setEdge(s, t);
  }
  dagre.layout(g);
  return { g, box, blocks, podW };
}

function hostOf(ifaceID) {
  const i = ifaceID.lastIndexOf("/");
  return i < 0 ? ifaceID : ifaceID.slice(0, i);
}

// hostAddrs is a host's address, or both of a dual-stack pod's or node's
// (addresses: the primary first).
function hostAddrs(h) {
  return ((h.addresses || []).length > 1 ? h.addresses : [h.address]).filter(Boolean).join(" · ");
}

function hostSub(h) {
  if (h.kind === "node") return [hostAddrs(h), ((h.podCIDRs || []).length > 1 ? h.podCIDRs : [h.podCIDR]).filter(Boolean).join(" · ")].filter(Boolean).join("  ");
  return hostAddrs(h);
}

// clusterIPs are a Service's cluster IPs, both of a dual-stack one's.
function clusterIPs(s) {
  return (s.clusterIPs || []).length > 1 ? s.clusterIPs : [s.clusterIP].filter(Boolean);
}

// timings: each render's end (performance.now()), its duration and what it
// drew, the last 200; scripts/bench-ui.sh reads them.
window.minikitUI = { renders: [] };

function render() {
  const t0 = performance.now();
  const hosts = sortedHosts();
  const svg = $("graph");
  if (hosts.length === 0) {
    svg.innerHTML = "";
    return;
  }
  const { g, box, blocks, podW } = layout(hosts);
  const pos = new Map(); // interface ID -> {x, y, top} (chip or dot anchor)
  const parts = [];
  const hostParts = [];
  // Infrastructure hosts with their chips.
  for (const h of hosts) {
    if (h.kind === "pod") continue;
    const n = g.node(h.id), b = box.get(h.id);
    const x0 = n.x - b.w / 2, y0 = n.y - b.h / 2;
    let s = `<g class="host host-${esc(h.kind)}" data-id="${esc(h.id)}" transform="translate(${x0},${y0})">` +
      `<title>${esc(h.id)}</title><rect class="box" width="${b.w}" height="${b.h}" rx="6"/>` +
      `<text class="name" x="10" y="20">${esc(h.name)}</text><text class="addr" x="10" y="35">${esc(hostSub(h))}</text>`;
    // Interfaces sit on the box's edges: toward the underlay on top,
    // toward the pods below.
    const cx = { true: 10, false: 10 };
    for (const c of chipsOf(h)) {
      const w = chipWidth(c), up = upChip(h, c), y = up ? -8 : b.h - 8;
      s += `<g class="iface iface-${esc(c.kind)}" data-id="${esc(c.id)}"><title>${esc(c.id)} ${esc((c.addrs || []).join(" "))}</title>` +
        `<rect x="${cx[up]}" y="${y}" width="${w}" height="16" rx="3"/><text x="${cx[up] + 5}" y="${y + 12}">${esc(c.name)}</text></g>`;
      pos.set(c.id, { x: x0 + cx[up] + w / 2, top: y0 + y, bottom: y0 + y + 16, host: h.id });
      cx[up] += w + 4;
    }
    hostParts.push(s + "</g>");
  }
  // Pods, in their blocks.
  for (const [id, bl] of blocks) {
    const n = g.node(id);
    const bx = n.x - bl.w / 2, by = n.y - bl.h / 2;
    hostParts.push(`<rect class="block" x="${bx}" y="${by}" width="${bl.w}" height="${bl.h}" rx="8"/>`);
    bl.pods.forEach((p, i) => {
      const col = i % bl.cols, row = Math.floor(i / bl.cols);
      const x0 = bx + POD_GAP + col * (podW + POD_GAP);
      const y0 = by + POD_GAP + POD_STUB + row * (POD_H + POD_STUB + POD_GAP);
      const eth = (p.interfaces || []).find((i) => i.kind !== "loopback" && i.name !== "lo");
      let s = `<g class="host host-pod phase-${esc((p.phase || "").toLowerCase())}" data-id="${esc(p.id)}" transform="translate(${x0},${y0})">` +
        `<title>${esc(p.id)} on ${esc(p.node)}</title><rect class="box" width="${podW}" height="${POD_H}" rx="4"/>`;
      if (eth) {
        s += `<g class="iface" data-id="${esc(eth.id)}"><title>${esc(eth.id)}</title><rect x="${podW / 2 - 14}" y="-5" width="28" height="8" rx="2"/></g>`;
        pos.set(eth.id, { x: x0 + podW / 2, top: y0 - 5, bottom: y0 + 3, host: p.id });
      }
      s += `<text class="name" x="6" y="15">${esc(p.name)}</text><text class="addr" x="6" y="28">${esc(hostAddrs(p))}</text></g>`;
      hostParts.push(s);
    });
  }
  // Bridge ports sit just above or below their veth peer.
  const ports = new Map();
  for (const h of hosts) {
    for (const i of h.interfaces || []) {
      if (!isPort(i)) continue;
      const peer = pos.get(i.peer);
      const bridge = (h.interfaces || []).find((b) => b.name === i.master);
      const bp = bridge && pos.get(bridge.id);
      let p;
      if (peer && bp) {
        const above = bp.bottom < peer.top;
        p = { x: peer.x, y: above ? peer.top - 12 : peer.bottom + 12 };
      } else if (bp) {
        p = { x: bp.x, y: bp.bottom + 12 };
      } else continue;
      ports.set(i.id, p);
      pos.set(i.id, { x: p.x, top: p.y, bottom: p.y, host: h.id, port: true });
    }
  }
  const anchor = (from, to) => {
    // The end of a line at interface `from` toward interface `to`.
    const a = pos.get(from), b = pos.get(to);
    if (!a) {
      // A new pod's veth whose node side (the bridge port) has not been
      // read yet: a stub above the pod until it is.
      if (b && state.hosts.has(hostOf(from))) return { x: b.x, y: b.top - 12 };
      return null;
    }
    if (a.port) return { x: a.x, y: a.top };
    const down = b ? a.bottom <= b.top : true;
    return { x: a.x, y: down ? a.bottom : a.top };
  };
  for (const l of state.links.values()) {
    const a = anchor(l.a, l.b), b = anchor(l.b, l.a);
    if (!a || !b) continue;
    if (l.kind === "vxlan" && pos.get(l.a) && pos.get(l.b)) {
      // A tunnel between two nodes' VXLAN devices: a dashed arc below
      // them, labelled with the VNI.
      const ifc = (state.hosts.get(hostOf(l.a))?.interfaces || []).find((i) => i.id === l.a);
      const label = ifc && ifc.vxlan ? `VXLAN VNI ${ifc.vxlan.vni}` : "VXLAN";
      const ya = pos.get(l.a).bottom, yb = pos.get(l.b).bottom, my = Math.max(ya, yb) + 28;
      parts.push(`<path class="link link-vxlan" data-id="${esc(l.id)}" d="M${a.x} ${ya} C${a.x} ${my} ${b.x} ${my} ${b.x} ${yb}"><title>${esc(l.id)}</title></path>` +
        `<text class="tunnel-label" x="${(a.x + b.x) / 2}" y="${my - 2}" text-anchor="middle">${esc(label)}</text>`);
      continue;
    }
    parts.push(`<line class="link link-${esc(l.kind)}" data-id="${esc(l.id)}" x1="${a.x}" y1="${a.y}" x2="${b.x}" y2="${b.y}"><title>${esc(l.id)}</title></line>`);
  }
  for (const [id, p] of ports) {
    parts.push(`<circle class="iface port" data-id="${esc(id)}" cx="${p.x}" cy="${p.y}" r="3.5"><title>${esc(id)}</title></circle>`);
  }
  const gr = g.graph();
  // Fit the container's width unless that would make the text unreadable;
  // then the picture scrolls.
  const avail = $("topology").clientWidth - 4;
  const k = gr.width > avail && avail / gr.width >= 0.55 ? avail / gr.width : 1;
  svg.setAttribute("width", Math.ceil(gr.width * k));
  svg.setAttribute("height", Math.ceil(gr.height * k));
  svg.setAttribute("viewBox", `0 0 ${Math.ceil(gr.width)} ${Math.ceil(gr.height)}`);
  svg.innerHTML = `<g class="links">${parts.join("")}</g><g class="hosts">${hostParts.join("")}</g><g class="hop-labels"></g>`;
  markHops();
  state.rendered++;
  document.body.dataset.render = state.rendered;
  document.body.dataset.version = state.version;
  const pods = hosts.filter((h) => h.kind === "pod").length;
  $("counts").textContent = `${hosts.length - pods} hosts, ${pods} pods, ${state.links.size} links`;
  const r = window.minikitUI.renders;
  r.push({ end: performance.now(), ms: performance.now() - t0, hosts: hosts.length - pods, pods, version: state.version });
  if (r.length > 200) r.shift();
  $("lab").textContent = state.lab;
}

// markHops puts class "hop" on the elements of the current trace's hops and
// writes the hosts' hop labels beside them.
function markHops() {
  const svg = $("graph");
  for (const el of svg.querySelectorAll(".hop")) el.classList.remove("hop", "hop-verdict");
  const labels = svg.querySelector(".hop-labels");
  if (labels) labels.innerHTML = "";
  const byHost = new Map();
  state.hops.forEach((h, i) => {
    for (const el of svg.querySelectorAll(`[data-id="${CSS.escape(h.element)}"]`)) {
      el.classList.add("hop");
      if (h.verdict) el.classList.add("hop-verdict");
    }
    if (h.kind === "host" && h.label) {
      if (!byHost.has(h.element)) byHost.set(h.element, []);
      byHost.get(h.element).push(`${i + 1}. ${h.label}${h.verdict ? " → " + h.verdict : ""}`);
    }
  });
  if (!labels) return;
  for (const [id, ls] of byHost) {
    const el = svg.querySelector(`.host[data-id="${CSS.escape(id)}"]`);
    if (!el) continue;
    const bb = el.getBBox(), m = el.transform.baseVal.consolidate();
    const x = (m ? m.matrix.e : 0) + bb.width - 4, y = (m ? m.matrix.f : 0) + 4;
    const nums = ls.map((t) => t.split(".")[0]);
    const text = nums.length > 2 ? `${nums[0]}–${nums[nums.length - 1]}` : nums.join(",");
    const w = text.length * 7 + 10;
    labels.insertAdjacentHTML("beforeend", `<g class="hop-badge"><title>${esc(ls.join("\n"))}</title>` +
      `<rect x="${x - w}" y="${y}" width="${w}" height="15" rx="7"/><text x="${x - w + 5}" y="${y + 11}">${esc(text)}</text></g>`);
  }
}

// ---- lists: pods, services, ingresses, suggestions ----

function renderLists(withServices) {
  const hosts = sortedHosts();
  const pods = hosts.filter((h) => h.kind === "pod");
  $("pods").innerHTML = pods.map((p) =>
    `<li class="pod" data-pod="${esc(p.id)}"><span class="name">${esc(p.name)}</span> <span class="ip">${esc(hostAddrs(p))}</span> <span class="node">${esc(p.node)}</span></li>`).join("");
  const nodes = hosts.filter((h) => h.kind === "node");
  fillSelect($("chain-node"), nodes.map((n) => n.name));
  fillSelect($("dns-pod"), pods.map((p) => p.name));
  const from = ["client", "external", ...nodes.map((n) => n.name), ...pods.map((p) => "pod/" + p.name.split("/")[1])];
  const to = [];
  for (const s of state.services) {
    for (const p of s.ports || []) {
      to.push(`svc/${s.name}:${p.name || p.port}`);
      // A dual-stack Service's IPv6 cluster IP: tracing it follows IPv6.
      for (const ip of clusterIPs(s).slice(1)) to.push(`[${ip}]:${p.port}`);
      if (p.nodePort) for (const n of nodes) to.push(`${n.name}:${p.nodePort}`);
      const hp = (ip) => (ip.includes(":") ? `[${ip}]` : ip) + ":" + p.port;
      for (const ip of s.loadBalancerIPs || []) to.push(hp(ip));
      for (const ip of s.externalIPs || []) to.push(hp(ip));
    }
  }
  $("from-list").innerHTML = from.map((v) => `<option value="${esc(v)}">`).join("");
  $("to-list").innerHTML = to.map((v) => `<option value="${esc(v)}">`).join("");
  if (!withServices) return;
  $("services").innerHTML = state.services.map((s) => {
    const ports = (s.ports || []).map((p) => `${p.port}${p.nodePort ? ":" + p.nodePort : ""}/${p.protocol}`).join(", ");
    const ips = [...clusterIPs(s), ...(s.externalIPs || []), ...(s.loadBalancerIPs || [])].filter(Boolean).join(" ");
    return `<li class="service" data-svc="${esc(s.namespace + "/" + s.name)}"><b>${esc(s.namespace)}/${esc(s.name)}</b> ${esc(s.type)} ${esc(ips)} ${esc(ports)} <span class="eps">${(s.endpoints || []).length} endpoints</span></li>`;
  }).join("");
  $("ingresses").innerHTML = state.ingresses.map((i) =>
    `<li class="ingress" data-ing="${esc(i.id)}"><b>ingress ${esc(i.namespace)}/${esc(i.name)}</b> ${esc((i.addresses || []).join(" "))}<ul>` +
    (i.rules || []).map((r) => `<li class="service" data-svc="${esc(r.service.replace(/^svc:/, ""))}">${esc(r.host || "*")}${esc(r.path)} → ${esc(r.service.replace(/^svc:/, ""))}:${esc(r.port)}</li>`).join("") +
    "</ul></li>").join("");
  $("gateways").innerHTML = state.gateways.map((g) =>
    `<li class="gateway" data-gw="${esc(g.id)}"><b>gateway ${esc(g.namespace)}/${esc(g.name)}</b> ${esc(g.class)} ${esc((g.addresses || []).join(" "))}` +
    (g.programmed && g.programmed !== "True" ? ` <span class="error">not Programmed</span>` : "") + "<ul>" +
    (g.listeners || []).map((l) => `<li class="listener">listener ${esc(l.name)} ${esc(l.protocol)}/${l.port}${l.hostname ? " " + esc(l.hostname) : ""} (${l.attachedRoutes} routes)</li>`).join("") +
    state.gatewayRoutes.flatMap((r) => (r.parents || []).filter((p) => p.gateway === g.id).map((p) => gatewayRouteItem(r, p))).join("") +
    "</ul></li>").join("");
}

// gatewayRouteItem is a route under one of its Gateways: its status for
// that parent, then its rules: matches → backends.
function gatewayRouteItem(r, p) {
  let st = "";
  if (!p.accepted) st = " (no status)";
  else if (p.accepted !== "True") st = ` <span class="error">not Accepted: ${esc(p.reason)}</span>`;
  else if (p.resolvedRefs && p.resolvedRefs !== "True") st = ` <span class="error">refs: ${esc(p.reason)}</span>`;
  const rules = (r.rules || []).map((rule) => {
    const m = (rule.matches || []).join(" | ") || (r.kind === "TLSRoute" ? "" : "/");
    const bs = (rule.backends || []).map((b) => {
      const svc = b.service.replace(/^svc:/, "");
      return `<span class="service" data-svc="${esc(svc)}">${esc(svc)}${b.port ? ":" + b.port : ""}${(rule.backends || []).length > 1 ? " w" + b.weight : ""}</span>`;
    }).join(", ");
    return `<li>${esc(m)} → ${bs || "(no backends)"}</li>`;
  }).join("");
  return `<li class="route" data-route="${esc(r.id)}">${esc(r.kind)} ${esc(r.namespace)}/${esc(r.name)}${p.sectionName ? " on " + esc(p.sectionName) : ""} ${esc((r.hostnames || []).join(","))}${st}<ul>${rules}</ul></li>`;
}

function fillSelect(sel, values) {
  const cur = sel.value;
  sel.innerHTML = values.map((v) => `<option>${esc(v)}</option>`).join("");
  if (values.includes(cur)) sel.value = cur;
}

async function getJSON(url) {
  const r = await fetch(url, { headers: { Accept: "application/json" } });
  let body;
  try {
    body = await r.json();
  } catch {
    throw new Error(`${r.status} ${r.statusText}`);
  }
  if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
  return body;
}

function showError(id, err) {
  const el = $(id);
  el.hidden = !err;
  el.textContent = err ? String(err.message || err) : "";
}

// ---- chains ----

async function showChains(svc) {
  showError("chain-error", null);
  $("chains").innerHTML = "reading rules…";
  try {
    const t = await getJSON(`api/chains?service=${encodeURIComponent(svc)}&node=${encodeURIComponent($("chain-node").value)}`);
    const node = (n) => {
      const ctr = n.packets !== undefined ? `<span class="ctr">[${n.packets} pkts ${n.bytes} B]</span> ` : "";
      const where = n.rule ? `${n.chain} #${n.rule}` : n.chain;
      return `<li>${ctr}<span class="chain">${esc(where)}</span> <code>${esc(n.text)}</code>` +
        (n.children && n.children.length ? `<ul>${n.children.map(node).join("")}</ul>` : "") + "</li>";
    };
    const note = t.mode === "nftables" ? `<p class="note">nftables mode: kube-proxy's rules keep no counters.</p>` : "";
    $("chains").innerHTML = `<h3>${esc(t.service)} on ${esc(t.node)} (${esc(t.mode)})</h3>${note}` +
      (t.roots && t.roots.length ? `<ul class="tree">${t.roots.map(node).join("")}</ul>` : `<p>no rules for this Service on ${esc(t.node)}</p>`);
  } catch (e) {
    $("chains").innerHTML = "";
    showError("chain-error", e);
  }
}

// ---- trace ----

let lastTrace = null;

async function runTrace(ev) {
  ev.preventDefault();
  showError("trace-error", null);
  $("trace-result").innerHTML = "tracing…";
  const q = new URLSearchParams({ from: $("trace-from").value.trim(), to: $("trace-to").value.trim() });
  if ($("trace-ns").value.trim()) q.set("namespace", $("trace-ns").value.trim());
  if ($("trace-live").checked) q.set("live", "1");
  try {
    lastTrace = await getJSON("api/trace?" + q);
    showPath(0);
  } catch (e) {
    lastTrace = null;
    state.hops = [];
    markHops();
    $("trace-result").innerHTML = "";
    showError("trace-error", e);
  }
}

function showPath(i) {
  const t = lastTrace, r = t.result;
  state.hops = (t.hops && t.hops[i]) || [];
  markHops();
  const paths = (r.paths || []).map((p, j) =>
    `<label class="path" data-verdict="${esc(p.verdict)}" data-dst="${esc(p.dst)}"><input type="radio" name="path" value="${j}" ${j === i ? "checked" : ""}> ` +
    `${esc(p.verdict)} ${(p.probability * 100).toFixed(1)}% → ${esc(p.dst)}${p.endpoint ? " (" + esc(p.endpoint.namespace + "/" + p.endpoint.name) + ")" : ""}</label>`).join("");
  const p = (r.paths || [])[i];
  let steps = "";
  if (p) {
    const ctrs = (t.counters && t.counters[i]) || [];
    steps = `<table class="steps"><tr><th>#</th><th>table/chain</th><th>rule</th><th>counters</th></tr>` +
      (p.steps || []).map((s, k) => {
        const c = ctrs[k];
        return `<tr><td>${k + 1}</td><td>${esc(s.table)}/${esc(s.chain)} #${s.rule}</td><td><code>${esc(s.text)}</code>${s.dnat ? " <b>DNAT " + esc(s.dnat) + "</b>" : ""}${s.masquerade ? " <b>MASQUERADE</b>" : ""}${s.mark ? " mark " + esc(s.mark) : ""}</td>` +
          `<td class="ctr">${c ? `${c.packets} pkts ${c.bytes} B` : "—"}</td></tr>`;
      }).join("") + "</table>";
    if (p.why) steps += `<p class="why">${esc(p.why)}</p>`;
    if (p.route) steps += `<p>route out ${esc(p.route.dev)}${p.route.via ? " via " + esc(p.route.via) : ""}${p.route.node ? " to " + esc(p.route.node) : ""}</p>`;
  }
  let gw = "";
  if (r.gateway) {
    const g = r.gateway;
    const dps = (g.dataPlanes || []).map((d) => (d.node ? d.node + " (" + d.addr + ")" : d.addr)).join(", ");
    gw = `<div class="gateway-hop"><b>gateway ${esc(g.name)}</b> (class ${esc(g.class)}) at ${esc(g.address)}, listeners ` +
      (g.listeners || []).map((l) => `${esc(l.name)} ${esc(l.protocol)}/${l.port}${l.hostname ? " " + esc(l.hostname) : ""}`).join(", ") +
      `<p>announced by ${esc((g.announcers || []).join(", ") || "?")}; delivered to the Gateway data plane (user space) of ${esc(dps || "no node")}; ` +
      `the route, rule and backend are picked per request</p><ul>` +
      (g.routes || []).map((rt) => `<li>${esc(rt.kind)} ${esc(rt.name)} ${esc((rt.hostnames || []).join(",") || "any host")}${rt.accepted !== "True" ? " (not Accepted)" : ""}<ul>` +
        (rt.rules || []).map((ru) => `<li>rule ${ru.index} ${esc((ru.matches || []).join(" | "))} → ` +
          (ru.backends || []).map((b) => `${esc(b.service)} w${b.weight}: ${esc((b.endpoints || []).map((e) => e.pod ? e.pod.namespace + "/" + e.pod.name : e.addr).join(", ") || b.why || "none")}`).join("; ") + "</li>").join("") +
        "</ul></li>").join("") + "</ul></div>";
  }
  let live = "";
  if (r.live) {
    const l = r.live;
    live = `<div class="live"><b>live probe</b> ${esc(l.probe)}: ${l.connected ? "connected" : "not connected"} ${l.confirmed ? "(confirms the prediction)" : "(does not confirm it)"}` +
      (l.error ? ` <span class="error">${esc(l.error)}</span>` : "") +
      (l.moved && l.moved.length ? `<ul>${l.moved.map((m) => `<li>+${m.packets} pkts ${esc(m.table)}/${esc(m.chain)} #${m.rule}</li>`).join("")}</ul>` : "") + "</div>";
  }
  const hops = state.hops.map((h, k) => `<li data-hop="${esc(h.element)}">${k + 1}. ${esc(h.kind)} ${esc(h.element)}${h.label ? ": " + esc(h.label) : ""}${h.verdict ? " <b>" + esc(h.verdict) + "</b>" : ""}</li>`).join("");
  $("trace-result").innerHTML = `<p>${esc(r.from.kind)} ${esc(r.from.name || r.from.ip)} → ${esc(r.to.addr)} (${esc(r.to.kind)}${r.to.service ? " " + esc(r.to.service) : ""}), ${esc(r.proto)}, rules of ${esc(r.node)} (${esc(r.mode)})</p>` +
    `<div class="paths">${paths}</div>${steps}${gw}${live}<ol class="hops">${hops}</ol>`;
  for (const el of $("trace-result").querySelectorAll('input[name="path"]')) {
    el.addEventListener("change", () => showPath(Number(el.value)));
  }
}

// ---- DNS ----

async function runDNS(ev) {
  ev.preventDefault();
  showError("dns-error", null);
  $("dns-result").innerHTML = "asking…";
  const q = new URLSearchParams({ pod: $("dns-pod").value, name: $("dns-name").value.trim(), type: $("dns-type").value });
  try {
    const l = await getJSON("api/dns?" + q);
    $("dns-result").innerHTML = `<p>from ${esc(l.pod)} (netns ${esc(l.netns)}) to ${esc(l.nameserver)}, ndots ${l.ndots}, search ${esc((l.search || []).join(" "))}</p>` +
      `<table class="tries"><tr><th>name tried</th><th>rcode</th><th>answers</th></tr>` +
      (l.tries || []).map((t, i) => `<tr class="${i === l.answer ? "answer" : ""}"><td>${esc(t.name)}</td><td>${esc(t.rcode || t.error)}</td><td>${(t.answers || []).map((a) => `<code>${esc(a)}</code>`).join("<br>")}</td></tr>`).join("") +
      "</table>" + (l.answer < 0 ? "<p class=\"error\">no try got an answer</p>" : "");
  } catch (e) {
    $("dns-result").innerHTML = "";
    showError("dns-error", e);
  }
}

// ---- wiring ----

$("trace-form").addEventListener("submit", runTrace);
$("trace-clear").addEventListener("click", () => {
  lastTrace = null;
  state.hops = [];
  markHops();
  $("trace-result").innerHTML = "";
  showError("trace-error", null);
});
$("dns-form").addEventListener("submit", runDNS);
document.addEventListener("click", (e) => {
  const li = e.target.closest("li.service");
  if (li) showChains(li.dataset.svc);
});
connect();
