#!/usr/bin/env bash
# Build the integration-test control plane (etcd, kube-apiserver, Kueue manager)
# from the pinned Go wrapper modules next to this script.
#
#   hack/cluster/build.sh               build whatever is missing; last stdout line = bin dir
#   hack/cluster/build.sh --print-dir   print the bin dir only (no build)
#   hack/cluster/build.sh --force       rebuild even if the binaries exist
#   hack/cluster/build.sh etcd ...      build only the named binaries
#                                       (etcd, kube-apiserver, kubectl, kueue, krew)
#   hack/cluster/build.sh --print-dir krew   print the krew bin dir only
#
# Binaries land in ${GPUCTL_TESTBIN:-$HOME/.cache/gpuctl/testbin}/<versions>/;
# krew (kubectl-krew, built only when named) in .../krew-<version>/.
# Progress and timings go to stderr; stdout carries only the bin dir, so
# callers can use: BIN_DIR=$(hack/cluster/build.sh | tail -n1)
set -euo pipefail

src="${BASH_SOURCE[0]}"
[[ "$src" == */* ]] || src="./$src"
HERE="$(cd "${src%/*}" && pwd)"

# Version of module $2 required by the wrapper go.mod $1 (single source of truth).
modver() {
  awk -v m="$2" '($1 == m && $2 ~ /^v/) {print $2; exit} ($1 == "require" && $2 == m) {print $3; exit}' "$1"
}

K8S_VERSION="$(modver "$HERE/kubernetes/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(modver "$HERE/etcd/go.mod" go.etcd.io/etcd/server/v3)"
KUEUE_VERSION="$(modver "$HERE/kueue/go.mod" sigs.k8s.io/kueue)"
KREW_VERSION="$(modver "$HERE/krew/go.mod" sigs.k8s.io/krew)"
for v in K8S_VERSION ETCD_VERSION KUEUE_VERSION KREW_VERSION; do
  if [[ -z "${!v}" ]]; then
    echo "build.sh: cannot read $v from the wrapper go.mod files" >&2
    exit 2
  fi
done

BIN_ROOT="${GPUCTL_TESTBIN:-$HOME/.cache/gpuctl/testbin}"
BIN_DIR="$BIN_ROOT/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kueue-${KUEUE_VERSION}"
KREW_DIR="$BIN_ROOT/krew-${KREW_VERSION}"

force=0
print_dir=0
targets=()
for arg in "$@"; do
  case "$arg" in
    --print-dir) print_dir=1 ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    etcd|kube-apiserver|kubectl|kueue|krew) targets+=("$arg") ;;
    *) echo "build.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done
if [[ $print_dir -eq 1 ]]; then
  if [[ "${targets[*]:-}" == "krew" ]]; then echo "$KREW_DIR"; else echo "$BIN_DIR"; fi
  exit 0
fi
[[ ${#targets[@]} -gt 0 ]] || targets=(etcd kube-apiserver kubectl kueue)
only_krew=0
[[ "${targets[*]}" == "krew" ]] && only_krew=1

if ! command -v go >/dev/null 2>&1; then
  echo "build.sh: 'go' not found in PATH" >&2
  exit 127
fi

mkdir -p "$BIN_DIR" "$KREW_DIR"
trap 'rm -f "$BIN_DIR"/*.tmp.$$ "$KREW_DIR"/*.tmp.$$' EXIT

# Serialise concurrent invocations (e.g. parallel test sessions).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$BIN_DIR/.build.lock"
  flock 9
fi

export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS="${GPUCTL_BUILD_GOFLAGS:--mod=readonly -buildvcs=false}"

# Reproducible build date: the commit date of the pinned release is not
# available offline, so use a fixed epoch unless SOURCE_DATE_EPOCH is given.
BUILD_DATE="$(date -u -d "@${SOURCE_DATE_EPOCH:-0}" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo 1970-01-01T00:00:00Z)"

k8s_ldflags() {
  local ver="$1" major minor flags="-s -w" key val
  major="${ver#v}"; major="${major%%.*}"
  minor="${ver#v*.}"; minor="${minor%%.*}"
  for kv in "gitVersion=$ver" "gitMajor=$major" "gitMinor=$minor" \
            "gitCommit=0000000000000000000000000000000000000000" \
            "gitTreeState=clean" "buildDate=$BUILD_DATE"; do
    key="${kv%%=*}"; val="${kv#*=}"
    flags+=" -X k8s.io/component-base/version.${key}=${val}"
    flags+=" -X k8s.io/client-go/pkg/version.${key}=${val}"
  done
  echo "$flags"
}

# build NAME MODULE_DIR PACKAGE LDFLAGS [OUT_DIR]
build() {
  local name="$1" moddir="$2" pkg="$3" ldflags="$4"
  local out="${5:-$BIN_DIR}/$name"
  if [[ $force -eq 0 && -x "$out" ]]; then
    echo "build.sh: $name: up to date ($out)" >&2
    return 0
  fi
  echo "build.sh: $name: building $pkg ..." >&2
  local start end tmp="$out.tmp.$$"
  start=$(date +%s)
  if ! (cd "$moddir" && go build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg") >&2; then
    rm -f "$tmp"
    echo "build.sh: $name: BUILD FAILED" >&2
    return 1
  fi
  mv -f "$tmp" "$out"
  end=$(date +%s)
  echo "build.sh: $name: built in $((end - start))s" >&2
}

total_start=$(date +%s)
for t in "${targets[@]}"; do
  case "$t" in
    etcd)
      build etcd "$HERE/etcd" go.etcd.io/etcd/server/v3 \
        "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCD_VERSION}"
      ;;
    kube-apiserver)
      build kube-apiserver "$HERE/kubernetes" k8s.io/kubernetes/cmd/kube-apiserver \
        "$(k8s_ldflags "$K8S_VERSION")"
      ;;
    kubectl)
      build kubectl "$HERE/kubernetes" k8s.io/kubernetes/cmd/kubectl \
        "$(k8s_ldflags "$K8S_VERSION")"
      ;;
    kueue)
      build kueue "$HERE/kueue" sigs.k8s.io/kueue/cmd/kueue \
        "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION} -X sigs.k8s.io/kueue/pkg/version.GitCommit=${KUEUE_VERSION} -X sigs.k8s.io/kueue/pkg/version.BuildDate=${BUILD_DATE}"
      ;;
    krew)
      # kubectl finds plugins by name on PATH: the binary is kubectl-krew.
      build kubectl-krew "$HERE/krew" sigs.k8s.io/krew/cmd/krew \
        "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=${KREW_VERSION} -X sigs.k8s.io/krew/internal/version.gitCommit=${KREW_VERSION}" \
        "$KREW_DIR"
      ;;
  esac
done
echo "build.sh: done in $(( $(date +%s) - total_start ))s" >&2
if [[ $only_krew -eq 1 ]]; then echo "$KREW_DIR"; else echo "$BIN_DIR"; fi
