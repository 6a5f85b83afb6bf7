#!/usr/bin/env bash
# bench-gateway.sh: minikit's Gateway API data plane against Debian's nginx and haproxy
# doing the same routing, side by side in one run.
#
# Everything runs on loopback under /tmp/peers-minikit: three backends answering like
# nginxdemos/hello's plain-text page; the cafe as a Gateway (an HTTP listener and an HTTPS
# listener with a self-signed cafe-secret) and an HTTPRoute (cafe.example.com, PathPrefix
# /tea -> 3 endpoints, /coffee -> 2); minikit's data plane built in-process from those
# objects as a node builds it (internal/gateway: Compute, BuildTable, ResolveEndpoints,
# Handler, TerminateTLS); nginx and haproxy routing by Host and path prefix to the same
# endpoints over keep-alive upstream connections. Three measurements, the sides
# alternating run by run (the order rotates), medians printed with minikit/nginx and
# minikit/haproxy and each side's spread ((max-min)/min over the runs):
#   1. wrk -t2 -c64 keep-alive requests/s and p99 (cpu=% is the proxy's, 100% = one core;
#      backends_cpu=% the three backends'; a direct wrk run to one backend comes first);
#   2. the proxy's CPU-seconds per 100,000 requests at a fixed rate (RATE; by default 40%
#      of the lowest median ceiling of step 1), sent by `bench-gateway load` over 16
#      keep-alive connections; CPU time from /proc/PID/stat before and after;
#   3. TLS handshakes/s: `bench-gateway handshakes`, a new connection per request, full
#      handshakes (no session resumption, X25519), 16 at a time.
# /proc/loadavg is printed at the start and end of every run: the machine is shared.
#
# Usage: scripts/bench-gateway.sh           (run as root or any user; needs go, nginx, haproxy, wrk)
# Env:   RUNS=5 DURATION=15 WARMUP=3 THREADS=2 CONNS=64 URLPATH=/tea
#        RATE=auto LOAD_SECS=20 LOAD_CONNS=16 HS_SECS=10 HS_CONNS=16
# Output, last lines: wrk=, cpu100k= and tls= summaries with the ratios.
set -u
cd "$(dirname "$0")/.."
DIR=/tmp/peers-minikit
RUNS=${RUNS:-5}
DURATION=${DURATION:-15}
WARMUP=${WARMUP:-3}
THREADS=${THREADS:-2}
CONNS=${CONNS:-64}
URLPATH=${URLPATH:-/tea}
RATE=${RATE:-auto}
LOAD_SECS=${LOAD_SECS:-20}
LOAD_CONNS=${LOAD_CONNS:-16}
HS_SECS=${HS_SECS:-10}
HS_CONNS=${HS_CONNS:-16}
HOST_HDR=cafe.example.com
GO=${GO:-go}; NGINX=${NGINX:-nginx}; HAPROXY=${HAPROXY:-haproxy}; WRK=${WRK:-wrk}
BE_PORTS="18381 18382 18383"; NGX_PORT=18380; NGX_TLS_PORT=18743; HAP_PORT=18385; HAP_TLS_PORT=18745; MK_PORT=18390; MK_TLS_PORT=18791
SIDES="nginx haproxy minikit"

die() { echo "bench-gateway: $*" >&2; exit 1; }
case "${1:-}" in -h|--help) sed -n '2,26p' "$0"; exit 0 ;; esac

if ! command -v "$NGINX" >/dev/null || ! command -v "$HAPROXY" >/dev/null || ! command -v "$WRK" >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing nginx haproxy wrk with apt-get" >&2
    apt-get install -y -qq nginx haproxy wrk >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1; apt-get install -y -qq nginx haproxy wrk >/dev/null 2>&1; }
  fi
fi
for t in "$NGINX" "$HAPROXY" "$WRK" "$GO" openssl curl ss; do command -v "$t" >/dev/null || die "missing tool: $t"; done

RES=$DIR/gateway-results
. scripts/benchlib.sh

ALL_PORTS="$BE_PORTS $NGX_PORT $NGX_TLS_PORT $HAP_PORT $HAP_TLS_PORT $MK_PORT $MK_TLS_PORT"
for p in $ALL_PORTS; do port_busy "$p" && die "127.0.0.1:$p is in use (a previous run still up?)"; done

