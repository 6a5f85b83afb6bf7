# Sourced by scripts/build-e2e.sh and scripts/build-upstream-proxy.sh: prepares the
# k8s.io/kubernetes source tree both build from, in $DIR/src, once.
#
# The module zip lacks staging/, and its go.mod replaces every k8s.io/<staging> module with
# ./staging/src/k8s.io/<name>; each replace is pointed at the published k8s.io/<name> v0.X.Y
# instead, and vendor/ and go.work are dropped. Nothing of the code is changed.
#
# Then each module whose packages both this tree and minikit's module compile, at a lower
# version here than in minikit's build, is raised to minikit's version (today two patch
# releases: github.com/google/gnostic-models v0.7.0 -> v0.7.1 and go.uber.org/zap v1.27.1 ->
# v1.28.0, which sigs.k8s.io/gateway-api requires). A package compiled with the same
# sources and the same dependencies is one entry of the Go build cache, so the 1,348
# packages the two builds share (k8s.io/api, client-go, apiserver, apiextensions-apiserver,
# …) compile once, not twice: without the raise, every package above client-go's discovery
# differs by its gnostic-models. Nothing is ever lowered.
#
# Needs V (v1.X.Y), S (v0.X.Y) and DIR; GOFLAGS=-mod=mod.
prepare_upstream_tree() {
  local repo mod
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  # The marker names what was done: a tree prepared by an older script is prepared again.
  [ "$(cat "$DIR/src/.prepared" 2>/dev/null)" = "staging-replaced modules-raised" ] && return 0
  mod=$(go mod download -json "k8s.io/kubernetes@$V" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$DIR/src"
  cp -r "$mod" "$DIR/src"
  chmod -R u+w "$DIR/src"
  (cd "$DIR/src" && rm -rf vendor go.work go.work.sum &&
    sed -i -E "s#^(\s*)(k8s.io/[a-z0-9-]+) => ./staging/src/k8s.io/[a-z0-9-]+#\1\2 => \2 $S#" go.mod)
  local deps='{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}'
  local raise
  raise=$(LC_ALL=C join <( (cd "$DIR/src" && go list -deps -test -f "$deps" ./test/e2e ./cmd/kube-proxy) | LC_ALL=C sort -u) \
    <( (cd "$repo" && GOFLAGS= go list -deps -test -f "$deps" ./...) | LC_ALL=C sort -u) |
    while read -r path here there; do
      # v0.0.0: a k8s.io module replaced by its published v0.X.Y above, the same as minikit's.
      if [ "$here" != "$there" ] && [ "$here" != v0.0.0 ] &&
        [ "$(printf '%s\n%s\n' "$here" "$there" | sort -V | tail -1)" = "$there" ]; then
        echo "-require=$path@$there"
      fi
    done)
  if [ -n "$raise" ]; then
    echo "raising in the upstream tree to minikit's versions:" ${raise//-require=/} >&2
    # shellcheck disable=SC2086 # a word list
    (cd "$DIR/src" && go mod edit $raise)
  fi
  echo "staging-replaced modules-raised" > "$DIR/src/.prepared"
}
