#!/usr/bin/env bash
# Gateway API: the chapter's cafe as a Gateway and HTTPRoutes, TLS by SNI, a canary by weight and by header. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace gateway
DIR=$(dirname "$0")
TMP=$(mktemp -d)
on_exit "rm -rf $TMP"

say "the GatewayClass minikit is installed with the cluster"
CLASS=$(show kubectl get gatewayclass minikit) || fail "no GatewayClass minikit: $CLASS"
echo "$CLASS"
[[ $(kubectl get gatewayclass minikit -o jsonpath='{.status.conditions[?(@.type=="Accepted")].status}') == True ]] || fail "GatewayClass minikit is not Accepted: $CLASS"

say "apply the cafe: tea (3 pods) and coffee (2 pods), the same Deployments and Services as examples/ingress"
show kubectl apply -n "$NS" -f "$DIR/cafe.yaml"

say "cafe-secret: a self-signed certificate for cafe.example.com, as a kubernetes.io/tls Secret"
show openssl req -x509 -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -days 1 -subj /CN=cafe.example.com -addext subjectAltName=DNS:cafe.example.com \
  -keyout "$TMP/cafe.key" -out "$TMP/cafe.crt" 2>/dev/null
show k create secret tls cafe-secret --cert "$TMP/cafe.crt" --key "$TMP/cafe.key"

say "cafe-gateway (class minikit): listener http on 80 and listener https on 443 (TLS terminated with cafe-secret), both for cafe.example.com"
show kubectl apply -n "$NS" -f "$DIR/cafe-gateway.yaml"
say "cafe-route: /tea and /coffee on the https listener; cafe-redirect: everything on the http listener to https"
show kubectl apply -n "$NS" -f "$DIR/cafe-route.yaml"
wait_deploy tea
wait_deploy coffee

# programmed: the Gateway is Programmed and has an address (the stub's, from the LoadBalancer pool).
programmed() {
  local p a
  p=$(k get gateway cafe-gateway -o jsonpath='{.status.conditions[?(@.type=="Programmed")].status}')
  a=$(k get gateway cafe-gateway -o jsonpath='{.status.addresses[0].value}')
  echo "Programmed=$p address=$a"
  [ "$p" = True ] && [ -n "$a" ]
}
eventually 30 programmed || fail "cafe-gateway is not Programmed with an address: $OUT; $(k get gateway cafe-gateway -o jsonpath='{.status.conditions}')"
ADDR=$(k get gateway cafe-gateway -o jsonpath='{.status.addresses[0].value}')
HOSTADDR=$ADDR
[[ $ADDR != *:* ]] || HOSTADDR="[$ADDR]"
# parents ROUTE: each parent of a route, with its conditions (type=status (reason)).
PARENTS='{range .status.parents[*]}{.parentRef.name}/{.parentRef.sectionName}: {range .conditions[*]}{.type}={.status} ({.reason}) {end}{"\n"}{end}'
parents() { k get httproute "$1" -o jsonpath="$PARENTS"; }
routed() {
  local r
  r=$(parents cafe-route)
  echo "$r"
  has "$r" "cafe-gateway/https: Accepted=True (Accepted) ResolvedRefs=True (ResolvedRefs)"
}
eventually 15 routed || fail "cafe-route is not Accepted with its refs resolved on cafe-gateway/https: $OUT"
ROUTED=$OUT
show kubectl -n "$NS" get gateway,httproute
echo "\$ kubectl -n $NS get httproute cafe-route -o jsonpath='$PARENTS'"
echo "$ROUTED"
has "$(parents cafe-redirect)" "cafe-gateway/http: Accepted=True" || fail "cafe-redirect is not Accepted on cafe-gateway/http: $(parents cafe-redirect)"
ATTACHED=$(k get gateway cafe-gateway -o jsonpath='{range .status.listeners[*]}{.name}={.attachedRoutes} {end}')
echo "attachedRoutes per listener: $ATTACHED"
[ "$ATTACHED" = "http=1 https=1 " ] || fail "cafe-gateway's listeners have attachedRoutes '$ATTACHED', want http=1 https=1"

say "behind the Gateway: a LoadBalancer Service whose EXTERNAL-IP is the Gateway's address and whose endpoints are the nodes' data plane ports"
show k get svc cafe-gateway-minikit
[ "$(k get svc cafe-gateway-minikit -o jsonpath='{.status.loadBalancer.ingress[0].ip}')" = "$ADDR" ] || fail "Service cafe-gateway-minikit's EXTERNAL-IP is not the Gateway's address $ADDR"
SLICE=$(show k get endpointslices -l kubernetes.io/service-name=cafe-gateway-minikit)
echo "$SLICE"
has "$SLICE" "$NODE1" || fail "the Gateway's EndpointSlice does not list node1 ($NODE1): $SLICE"
# lb_rule: node1's service proxy sends ADDR:443 on (kube-proxy's rule for a loadbalancer IP).
if [ "$(proxy_mode)" = nftables ]; then
  lb_rule() { nft_elem node1 service-ips "$ADDR \. tcp \. 443 : goto external-[^ ,}]+"; }
