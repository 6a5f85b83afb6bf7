#!/usr/bin/env bash
# bench-dns.sh: minikit's cluster DNS side by side with CoreDNS, measured with dnsperf.
#
# Starts `minikit server --disable-agent` (API and controllers only, on loopback), creates the
# objects behind the names of ../shared/bench/dns-bench.sh's zone (1,000 ClusterIP services,
# every 4th with a named port for SRV, 100 headless services with 3 ready endpoints each, plus
# kube-system/kube-dns), runs minikit's DNS server (test/dns/dnsserver: the dns package with its
# informers watching that API, as on a node) on 127.0.0.1:$DNS_PORT, and hands it to the shared
# script, which installs CoreDNS ($COREDNS_VERSION, go install) and dnsperf (apt) if needed, serves
# the same names from a zone file with CoreDNS (`file`, then `file` + `cache 30`) and alternates
# dnsperf runs between the two servers. Every configuration ends with the line
#   coredns_qps=N other_qps=N ratio=R config=... clients=... qps_limit=...
# (other = minikit), then this script prints minikit's peak RSS.
#
# With K8S=1 it also measures CoreDNS's kubernetes plugin (+ cache 30) watching the same minikit
# API against minikit, alternating, with the same dnsperf settings (the "ideal" comparison: both
# servers answer from the same API objects); with IMAGE=1 (default) minikit's side there is the
# built-in coredns image (`minikit __image-run registry.k8s.io/coredns/coredns`, as the
# kube-system/coredns pods run it) with the same Corefile.
#
# Environment (defaults): WORK=/tmp/minikit-bench-dns API_PORT=16449 DNS_PORT=5355
#   SHARED=<repo>/../shared  K8S=1  IMAGE=1  NOMEMO=0 (1: also measure minikit without its reply memo)
#   and everything dns-bench.sh reads (RUNS, DURATION, CLIENTS, CONFIGS, QPS_LIMIT, ...).
# Needs root only for apt-get (dnsperf); traffic stays on 127.0.0.1; everything stays in $WORK.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${SHARED:-$ROOT/../shared}
WORK=${WORK:-/tmp/minikit-bench-dns}
API_PORT=${API_PORT:-16449}
DNS_PORT=${DNS_PORT:-5355}
K8S=${K8S:-1}
IMAGE=${IMAGE:-1}
NOMEMO=${NOMEMO:-0}
GO=${GO:-go}
export RUNS=${RUNS:-3} DURATION=${DURATION:-20} CLIENTS=${CLIENTS:-"8"}
case $WORK in /tmp/*) ;; *) echo "WORK must be under /tmp" >&2; exit 2 ;; esac
BENCH=$SHARED/bench/dns-bench.sh
[ -f "$BENCH" ] || { echo "missing $BENCH (set SHARED)" >&2; exit 2; }

rm -rf "$WORK/api"
mkdir -p "$WORK/bin" "$WORK/api"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

echo "# building minikit and the standalone DNS server" >&2
(cd "$ROOT" && "$GO" build -o "$WORK/bin/minikit" ./cmd/minikit && "$GO" build -o "$WORK/bin/dnsserver" ./test/dns/dnsserver)
command -v dnsperf >/dev/null || { apt-get install -y dnsperf >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y dnsperf >/dev/null; }; }
command -v dig >/dev/null || { apt-get install -y dnsutils >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y dnsutils >/dev/null; }; }

"$WORK/bin/minikit" server --disable-agent --data-dir "$WORK/api" --listen "127.0.0.1:$API_PORT" --log-level warn \
  >"$WORK/api.log" 2>&1 &
PIDS+=($!)
KC=$WORK/api/kubeconfig
for _ in $(seq 150); do
  [ -s "$KC" ] && "$WORK/bin/minikit" get ns --kubeconfig "$KC" >/dev/null 2>&1 && break
  sleep 0.2
done
"$WORK/bin/minikit" get ns --kubeconfig "$KC" >/dev/null || { echo "API did not come up: $(tail -5 "$WORK/api.log")" >&2; exit 1; }

echo "# creating 1,100 services and 100 EndpointSlices" >&2
python3 - "$WORK/objects.yaml" <<'PY'
import json, sys
items = []
def svc(ns, name, ports, headless=False, labels=None):
    s = {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": ns, "name": name},
         "spec": {"ports": ports}}
    if labels: s["metadata"]["labels"] = labels
    if headless: s["spec"]["clusterIP"] = "None"
    return s
items.append(svc("kube-system", "kube-dns", [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}],
                 labels={"k8s-app": "kube-dns"}))
for i in range(1000):   # svc0..svc999; every 4th has a named port, hence _http._tcp SRV
    items.append(svc("default", "svc%d" % i, [{"name": "http" if i % 4 == 0 else "", "port": 80, "protocol": "TCP"}]))
for i in range(100):    # hl0..hl99, headless without selector, 3 ready endpoints each
    items.append(svc("default", "hl%d" % i, [{"name": "http", "port": 80, "protocol": "TCP"}], headless=True))
    eps = [{"addresses": ["10.244.%d.%d" % (i // 80, (i % 80) * 3 + k + 2)], "conditions": {"ready": True}} for k in range(3)]
    items.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                  "metadata": {"namespace": "default", "name": "hl%d-bench" % i,
                               "labels": {"kubernetes.io/service-name": "hl%d" % i, "endpointslice.kubernetes.io/managed-by": "bench"}},
                  "addressType": "IPv4", "endpoints": eps, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]})
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(sys.argv[1], "w"))
PY
"$WORK/bin/minikit" apply --validate=false --kubeconfig "$KC" -f "$WORK/objects.yaml" >"$WORK/apply.log" 2>&1 || { tail -5 "$WORK/apply.log" >&2; exit 1; }

"$WORK/bin/dnsserver" --kubeconfig "$KC" --listen "127.0.0.1:$DNS_PORT" >"$WORK/dnsserver.out" 2>"$WORK/dnsserver.log" &
MK_PID=$!
PIDS+=($MK_PID)
for _ in $(seq 150); do
  [ "$(dig +short +time=1 +tries=1 -p "$DNS_PORT" @127.0.0.1 hl99.default.svc.cluster.local A 2>/dev/null | wc -l)" = 3 ] &&
    [ -n "$(dig +short +time=1 +tries=1 -p "$DNS_PORT" @127.0.0.1 svc999.default.svc.cluster.local A 2>/dev/null)" ] && break
  sleep 0.2
done
[ "$(dig +short -p "$DNS_PORT" @127.0.0.1 hl99.default.svc.cluster.local A | wc -l)" = 3 ] || { echo "minikit dns did not load the zone: $(tail -5 "$WORK/dnsserver.log")" >&2; exit 1; }
echo "# minikit dns (pid $MK_PID) serves the zone; RSS now $(awk '/^VmRSS/{print $2}' /proc/$MK_PID/status) kB" >&2

OTHER_PID=$MK_PID WORK=$WORK/peer "$BENCH" "127.0.0.1:$DNS_PORT"
echo "minikit_rss_kb=$(awk '/^VmRSS/{print $2}' /proc/$MK_PID/status) minikit_hwm_kb=$(awk '/^VmHWM/{print $2}' /proc/$MK_PID/status)"

if [ "$K8S" = 1 ]; then
  # CoreDNS's kubernetes plugin on the same API: both servers answer from the same objects.
  # dns-bench.sh runs CoreDNS only from its zone file, so this comparison runs here, with
  # the same dnsperf settings, alternating run by run.
  COREDNS=${BIN:-/tmp/peers/bin}/coredns
  K8S_PORT=$((DNS_PORT + 1))
  printf 'cluster.local {\n    bind 127.0.0.1\n    kubernetes cluster.local {\n        kubeconfig %s\n    }\n    cache 30\n}\n' "$KC" >"$WORK/Corefile.k8s"
  "$COREDNS" -conf "$WORK/Corefile.k8s" -dns.port "$K8S_PORT" >"$WORK/coredns-k8s.log" 2>&1 &
  CK_PID=$!; PIDS+=($CK_PID)
  for _ in $(seq 150); do [ "$(dig +short +time=1 -p "$K8S_PORT" @127.0.0.1 hl99.default.svc.cluster.local A 2>/dev/null | wc -l)" = 3 ] && break; sleep 0.2; done
  if [ "$IMAGE" = 1 ]; then
    # minikit as the cluster runs it: the built-in coredns image (a pod's process) with the
    # same Corefile, its kubernetes plugin watching the same API.
    kill "$MK_PID"; wait "$MK_PID" 2>/dev/null || true
    printf 'cluster.local:%s {\n    bind 127.0.0.1\n    kubernetes cluster.local {\n        kubeconfig %s\n    }\n    cache 30\n}\n' "$DNS_PORT" "$KC" >"$WORK/Corefile.image"
    "$WORK/bin/minikit" __image-run registry.k8s.io/coredns/coredns -conf "$WORK/Corefile.image" >"$WORK/coredns-image.log" 2>&1 &
    MK_PID=$!; PIDS+=($MK_PID)
    for _ in $(seq 150); do [ "$(dig +short +time=1 -p "$DNS_PORT" @127.0.0.1 hl99.default.svc.cluster.local A 2>/dev/null | wc -l)" = 3 ] && break; sleep 0.2; done
    [ "$(dig +short -p "$DNS_PORT" @127.0.0.1 hl99.default.svc.cluster.local A | wc -l)" = 3 ] || { echo "the coredns image did not load the zone: $(tail -5 "$WORK/coredns-image.log")" >&2; exit 1; }
    echo "# kubernetes+cache: minikit is the built-in coredns image (pid $MK_PID)" >&2
  fi
  if [ "$(dig +short -p "$K8S_PORT" @127.0.0.1 hl99.default.svc.cluster.local A | wc -l)" != 3 ]; then
    echo "coredns kubernetes plugin did not load the zone: $(tail -5 "$WORK/coredns-k8s.log")" >&2
  else
    Q=$WORK/peer/data/queries.txt
    for clients in $CLIENTS; do
      : >"$WORK/k8s.runs"
      for run in $(seq "$RUNS"); do
        order="coredns minikit"; [ $((run % 2)) = 0 ] && order="minikit coredns"
        for who in $order; do
          port=$DNS_PORT pid=$MK_PID; [ "$who" = coredns ] && port=$K8S_PORT pid=$CK_PID
          t0=$(awk '{print $14+$15}' /proc/$pid/stat)
          dnsperf -s 127.0.0.1 -p "$port" -d "$Q" -l "$DURATION" -c "$clients" -q "${OUTSTANDING:-100}" ${QPS_LIMIT:+-Q "$QPS_LIMIT"} -v \
            >"$WORK/k8s.$who.$run.out" 2>&1 || true
          t1=$(awk '{print $14+$15}' /proc/$pid/stat)
          python3 - "$WORK/k8s.$who.$run.out" "$who" "$run" "$((t1 - t0))" "$(getconf CLK_TCK)" "$(awk '/^VmHWM/{print $2}' /proc/$pid/status)" >>"$WORK/k8s.runs" <<'PY'
import re, sys
path, who, run, ticks, hz, hwm = sys.argv[1:]
lat, text = [], []
for line in open(path, errors="replace"):
    if line.startswith("> "):
        try: lat.append(float(line.split()[-1]))
        except ValueError: pass
    else: text.append(line)
s = "".join(text)
qps = float((re.search(r"Queries per second:\s+([\d.]+)", s) or [0, 0])[1])
done = int((re.search(r"Queries completed:\s+(\d+)", s) or [0, 0])[1])
lat.sort()
p = lambda q: 1000 * lat[min(len(lat) - 1, int(q * len(lat)))] if lat else 0
print(who, run, "%.0f" % qps, "%.3f" % p(.5), "%.3f" % p(.99), "%.2f" % (int(ticks) / int(hz) * 1e6 / max(done, 1)), hwm)
PY
        done
      done
      python3 - "$WORK/k8s.runs" "$clients" "${QPS_LIMIT:-none}" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for who in ("coredns", "minikit"):
    r = [x for x in rows if x[0] == who]
    med[who] = [st.median(float(x[i]) for x in r) for i in range(2, 7)]
    print("[k8s+cache c=%s Q=%s] %s: qps=%.0f p50_ms=%.3f p99_ms=%.3f cpu_us_per_q=%.2f hwm_kb=%.0f" % ((sys.argv[2], sys.argv[3], who) + tuple(med[who])))
print("coredns_k8s_qps=%.0f minikit_qps=%.0f ratio=%.3f config=kubernetes+cache clients=%s qps_limit=%s" %
      (med["coredns"][0], med["minikit"][0], med["minikit"][0] / med["coredns"][0] if med["coredns"][0] else 0, sys.argv[2], sys.argv[3]))
PY
    done
  fi
fi

if [ "$NOMEMO" = 1 ]; then
  kill "$MK_PID"; wait "$MK_PID" 2>/dev/null || true
  "$WORK/bin/dnsserver" --kubeconfig "$KC" --listen "127.0.0.1:$DNS_PORT" --no-memo >"$WORK/dnsserver-nomemo.out" 2>"$WORK/dnsserver-nomemo.log" &
  MK_PID=$!; PIDS+=($MK_PID)
  for _ in $(seq 150); do [ "$(dig +short +time=1 -p "$DNS_PORT" @127.0.0.1 hl99.default.svc.cluster.local A 2>/dev/null | wc -l)" = 3 ] && break; sleep 0.2; done
  echo "# minikit without the reply memo" >&2
  OTHER_PID=$MK_PID WORK=$WORK/peer CONFIGS=cache "$BENCH" "127.0.0.1:$DNS_PORT"
fi