mkdir -p "$RES" || die "cannot create $DIR"
B=$DIR/bench-gateway
"$GO" build -o "$B" ./scripts/bench-gateway || die "go build ./scripts/bench-gateway failed"
cafe_args $BE_PORTS

confs=$("$B" render -dir "$DIR" -nginx "127.0.0.1:$NGX_PORT,127.0.0.1:$NGX_TLS_PORT" -haproxy "127.0.0.1:$HAP_PORT,127.0.0.1:$HAP_TLS_PORT" "${CAFE[@]}") || die "render failed"
NGX_CONF=$(echo "$confs" | sed -n 1p); HAP_CONF=$(echo "$confs" | sed -n 2p)
"$NGINX" -t -q -p "$DIR/nginx" -c "$NGX_CONF" 2>"$RES/nginx-t.log" || die "nginx -t rejected $NGX_CONF: $(tail -3 "$RES/nginx-t.log")"
"$HAPROXY" -c -q -f "$HAP_CONF" >"$RES/haproxy-c.log" 2>&1 || die "haproxy -c rejected $HAP_CONF: $(tail -3 "$RES/haproxy-c.log")"

i=0; BE_PIDS=
for p in $BE_PORTS; do
  i=$((i + 1))
  "$B" backend -addr "127.0.0.1:$p" -name "backend-$i" >"$RES/backend-$p.log" 2>&1 &
  PIDS+=($!); BE_PIDS="${BE_PIDS:+$BE_PIDS }$!"
done
"$NGINX" -p "$DIR/nginx" -c "$NGX_CONF" >"$RES/nginx.out" 2>&1 &
NGX_PID=$!; PIDS+=("$NGX_PID")
"$HAPROXY" -db -f "$HAP_CONF" >"$RES/haproxy.out" 2>&1 &
HAP_PID=$!; PIDS+=("$HAP_PID")
"$B" proxy -addr "127.0.0.1:$MK_PORT" -tls-addr "127.0.0.1:$MK_TLS_PORT" "${CAFE[@]}" >"$RES/minikit.log" 2>&1 &
MK_PID=$!; PIDS+=("$MK_PID")
for p in $ALL_PORTS; do wait_port "$p" || die "nothing listens on 127.0.0.1:$p (see $RES/)"; done