else
  lb_rule() { on node1 iptables-save -t nat | grep -E -- "^-A KUBE-SERVICES -d $ADDR/32 .*loadbalancer IP.*--dport 443 -j KUBE-EXT-"; }
fi
eventually 15 lb_rule || fail "node1's service proxy has no rule for $ADDR:443 ($(proxy_mode) mode)"
RULE=$OUT
echo "node1's service proxy: $RULE"

say "from the client, through the Gateway's address $ADDR: /tea and /coffee over HTTPS (SNI cafe.example.com, verified against cafe.crt)"
RESOLVE=(--resolve "cafe.example.com:443:$HOSTADDR" --resolve "cafe.example.com:80:$HOSTADDR")
# pods LABEL: "name=podIP" of the pods of an app, space separated.
pods() { k get pods -l "app=$1" -o jsonpath='{range .items[*]}{.metadata.name}={.status.podIP}{" "}{end}'; }
# served PATH PODS [CURL ARGS]: the request reaches one of PODS, which names
# itself, its own address (the proxy connected straight to the pod) and the URI PATH.
served() {
  local path=$1 want=$2 out name addr; shift 2
  out=$(on client curl -sS --max-time 2 --cacert "$TMP/cafe.crt" "${RESOLVE[@]}" "$@" "https://cafe.example.com$path") || { echo "$out"; return 1; }
  name=$(sed -n 's/^Server name: //p' <<<"$out")
  addr=$(sed -n 's/^Server address: //p' <<<"$out")
  echo "Server name: $name  Server address: $addr  (URI: $(sed -n 's/^URI: //p' <<<"$out"))"
  [[ " $want " == *" $name=${addr%:8080} "* ]] && has "$out" "URI: $path"
}
TEA=$(pods tea)
COFFEE=$(pods coffee)
for path in /tea /tea /coffee; do
  app=${path#/}; want=$TEA; [ "$app" = coffee ] && want=$COFFEE
  printf '$ curl --cacert cafe.crt --resolve cafe.example.com:443:%s https://cafe.example.com%s  -> ' "$HOSTADDR" "$path"
  eventually 20 served "$path" "$want" || fail "https $path: want a $app pod ($want), got: $OUT"
  echo "$OUT"
done
echo "-> curl verified the certificate against cafe.crt: the https listener served cafe-secret for the SNI cafe.example.com"
printf '$ curl --cacert cafe.crt --resolve www.example.com:443:%s https://www.example.com/tea  -> ' "$HOSTADDR"
if OTHER=$(on client curl -sS --max-time 2 --cacert "$TMP/cafe.crt" --resolve "www.example.com:443:$HOSTADDR" https://www.example.com/tea 2>&1); then
  fail "a request with SNI www.example.com was answered; no listener covers that name: $OTHER"
fi
echo "$OTHER"
echo "-> no listener has a certificate for www.example.com: the handshake fails"

say "no rule for /: 404; plain HTTP: cafe-redirect answers 301 to https, and curl -L follows it to the same address"
code() { on client curl -sS -o /dev/null -w '%{http_code} %{redirect_url}' --max-time 2 --cacert "$TMP/cafe.crt" "${RESOLVE[@]}" "$1"; }
ROOT=$(code https://cafe.example.com/)
echo "https://cafe.example.com/     -> $ROOT"
[ "$ROOT" = "404 " ] || fail "https / answered '$ROOT', want 404"
REDIRECT=$(code http://cafe.example.com/tea)
echo "http://cafe.example.com/tea   -> $REDIRECT"
[ "$REDIRECT" = "301 https://cafe.example.com/tea" ] || fail "http /tea answered '$REDIRECT', want 301 https://cafe.example.com/tea"
printf '$ curl -L --cacert cafe.crt --resolve cafe.example.com:80:%s --resolve cafe.example.com:443:%s http://cafe.example.com/tea  -> ' "$HOSTADDR" "$HOSTADDR"
FOLLOWED=$(on client curl -sS -L --max-time 2 --cacert "$TMP/cafe.crt" "${RESOLVE[@]}" http://cafe.example.com/tea) || fail "curl -L http://cafe.example.com/tea: $FOLLOWED"
NAME=$(sed -n 's/^Server name: //p' <<<"$FOLLOWED")
echo "Server name: $NAME"
[[ " $TEA " == *" $NAME="* ]] || fail "the followed redirect reached '$NAME', not a tea pod ($TEA): $FOLLOWED"

say "a canary: coffee-v2 beside coffee; cafe-route sends x-canary: always to v2 and splits the rest 80/20 by weight"
show kubectl apply -n "$NS" -f "$DIR/coffee-v2.yaml"
wait_deploy coffee-v2
show kubectl apply -n "$NS" -f "$DIR/cafe-route-canary.yaml"
V1=$(pods coffee)
V2=$(pods coffee-v2)
# tally N [CURL ARGS]: N requests to /coffee from the client, the Server names counted.
tally() {
  local n=$1; shift
  on client sh -c 'n=$1; shift; i=0; while [ $i -lt $n ]; do curl -sS --max-time 5 "$@" | sed -n "s/^Server name: //p"; i=$((i+1)); done' \
    sh "$n" --cacert "$TMP/cafe.crt" "${RESOLVE[@]}" "$@" https://cafe.example.com/coffee | sort | uniq -c
}
# only_v2: ten requests with the header, every one answered by a v2 pod.
only_v2() {
  local t
  t=$(tally 10 -H 'x-canary: always')
  echo "$t"
  [ "$(awk '{s += $1} END {print s}' <<<"$t")" = 10 ] || return 1
  while read -r _ name; do [[ " $V2 " == *" $name="* ]] || return 1; done <<<"$t"
}
printf "\$ minikit lab exec client -- curl -s --cacert cafe.crt --resolve cafe.example.com:443:%s -H 'x-canary: always' https://cafe.example.com/coffee   (10 times; Server name counted)\n" "$HOSTADDR"
eventually 20 only_v2 || fail "with x-canary: always, want only coffee-v2 pods ($V2), got: $OUT"
echo "$OUT"
printf '$ minikit lab exec client -- curl -s --cacert cafe.crt --resolve cafe.example.com:443:%s https://cafe.example.com/coffee   (50 times; Server name counted)\n' "$HOSTADDR"
SPLIT=$(tally 50)
echo "$SPLIT"
n1=0 n2=0
while read -r c name; do
  if [[ " $V1 " == *" $name="* ]]; then n1=$((n1 + c))
  elif [[ " $V2 " == *" $name="* ]]; then n2=$((n2 + c))
  else fail "/coffee was answered by '$name', neither coffee ($V1) nor coffee-v2 ($V2)"; fi
done <<<"$SPLIT"
echo "-> coffee (weight 80): $n1, coffee-v2 (weight 20): $n2"
[ $((n1 + n2)) = 50 ] || fail "$((n1 + n2)) of 50 requests to /coffee were answered"
[ "$n1" -gt 0 ] && [ "$n2" -gt 0 ] || fail "want both coffee and coffee-v2 in 50 requests at 80/20, got $n1 and $n2"
[ "$n1" -gt "$n2" ] || fail "coffee (weight 80) answered $n1 of 50, coffee-v2 (weight 20) $n2: want coffee the larger share"

say "a mistake: milk-route's backendRef names milk-svc, which does not exist"
show kubectl apply -n "$NS" -f "$DIR/milk-route.yaml"
broken() {
  local r
  r=$(k get httproute milk-route -o jsonpath='{range .status.parents[*].conditions[?(@.type=="ResolvedRefs")]}{.status} {.reason}: {.message}{end}')
  echo "$r"
  has "$r" "False BackendNotFound: " && has "$r" milk-svc
}
eventually 15 broken || fail "milk-route's ResolvedRefs is not False BackendNotFound naming milk-svc: $OUT"
REASON=$OUT
echo "\$ kubectl -n $NS get httproute milk-route -o jsonpath='$PARENTS'"
parents milk-route
has "$(parents milk-route)" "Accepted=True" || fail "milk-route is not Accepted (a missing backend does not stop a route attaching): $(parents milk-route)"
echo "ResolvedRefs: $REASON"
milk500() { local c; c=$(code https://cafe.example.com/milk); echo "$c"; [ "$c" = "500 " ]; }
eventually 15 milk500 || fail "https /milk answered '$OUT', want 500"
echo "https://cafe.example.com/milk  -> $OUT (the rule matched; it has no valid backend)"

shown "cafe-gateway ($ADDR, Programmed) with cafe-route: https://cafe.example.com/tea and /coffee reached tea and coffee pods, TLS verified with cafe-secret by SNI; http 301 to https; canary coffee $n1 / coffee-v2 $n2 of 50 at 80/20, x-canary: always only v2; a missing backend Service: ResolvedRefs False BackendNotFound, 500"
