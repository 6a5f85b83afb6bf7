#!/usr/bin/env bash
# Ingress: the chapter's cafe example, TLS, through the controller's NodePort. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace ingress
DIR=$(dirname "$0")
TMP=$(mktemp -d)
on_exit "rm -rf $TMP"

say "apply the cafe: tea (3 pods) and coffee (2 pods), nginxdemos/nginx-hello:plain-text, and their Services"
show kubectl apply -n "$NS" -f "$DIR/cafe.yaml"

say "cafe-secret: a self-signed certificate for cafe.example.com, as a kubernetes.io/tls Secret"
show openssl req -x509 -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -days 1 -subj /CN=cafe.example.com -addext subjectAltName=DNS:cafe.example.com \
  -keyout "$TMP/cafe.key" -out "$TMP/cafe.crt" 2>/dev/null
show k create secret tls cafe-secret --cert "$TMP/cafe.crt" --key "$TMP/cafe.key"

say "the chapter's cafe-ingress, verbatim (extensions/v1beta1: kubectl warns, the API converts it to networking.k8s.io/v1)"
APPLIED=$(show kubectl apply -n "$NS" -f "$DIR/cafe-ingress.yaml" 2>&1) || fail "kubectl apply cafe-ingress.yaml: $APPLIED"
echo "$APPLIED"
has "$APPLIED" "cafe-ingress created" || fail "cafe-ingress was not created"
wait_deploy tea
wait_deploy coffee
addressed() { local o; o=$(k get ingress cafe-ingress); echo "$o"; has "$o" "$NODE1" && has "$o" "80, 443"; }
eventually 15 addressed || fail "cafe-ingress has no ADDRESS: $OUT"
echo "\$ kubectl -n $NS get ingress cafe-ingress"; echo "$OUT"

HTTPS=$(kubectl -n ingress-nginx get svc ingress-nginx-controller -o jsonpath='{.spec.ports[?(@.name=="https")].nodePort}')
HTTP=$(kubectl -n ingress-nginx get svc ingress-nginx-controller -o jsonpath='{.spec.ports[?(@.name=="http")].nodePort}')
[ -n "$HTTPS" ] && [ -n "$HTTP" ] || fail "the ingress-nginx-controller Service has no http/https NodePorts"
show kubectl -n ingress-nginx get svc ingress-nginx-controller

say "from the client, through node2's NodePort $HTTPS -> a node's controller -> a pod: /tea and /coffee by path"
TEA=$(k get pods -l app=tea -o jsonpath='{.items[*].metadata.name}')
COFFEE=$(k get pods -l app=coffee -o jsonpath='{.items[*].metadata.name}')
RESOLVE=(--resolve "cafe.example.com:$HTTPS:$NODE2" --resolve "cafe.example.com:$HTTP:$NODE2")
# served PATH APP PODS: the request reaches a pod of APP, which saw the URI PATH.
served() {
  local out name
  out=$(on client curl -sS --max-time 2 --cacert "$TMP/cafe.crt" "${RESOLVE[@]}" "https://cafe.example.com:$HTTPS$1") || { echo "$out"; return 1; }
  name=$(sed -n 's/^Server name: //p' <<<"$out")
  echo "$name  (URI: $(sed -n 's/^URI: //p' <<<"$out"))"
  [[ " $3 " == *" $name "* ]] && has "$out" "URI: $1"
}
for path in /tea /tea /coffee; do
  app=${path#/}; pods=$TEA; [ "$app" = coffee ] && pods=$COFFEE
  printf '$ curl --cacert cafe.crt --resolve cafe.example.com:%s:%s https://cafe.example.com:%s%s  -> ' "$HTTPS" "$NODE2" "$HTTPS" "$path"
  eventually 20 served "$path" "$app" "$pods" || fail "https $path: want a $app pod ($pods), got: $OUT"
  echo "$OUT"
done
echo "-> curl verified the certificate against cafe.crt: the controller chose cafe-secret by SNI"

say "no rule for /: 404; plain HTTP: 308 to https (ingress-nginx's ssl-redirect for a TLS host)"
code() { on client curl -sS -o /dev/null -w '%{http_code} %{redirect_url}' --max-time 2 --cacert "$TMP/cafe.crt" "${RESOLVE[@]}" "$1"; }
ROOT=$(code "https://cafe.example.com:$HTTPS/")
echo "https://cafe.example.com:$HTTPS/     -> $ROOT"
[ "$ROOT" = "404 " ] || fail "https / answered '$ROOT', want 404"
REDIRECT=$(code "http://cafe.example.com:$HTTP/tea")
echo "http://cafe.example.com:$HTTP/tea   -> $REDIRECT"
[ "$REDIRECT" = "308 https://cafe.example.com/tea" ] || fail "http /tea answered '$REDIRECT', want 308 https://cafe.example.com/tea"

shown "cafe-ingress (extensions/v1beta1, verbatim): https://cafe.example.com/tea and /coffee via node2's NodePort $HTTPS reached tea and coffee pods, TLS verified with cafe-secret; / 404; http 308"
