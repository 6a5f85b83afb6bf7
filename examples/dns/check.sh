#!/usr/bin/env bash
# Cluster DNS: service and pod names, the search path and ndots, SRV, PTR. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace dns
DIR=$(dirname "$0")

say "apply hostnames (a ClusterIP Service with port 'http'), busybox1 (hostname + subdomain) and a client pod"
show kubectl apply -n "$NS" -f "$DIR/dns.yaml"
wait_deploy hostnames
k wait --for=condition=Ready pod/client pod/busybox1 --timeout=60s >/dev/null || fail "client or busybox1 is not Ready"
show k get svc,pods -o wide
VIP=$(k get svc hostnames -o jsonpath='{.spec.clusterIP}')
BUSYBOX=$(k get pod busybox1 -o jsonpath='{.status.podIP}')
FQDN=hostnames.$NS.svc.cluster.local

say "the pod's /etc/resolv.conf: the kube-dns Service, the search path of its namespace, ndots:5"
RESOLV=$(show inpod client cat /etc/resolv.conf) || fail "cat /etc/resolv.conf in the client pod"
echo "$RESOLV"
has "$RESOLV" "nameserver 10.96.0.10" || fail "resolv.conf does not point at kube-dns 10.96.0.10"
has "$RESOLV" "search $NS.svc.cluster.local svc.cluster.local cluster.local" || fail "resolv.conf lacks the search path of namespace $NS"
has "$RESOLV" "options ndots:5" || fail "resolv.conf lacks ndots:5"

# resolves NAME WANT [DIG ARGS...]: dig +short from the client pod answers exactly WANT.
resolves() {
  local name=$1 want=$2; shift 2
  local got
  got=$(inpod client dig +short "$@" "$name" | tr '\n' ' ' | sed 's/ $//')
  echo "$got"
  [ "$got" = "$want" ]
}
check() {
  printf '%-62s -> ' "dig ${*:3}${3:+ }$1"
  eventually 15 resolves "$@" || fail "dig ${*:3} $1 answered '$OUT', want '$2'"
  echo "$OUT"
}

say "a Service's name, short or long: the search path completes it (dig +search, as libc does)"
check hostnames "$VIP" +search
check "hostnames.$NS" "$VIP" +search
check "$FQDN" "$VIP"
check kubernetes.default 10.96.0.1 +search
# replicas NAME: what each kube-dns endpoint (each CoreDNS pod), asked directly, answers for NAME.
replicas() {
  local ip
  for ip in $(kubectl -n kube-system get endpointslices -l kubernetes.io/service-name=kube-dns -o jsonpath='{.items[*].endpoints[*].addresses[0]}'); do
    printf '  @%-15s %s\n' "$ip" "$(inpod client dig +short +time=2 +tries=1 "@$ip" "$1" 2>&1 | tr '\n' ' ')"
  done
}
# libc asks one replica, chosen per socket by the proxy; each learns a new
# Service from its own watch. A miss is retried, and says what each replica knew.
if ! GETENT=$(inpod client getent hosts hostnames 2>&1); then
  echo "getent hosts hostnames missed ($GETENT); each replica answers $FQDN:"
  replicas "$FQDN"
  eventually 15 inpod client getent hosts hostnames || fail "getent hosts hostnames failed: $OUT"
  GETENT=$OUT
fi
printf '%-62s -> %s\n' "getent hosts hostnames   (libc, as curl resolves)" "$GETENT"
has "$GETENT" "$VIP" || fail "getent hosts hostnames answered '$GETENT', want $VIP"

say "ndots:5: a name with fewer than 5 dots tries every search domain first (dig +showsearch)"
# tries NAME: the queries a lookup of NAME makes, with their answers.
tries() {
  inpod client dig +search +showsearch "$1" A | awk '/status:/ {s=$6; sub(",", "", s)} /^;[^;].*[ \t]IN[ \t]/ {q=substr($1, 2)} /^;; MSG SIZE/ {print "  " q " -> " s}'
}
SEARCHED=$(tries my.database.example.com)
echo "dig +search +showsearch my.database.example.com"; echo "$SEARCHED"
[ "$(grep -c NXDOMAIN <<<"$SEARCHED")" = 3 ] && grep -q "my.database.example.com.$NS.svc.cluster.local. -> NXDOMAIN" <<<"$SEARCHED" &&
  grep -q "^  my.database.example.com. -> NOERROR" <<<"$SEARCHED" || fail "my.database.example.com did not go through the 3 search domains before the name itself"
ABSOLUTE=$(tries my.database.example.com.)
echo "dig +search +showsearch my.database.example.com.   (a trailing dot: absolute, no search)"; echo "$ABSOLUTE"
[ "$(wc -l <<<"$ABSOLUTE")" = 1 ] || fail "the absolute name was searched"

say "SRV: _<port name>._<protocol>.<service> gives the port number and the target"
check "_http._tcp.$FQDN" "0 100 80 $FQDN." SRV

say "PTR: the VIP maps back to the Service's name, and a named pod's IP to the pod's name"
check "$VIP" "$FQDN." -x
PODNAME=busybox-1.busybox-subdomain.$NS.svc.cluster.local
check "$PODNAME" "$BUSYBOX"
check "$BUSYBOX" "$PODNAME." -x
HOSTNAME_F=$(inpod busybox1 hostname -f) || fail "hostname -f in busybox1"
printf '%-62s -> %s\n' "hostname -f   (in busybox1)" "$HOSTNAME_F"
[ "$HOSTNAME_F" = "$PODNAME" ] || fail "busybox1's hostname -f is '$HOSTNAME_F', want $PODNAME"

say "a missing name is NXDOMAIN, answered by the cluster DNS itself (aa)"
NX=$(inpod client dig "nope.$NS.svc.cluster.local" A)
grep -q 'status: NXDOMAIN' <<<"$NX" && grep -q 'flags: qr aa' <<<"$NX" || fail "nope.$NS.svc.cluster.local: $NX"
echo "nope.$NS.svc.cluster.local -> NXDOMAIN"

shown "hostnames, hostnames.$NS and the FQDN -> $VIP through search path and ndots:5; SRV 0 100 80; PTR of the VIP and of busybox-1's IP"
