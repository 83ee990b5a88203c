#!/usr/bin/env bash
# Build a tested control plane (etcd, kube-apiserver, kubectl, Kueue manager) from the pinned Go wrapper modules
# next to this script. Which one is chosen by name from hack/cluster/matrix:
#
#   GPUCTL_CLUSTER=floor|primary|edge   the combination's name (default: primary)
#   GPUCTL_K8S=1.36.3 GPUCTL_KUEUE=0.19.2   or by versions (either may be left out); must match one row
#
#   hack/cluster/build.sh               build whatever is missing; last stdout line = the combination's bin dir
#   hack/cluster/build.sh --print-dir   print that bin dir only (no build)
#   hack/cluster/build.sh --print-name  print the chosen combination's name and versions (name k8s etcd kueue extras)
#   hack/cluster/build.sh --list        print every combination's name
#   hack/cluster/build.sh --force       rebuild even if the binaries exist
#   hack/cluster/build.sh etcd ...      build only the named binaries (etcd, kube-apiserver, kubectl, kueue, krew,
#                                       prometheus = prometheus and promtool)
#   hack/cluster/build.sh --print-dir krew   print the krew bin dir only (likewise prometheus)
#
# Each binary is built once per version into ${GPUCTL_TESTBIN:-$HOME/.cache/gpuctl/testbin}/<component>-<version>/;
# a combination's bin dir holds links to its four binaries, so combinations that share a version share its build.
# krew (kubectl-krew, built only when named) lands in .../krew-<version>/, Prometheus and promtool (built only when
# named, for the card-hour tests) in .../prometheus-v3.<minor>.<patch>/.
# Progress and timings go to stderr; stdout carries only the bin dir, so
# callers can use: BIN_DIR=$(hack/cluster/build.sh | tail -n1)
set -euo pipefail

