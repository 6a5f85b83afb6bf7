#!/usr/bin/env bash
# Builds upstream kube-proxy (cmd/kube-proxy) from the k8s.io/kubernetes module, unmodified,
# into a cache dir; a second run reuses the binary. It is the peer that test/upstreamproxy and
# scripts/bench-proxy.sh run next to minikit's proxy.
#
# The source tree is the one scripts/build-e2e.sh prepares (same cache dir, same go.mod rewrite:
# each ./staging/src/k8s.io/<name> replace pointed at the published k8s.io/<name> v0.X.Y,
# vendor/ and go.work dropped), so the two builds share the tree and the Go build cache.
# Prepares the tree itself when build-e2e.sh has not run. Nothing of the code is changed.
# Prints the binary's path on stdout; build time goes to stderr.
set -euo pipefail
V=${KUBE_VERSION:-${E2E_VERSION:-v1.37.2}}
S=${V/v1./v0.}
DIR=${MINIKIT_E2E_DIR:-/var/cache/minikit/e2e}/$V
export PATH=$PATH:/usr/local/go/bin GOFLAGS=-mod=mod
if [ -x "$DIR/kube-proxy" ]; then echo "$DIR/kube-proxy"; exit 0; fi
mkdir -p "$DIR"
# One run of this script at a time (build-e2e.sh does not take this lock: do not start both
# cold on 2 cores; with e2e.test built first, this build reuses its cache, ~3 minutes).
exec 9>"$DIR/.build.lock"
flock 9
if [ -x "$DIR/kube-proxy" ]; then echo "$DIR/kube-proxy"; exit 0; fi
MOD=$(go mod download -json "k8s.io/kubernetes@$V" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
if [ ! -f "$DIR/src/.prepared" ]; then
  rm -rf "$DIR/src"
  cp -r "$MOD" "$DIR/src"
  chmod -R u+w "$DIR/src"
  (cd "$DIR/src" && rm -rf vendor go.work go.work.sum &&
    sed -i -E "s#^(\s*)(k8s.io/[a-z0-9-]+) => ./staging/src/k8s.io/[a-z0-9-]+#\1\2 => \2 $S#" go.mod &&
    touch .prepared)
fi
echo "building kube-proxy $V in $DIR" >&2
start=$(date +%s)
(cd "$DIR/src" && CGO_ENABLED=0 go build -trimpath -o "$DIR/kube-proxy.tmp" ./cmd/kube-proxy) >&2
mv "$DIR/kube-proxy.tmp" "$DIR/kube-proxy"
echo "built kube-proxy $V in $(( $(date +%s) - start )) s" >&2
echo "$DIR/kube-proxy"
