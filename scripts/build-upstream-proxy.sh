#!/usr/bin/env bash
# Builds upstream kube-proxy (cmd/kube-proxy) from the k8s.io/kubernetes module, unmodified,
# into a cache dir; a second run reuses the binary. It is the peer that test/upstreamproxy and
# scripts/bench-proxy.sh run next to minikit's proxy.
#
# The source tree is the one scripts/build-e2e.sh builds from (scripts/upstream-tree.sh
# prepares it, once), and the build uses the same flags as e2e.test's: of kube-proxy's 1,452
# packages all but 48 are e2e.test's too, so after e2e.test this build compiles those 48 and
# links. Upstream's release build adds -trimpath, which would compile all 1,452 again (340 s
# in CI); its CGO_ENABLED=0 is what scripts/test.sh sets for every build. Nothing of the code
# is changed.
# Prints the binary's path on stdout; build time goes to stderr.
set -euo pipefail
V=${KUBE_VERSION:-${E2E_VERSION:-v1.37.2}}
S=${V/v1./v0.}
DIR=${MINIKIT_E2E_DIR:-/var/cache/minikit/e2e}/$V
export PATH=$PATH:/usr/local/go/bin GOFLAGS=-mod=mod
if [ -x "$DIR/kube-proxy" ]; then echo "$DIR/kube-proxy"; exit 0; fi
mkdir -p "$DIR"
# One build in the tree at a time (scripts/build-e2e.sh takes the same lock).
exec 9>"$DIR/.build.lock"
flock 9
if [ -x "$DIR/kube-proxy" ]; then echo "$DIR/kube-proxy"; exit 0; fi
# shellcheck source=scripts/upstream-tree.sh
. "$(dirname "$0")/upstream-tree.sh"
prepare_upstream_tree
echo "building kube-proxy $V in $DIR" >&2
start=$SECONDS
(cd "$DIR/src" && go build -o "$DIR/kube-proxy.tmp" ./cmd/kube-proxy) >&2
mv "$DIR/kube-proxy.tmp" "$DIR/kube-proxy"
echo "built kube-proxy $V in $((SECONDS - start)) s" >&2
echo "$DIR/kube-proxy"
