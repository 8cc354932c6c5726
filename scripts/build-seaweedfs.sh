#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (an S3-compatible server that behaves like S3 under load: ranged
# GETs served from the volume files, conditional PUTs) into $STRATA_CACHE/seaweedfs/weed, for
# the tiering benchmark (benches/tiering.sh with BENCH_STORE=seaweedfs). Once: a stamp holds
# the version built.
#
# Everything comes from the Go module proxy: the SeaweedFS module and, when the `go` on PATH
# is older than SeaweedFS needs (Debian 12's golang-go is 1.19), the Go toolchain itself
# (the golang.org/toolchain module, as GOTOOLCHAIN=auto fetches it). `go` itself comes from
# Debian's golang-go when missing. `go install` refuses SeaweedFS (its go.mod has a replace
# directive), so it is built from a module of our own that requires it with the same replace.
#
#   scripts/build-seaweedfs.sh            # prints the path of weed
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

SEAWEEDFS_VERSION="v0.0.0-20261109003541-7506e5f91cd6"
GO_NEEDED="1.26.6"
GO_TOOLCHAIN="go1.26.8"
ROOT="$STRATA_CACHE/seaweedfs"
WEED="$ROOT/weed"
STAMP="$SEAWEEDFS_VERSION"

if [[ -x "$WEED" && "$(cat "$ROOT/.strata-stamp" 2>/dev/null)" == "$STAMP" ]]; then
  printf '%s\n' "$WEED"
  exit 0
fi

if ! command -v go >/dev/null; then
  strata_log "installing Debian's golang-go"
  if [[ $(id -u) -eq 0 ]]; then SUDO=(); else SUDO=(sudo); fi
  "${SUDO[@]}" apt-get install -y -q golang-go >/dev/null
fi
GO="$(command -v go)"

# Version a.b.c of a `go version` line, comparable with sort -V.
go_version() { "$1" version | sed -E 's/^go version go([0-9.]+).*/\1/'; }
if [[ "$(printf '%s\n%s\n' "$GO_NEEDED" "$(go_version "$GO")" | sort -V | head -n1)" != "$GO_NEEDED" ]]; then
  strata_log "go $(go_version "$GO") is older than $GO_NEEDED: fetching the $GO_TOOLCHAIN toolchain from the module proxy"
  arch="$(uname -m)"
  case "$arch" in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; esac
  mod="golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-$arch"
  dir="$(cd /tmp && GOFLAGS=-modcacherw "$GO" mod download -json "$mod" \
    | sed -n -E 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p')"
  [[ -f "$dir/bin/go" ]] || strata_die "no go binary in $mod ($dir)"
  # Module zips keep no file modes: mark the toolchain's programs executable, as the go
  # command does when GOTOOLCHAIN fetches a toolchain.
  chmod -R u+x "$dir/bin" "$dir/pkg/tool"
  GO="$dir/bin/go"
fi

strata_log "building SeaweedFS $SEAWEEDFS_VERSION with $("$GO" version) (a few minutes, once)"
mkdir -p "$ROOT/src"
cd "$ROOT/src"
cat >go.mod <<EOF
module strata.local/seaweedfs-build

go $GO_NEEDED

require github.com/seaweedfs/seaweedfs $SEAWEEDFS_VERSION

replace github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0
EOF
cat >tools.go <<'EOF'
//go:build tools

package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
EOF
rm -f go.sum
GOTOOLCHAIN=local GOFLAGS=-modcacherw "$GO" mod tidy >/dev/null 2>&1 || GOTOOLCHAIN=local GOFLAGS=-modcacherw "$GO" mod tidy
GOTOOLCHAIN=local GOFLAGS=-modcacherw "$GO" build -o "$WEED.tmp" github.com/seaweedfs/seaweedfs/weed
mv "$WEED.tmp" "$WEED"
printf '%s' "$STAMP" >"$ROOT/.strata-stamp"
printf '%s\n' "$WEED"