declare -A BASE URL TLSADDR
BASE[nginx]=http://127.0.0.1:$NGX_PORT; TLSADDR[nginx]=127.0.0.1:$NGX_TLS_PORT
BASE[haproxy]=http://127.0.0.1:$HAP_PORT; TLSADDR[haproxy]=127.0.0.1:$HAP_TLS_PORT
BASE[minikit]=http://127.0.0.1:$MK_PORT; TLSADDR[minikit]=127.0.0.1:$MK_TLS_PORT
# check URL URI [CURL_ARGS...]: the answer is a backend's, for URI.
check() {
  local url=$1 uri=$2 body; shift 2
  body=$(curl -sk --max-time 5 -H "Host: $HOST_HDR" "$@" "$url") || die "request to $url failed"
  case "$body" in *"Server name: backend-"*"URI: $uri"*) ;; *) die "unexpected answer from $url: $body" ;; esac
}
status() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "Host: $2" "$1"; }
for s in $SIDES; do
  URL[$s]=${BASE[$s]}$URLPATH
  check "${URL[$s]}" "$URLPATH"
  check "${BASE[$s]}/coffee/x" /coffee/x
  p=${TLSADDR[$s]##*:}
  check "https://$HOST_HDR:$p$URLPATH" "$URLPATH" --resolve "$HOST_HDR:$p:127.0.0.1"
  code=$(status "${BASE[$s]}/teapot" "$HOST_HDR"); [ "$code" = 404 ] || die "$s answered /teapot with $code, want 404"
  code=$(status "${BASE[$s]}/tea" other.example.com); [ "$code" = 404 ] || die "$s answered Host other.example.com with $code, want 404"
done

side_pids() { case "$1" in nginx) tree "$NGX_PID" ;; haproxy) tree "$HAP_PID" ;; minikit) echo "$MK_PID" ;; direct) echo "" ;; esac; }
loadavg() { cut -d' ' -f1 /proc/loadavg; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.3f", a/b; else print "NA" }'; }
# order R: the sides rotated by R, so each goes first, second and third in turn.
order() { local a=($SIDES) n=3 k; for k in 0 1 2; do printf '%s ' "${a[$(((k + $1) % n))]}"; done; }
declare -A R

echo "# $("$NGINX" -v 2>&1 | sed 's/^nginx version: //'); $("$HAPROXY" -v 2>&1 | head -1 | awk '{print "haproxy/" $3}'); $("$WRK" -v 2>&1 | head -1 | awk '{print "wrk", $2}'); $(openssl version | awk '{print "OpenSSL", $2}'); $("$GO" version | awk '{print $3}'); $(nproc) cores"
echo "# endpoints: tea $(eps $BE_PORTS) coffee $(eps $(echo $BE_PORTS | cut -d' ' -f1-2)); URL path $URLPATH; runs=$RUNS, sides alternating"
echo "# loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# 0. The backends alone: wrk straight to one of the three, with the same load.
set -- $BE_PORTS
l0=$(loadavg); set -- $(wrk_run direct "http://127.0.0.1:$1$URLPATH" "$DURATION" direct-backend); l1=$(loadavg)
echo "direct: one backend alone rps=$1 p99=${4}ms errors=$5 backends_cpu=$7% load=$l0->$l1"
DIRECT_RPS=$1

# 1. Keep-alive requests/s.
echo "# 1. wrk -t$THREADS -c$CONNS -d${DURATION}s --latency -H 'Host: $HOST_HDR' http://127.0.0.1:PORT$URLPATH"
if [ "$WARMUP" -gt 0 ]; then for s in $SIDES; do wrk_run "$s" "${URL[$s]}" "$WARMUP" "warmup-$s" >/dev/null; done; fi
for r in $(seq 1 "$RUNS"); do
  for s in $(order "$r"); do
    l0=$(loadavg); set -- $(wrk_run "$s" "${URL[$s]}" "$DURATION" "wrk$r-$s"); l1=$(loadavg)
    R[$s,rps]="${R[$s,rps]:-} $1"; R[$s,p99]="${R[$s,p99]:-} $4"; R[$s,cpu]="${R[$s,cpu]:-} $6"; R[$s,be]="${R[$s,be]:-} $7"
    echo "wrk run=$r side=$s rps=$1 p50=${2}ms p90=${3}ms p99=${4}ms errors=$5 cpu=$6% backends_cpu=$7% load=$l0->$l1"
    [ "$5" -gt 0 ] && echo "WARNING: run $r $s had $5 errors (see $RES/wrk$r-$s.txt)" >&2
    sleep 1
  done
done
declare -A M
for s in $SIDES; do for k in rps p99 cpu be; do M[$s,$k]=$(median ${R[$s,$k]}); done; done
for s in $SIDES; do
  echo "wrk_median side=$s rps=${M[$s,rps]} p99=${M[$s,p99]}ms cpu=${M[$s,cpu]}% backends_cpu=${M[$s,be]}% rps_spread=$(spread ${R[$s,rps]}) p99_spread=$(spread ${R[$s,p99]})"
done

# 2. CPU-seconds per 100,000 requests at a fixed rate below every side's ceiling.
if [ "$RATE" = auto ]; then
  RATE=$(printf '%s\n' "${M[nginx,rps]}" "${M[haproxy,rps]}" "${M[minikit,rps]}" | sort -g | head -1 | awk '{r = int($1 * 0.4 / 100) * 100; if (r < 100) r = 100; print r}')
fi
echo "# 2. bench-gateway load -rate $RATE -duration ${LOAD_SECS}s -conns $LOAD_CONNS (keep-alive), CPU from /proc/PID/stat"
for r in $(seq 1 "$RUNS"); do
  for s in $(order "$r"); do
    pids=$(side_pids "$s"); l0=$(loadavg); t0=$(ticks $pids); b0=$(ticks $BE_PIDS)
    out=$("$B" load -url "${URL[$s]}" -host "$HOST_HDR" -rate "$RATE" -duration "${LOAD_SECS}s" -conns "$LOAD_CONNS" 2>>"$RES/load.err")
    t1=$(ticks $pids); b1=$(ticks $BE_PIDS); l1=$(loadavg)
    set -- $out
    [ $# -ge 7 ] || die "load against $s failed (see $RES/load.err)"
    c100k=$(awk -v d=$((t1 - t0)) -v hz="$HZ" -v n="$1" 'BEGIN{ printf "%.3f", d/hz/n*100000 }')
    b100k=$(awk -v d=$((b1 - b0)) -v hz="$HZ" -v n="$1" 'BEGIN{ printf "%.3f", d/hz/n*100000 }')
    R[$s,c100k]="${R[$s,c100k]:-} $c100k"; R[$s,lp99]="${R[$s,lp99]:-} $6"
    echo "load run=$r side=$s requests=$1 errors=$3 achieved_rps=$4 p50=${5}ms p99=${6}ms max_late=${7}ms cpu_s_per_100k=$c100k backends_cpu_s_per_100k=$b100k load=$l0->$l1"
    [ "$3" -gt 0 ] && echo "WARNING: load run $r $s had $3 errors" >&2
    sleep 1
  done
done
for s in $SIDES; do for k in c100k lp99; do M[$s,$k]=$(median ${R[$s,$k]}); done; done
for s in $SIDES; do echo "load_median side=$s cpu_s_per_100k=${M[$s,c100k]} p99=${M[$s,lp99]}ms cpu_spread=$(spread ${R[$s,c100k]})"; done

# 3. TLS handshakes/s.
echo "# 3. bench-gateway handshakes -duration ${HS_SECS}s -conns $HS_CONNS: full TLS handshakes, one GET $URLPATH per connection"
for r in $(seq 1 "$RUNS"); do
  for s in $(order "$r"); do
    pids=$(side_pids "$s"); l0=$(loadavg); t0=$(ticks $pids)
    out=$("$B" handshakes -addr "${TLSADDR[$s]}" -host "$HOST_HDR" -path "$URLPATH" -duration "${HS_SECS}s" -conns "$HS_CONNS" 2>>"$RES/handshakes.err")
    t1=$(ticks $pids); l1=$(loadavg)
    set -- $out
    [ $# -ge 3 ] || die "handshakes against $s failed (see $RES/handshakes.err)"
    cpu=$(awk -v d=$((t1 - t0)) -v hz="$HZ" -v s="$HS_SECS" 'BEGIN{ printf "%.0f", d/hz/s*100 }')
    R[$s,hs]="${R[$s,hs]:-} $3"; R[$s,hscpu]="${R[$s,hscpu]:-} $cpu"
    echo "tls run=$r side=$s handshakes=$1 errors=$2 per_s=$3 cpu=$cpu% load=$l0->$l1"
    [ "$2" -gt 0 ] && echo "WARNING: handshake run $r $s had $2 errors (see $RES/handshakes.err)" >&2
    sleep 1
  done
done
for s in $SIDES; do for k in hs hscpu; do M[$s,$k]=$(median ${R[$s,$k]}); done; done
for s in $SIDES; do echo "tls_median side=$s per_s=${M[$s,hs]} cpu=${M[$s,hscpu]}% spread=$(spread ${R[$s,hs]})"; done

echo "# loadavg at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# direct backend rps=$DIRECT_RPS; backends' CPU during wrk (median): nginx ${M[nginx,be]}% haproxy ${M[haproxy,be]}% minikit ${M[minikit,be]}%"
echo "wrk: nginx_rps=${M[nginx,rps]} haproxy_rps=${M[haproxy,rps]} minikit_rps=${M[minikit,rps]} minikit/nginx=$(ratio "${M[minikit,rps]}" "${M[nginx,rps]}") minikit/haproxy=$(ratio "${M[minikit,rps]}" "${M[haproxy,rps]}") nginx_p99=${M[nginx,p99]} haproxy_p99=${M[haproxy,p99]} minikit_p99=${M[minikit,p99]}"
echo "cpu100k: rate=$RATE nginx=${M[nginx,c100k]} haproxy=${M[haproxy,c100k]} minikit=${M[minikit,c100k]} minikit/nginx=$(ratio "${M[minikit,c100k]}" "${M[nginx,c100k]}") minikit/haproxy=$(ratio "${M[minikit,c100k]}" "${M[haproxy,c100k]}")"
echo "tls: nginx=${M[nginx,hs]} haproxy=${M[haproxy,hs]} minikit=${M[minikit,hs]} minikit/nginx=$(ratio "${M[minikit,hs]}" "${M[nginx,hs]}") minikit/haproxy=$(ratio "${M[minikit,hs]}" "${M[haproxy,hs]}")"
