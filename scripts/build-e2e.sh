#!/usr/bin/env bash
# Builds upstream e2e.test and the ginkgo CLI that runs it in parallel processes from the
# k8s.io/kubernetes module, unmodified, into a cache dir (ginkgo beside e2e.test); a second
# run reuses the binaries.
#
# The source tree is prepared once by scripts/upstream-tree.sh (staging replaces pointed at the
# published k8s.io modules, two dependencies raised to the patch releases minikit's module
# uses so that the packages both builds compile are compiled once); `go test -c ./test/e2e`
# builds the suite. Nothing of the test code is changed. Prints the binary's path on stdout.
set -euo pipefail
V=${E2E_VERSION:-v1.37.2}
S=${V/v1./v0.}
DIR=${MINIKIT_E2E_DIR:-/var/cache/minikit/e2e}/$V
export PATH=$PATH:/usr/local/go/bin GOFLAGS=-mod=mod
if [ -x "$DIR/e2e.test" ] && [ -x "$DIR/ginkgo" ]; then echo "$DIR/e2e.test"; exit 0; fi
mkdir -p "$DIR"
# One build in the tree at a time (scripts/build-upstream-proxy.sh takes the same lock): two
# cold builds side by side on 2 cores would compile the packages they share twice.
exec 9>"$DIR/.build.lock"
flock 9
if [ -x "$DIR/e2e.test" ] && [ -x "$DIR/ginkgo" ]; then echo "$DIR/e2e.test"; exit 0; fi
# shellcheck source=scripts/upstream-tree.sh
. "$(dirname "$0")/upstream-tree.sh"
prepare_upstream_tree
# The ginkgo CLI, from the ginkgo module version the kubernetes module requires: it runs
# e2e.test in parallel processes (--procs), as upstream's own jobs do.
if [ ! -x "$DIR/ginkgo" ]; then
  (cd "$DIR/src" && go build -o "$DIR/ginkgo.tmp" github.com/onsi/ginkgo/v2/ginkgo) >&2
  mv "$DIR/ginkgo.tmp" "$DIR/ginkgo"
fi
if [ ! -x "$DIR/e2e.test" ]; then
  echo "building e2e.test $V in $DIR (about 10-30 minutes cold on 2 cores)" >&2
  start=$SECONDS
  (cd "$DIR/src" && go test -c -o "$DIR/e2e.test.tmp" ./test/e2e) >&2
  mv "$DIR/e2e.test.tmp" "$DIR/e2e.test"
  echo "built e2e.test $V in $((SECONDS - start)) s" >&2
fi
echo "$DIR/e2e.test"