src="${BASH_SOURCE[0]}"
[[ "$src" == */* ]] || src="./$src"
HERE="$(cd "${src%/*}" && pwd)"
MATRIX="$HERE/matrix"

force=0
print_dir=0
print_name=0
targets=()
for arg in "$@"; do
  case "$arg" in
    --print-dir) print_dir=1 ;;
    --print-name) print_name=1 ;;
    --list) awk '!/^#/ && NF {print $1}' "$MATRIX"; exit 0 ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    etcd|kube-apiserver|kubectl|kueue|krew|prometheus) targets+=("$arg") ;;
    *) echo "build.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

# The chosen row: by name, else by versions, else primary.
want_name="${GPUCTL_CLUSTER:-}"
want_k8s="${GPUCTL_K8S:-}"; want_k8s="${want_k8s#v}"
want_kueue="${GPUCTL_KUEUE:-}"; want_kueue="${want_kueue#v}"
if [[ -z "$want_name" && -z "$want_k8s" && -z "$want_kueue" ]]; then want_name=primary; fi
row="$(awk -v n="$want_name" -v k="$want_k8s" -v q="$want_kueue" '
  /^#/ || !NF {next}
  (n == "" || $1 == n) && (k == "" || $2 == "v" k) && (q == "" || $4 == "v" q) {print; exit}' "$MATRIX")"
if [[ -z "$row" ]]; then
  echo "build.sh: no tested control plane matches name='${want_name}' kubernetes='${want_k8s}' kueue='${want_kueue}';" \
       "choose one of: $(awk '!/^#/ && NF {printf "%s (%s + Kueue %s) ", $1, $2, $4}' "$MATRIX")" >&2
  exit 2
fi
read -r NAME K8S_VERSION ETCD_VERSION KUEUE_VERSION EXTRAS <<<"$row"
KREW_VERSION="$(ls "$HERE/krew")"
# Prometheus 3.x is tagged v0.3MINOR.PATCH as a Go module: the wrapper is named by the module version, the binaries'
# directory and version stamp by the release.
PROM_MODULE_VERSION="$(ls "$HERE/prometheus")"
PROM_VERSION="${PROM_MODULE_VERSION#v0.3}"
PROM_VERSION="3.$((10#${PROM_VERSION%%.*})).${PROM_VERSION#*.}"

if [[ $print_name -eq 1 ]]; then
  echo "$NAME $K8S_VERSION $ETCD_VERSION $KUEUE_VERSION $EXTRAS"
  exit 0
fi
for dir in "kubernetes/$K8S_VERSION" "etcd/$ETCD_VERSION" "kueue/$KUEUE_VERSION" "krew/$KREW_VERSION" \
           "prometheus/$PROM_MODULE_VERSION"; do
  if [[ ! -f "$HERE/$dir/go.mod" ]]; then
    echo "build.sh: hack/cluster/$dir/go.mod is missing (write it with hack/cluster/pin.sh)" >&2
    exit 2
  fi
done

BIN_ROOT="${GPUCTL_TESTBIN:-$HOME/.cache/gpuctl/testbin}"
BIN_DIR="$BIN_ROOT/${NAME}_k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kueue-${KUEUE_VERSION}"
K8S_DIR="$BIN_ROOT/kubernetes-${K8S_VERSION}"
ETCD_DIR="$BIN_ROOT/etcd-${ETCD_VERSION}"
KUEUE_DIR="$BIN_ROOT/kueue-${KUEUE_VERSION}"
KREW_DIR="$BIN_ROOT/krew-${KREW_VERSION}"
PROM_DIR="$BIN_ROOT/prometheus-v${PROM_VERSION}"

# Asked for krew alone (or Prometheus alone), the last stdout line is its directory, not the combination's.
out_dir="$BIN_DIR"
case "${targets[*]:-}" in
  krew) out_dir="$KREW_DIR" ;;
  prometheus) out_dir="$PROM_DIR" ;;
esac
if [[ $print_dir -eq 1 ]]; then
  echo "$out_dir"
  exit 0
fi
[[ ${#targets[@]} -gt 0 ]] || targets=(etcd kube-apiserver kubectl kueue)

if ! command -v go >/dev/null 2>&1; then
  echo "build.sh: 'go' not found in PATH" >&2
  exit 127
fi

mkdir -p "$BIN_DIR" "$K8S_DIR" "$ETCD_DIR" "$KUEUE_DIR" "$KREW_DIR" "$PROM_DIR"
trap 'rm -f "$K8S_DIR"/*.tmp.$$ "$ETCD_DIR"/*.tmp.$$ "$KUEUE_DIR"/*.tmp.$$ "$KREW_DIR"/*.tmp.$$ "$PROM_DIR"/*.tmp.$$' EXIT

# Serialise concurrent invocations (e.g. parallel test sessions, or two combinations sharing a build).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$BIN_ROOT/.build.lock"
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

# build NAME MODULE_DIR PACKAGE LDFLAGS OUT_DIR [BUILD_TAGS]
build() {
  local name="$1" moddir="$2" pkg="$3" ldflags="$4" out="$5/$1" tags="${6:-}"
  if [[ $force -eq 0 && -x "$out" ]]; then
    echo "build.sh: $name: up to date ($out)" >&2
    return 0
  fi
  echo "build.sh: $name: building $pkg ..." >&2
  local start end tmp="$out.tmp.$$"
  start=$(date +%s)
  if ! (cd "$moddir" && go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$tmp" "$pkg") >&2; then
    rm -f "$tmp"
    echo "build.sh: $name: BUILD FAILED" >&2
    return 1
  fi
  mv -f "$tmp" "$out"
  end=$(date +%s)
  echo "build.sh: $name: built in $((end - start))s" >&2
}

# link NAME DIR: the combination's bin dir points at the version's binary.
link() { ln -sfn "$2/$1" "$BIN_DIR/$1"; }

total_start=$(date +%s)
echo "build.sh: $NAME: Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, Kueue $KUEUE_VERSION" >&2
for t in "${targets[@]}"; do
  case "$t" in
    etcd)
      build etcd "$HERE/etcd/$ETCD_VERSION" go.etcd.io/etcd/server/v3 \
        "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCD_VERSION}" "$ETCD_DIR"
      link etcd "$ETCD_DIR"
      ;;
    kube-apiserver|kubectl)
      build "$t" "$HERE/kubernetes/$K8S_VERSION" "k8s.io/kubernetes/cmd/$t" "$(k8s_ldflags "$K8S_VERSION")" "$K8S_DIR"
      link "$t" "$K8S_DIR"
      ;;
    kueue)
      build kueue "$HERE/kueue/$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue \
        "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION} -X sigs.k8s.io/kueue/pkg/version.GitCommit=${KUEUE_VERSION} -X sigs.k8s.io/kueue/pkg/version.BuildDate=${BUILD_DATE}" \
        "$KUEUE_DIR"
      link kueue "$KUEUE_DIR"
      ;;
    krew)
      # kubectl finds plugins by name on PATH: the binary is kubectl-krew.
      build kubectl-krew "$HERE/krew/$KREW_VERSION" sigs.k8s.io/krew/cmd/krew \
        "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=${KREW_VERSION} -X sigs.k8s.io/krew/internal/version.gitCommit=${KREW_VERSION}" \
        "$KREW_DIR"
      ;;
    prometheus)
      # remove_all_sd: only static scrape targets are used, so no cloud service discovery is compiled in (promtool
      # still imports Kubernetes discovery itself). Without the builtinassets tag the web UI is left out; the HTTP
      # API the tests use is all there.
      prom_ldflags="-s -w"
      for kv in "Version=$PROM_VERSION" "Revision=$PROM_MODULE_VERSION" "Branch=HEAD" "BuildUser=gpuctl" \
                "BuildDate=$(date -u -d "@${SOURCE_DATE_EPOCH:-0}" +%Y%m%d-%H:%M:%S 2>/dev/null || echo 19700101-00:00:00)"; do
        prom_ldflags+=" -X github.com/prometheus/common/version.$kv"
      done
      for cmd in prometheus promtool; do
        build "$cmd" "$HERE/prometheus/$PROM_MODULE_VERSION" "github.com/prometheus/prometheus/cmd/$cmd" \
          "$prom_ldflags" "$PROM_DIR" remove_all_sd
      done
      ;;
  esac
done
echo "build.sh: done in $(( $(date +%s) - total_start ))s" >&2
echo "$out_dir"
