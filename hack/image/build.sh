#!/usr/bin/env bash
# Build the operator image without a Docker engine: a Debian rootfs from Debian's packages (mmdebstrap, with the
# host's own apt sources), the project's wheels in a venv, a non-root user, packed with umoci into an OCI layout and
# exported as an archive any container runtime can load (podman load, skopeo copy oci-archive:...).
#
#   hack/image/build.sh [OUT_DIR]        # default build/image
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/image}
python=${PYTHON:-.venv/bin/python}
version=$("$python" -c 'import gpuctl; print(gpuctl.__version__)')
tag="gpuctl-operator:${version}"
suite=$(. /etc/os-release && echo "${VERSION_CODENAME}")

need() { command -v "$1" >/dev/null 2>&1; }
if ! need mmdebstrap || ! need umoci; then
  echo "image: installing mmdebstrap and umoci from Debian's packages" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap umoci >/dev/null
fi

sources=$(mktemp)
trap 'rm -f "$sources"' EXIT
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  # deb822 → one-line entries, the host's own mirrors and suites
  awk '/^URIs:/{u=$2} /^Suites:/{$1=""; s=$0} /^Components:/{$1=""; c=$0; n=split(s,a," "); for(i=1;i<=n;i++) print "deb " u " " a[i] c}' \
    /etc/apt/sources.list.d/debian.sources > "$sources"
else
  grep -h '^deb ' /etc/apt/sources.list > "$sources"
fi

rm -rf "$out" && mkdir -p "$out/wheels"
start=$(date +%s)
"$python" -m pip wheel --quiet --wheel-dir "$out/wheels" .
echo "image: wheels in $(( $(date +%s) - start ))s" >&2

rootfs="$out/rootfs.tar"
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
  --customize-hook="copy-in $out/wheels /tmp" \
  --customize-hook='chroot "$1" python3 -m venv /opt/gpuctl' \
  --customize-hook='chroot "$1" env -u PIP_FIND_LINKS /opt/gpuctl/bin/pip install --quiet --no-index --find-links /tmp/wheels gpuctl' \
  --customize-hook='rm -rf "$1"/tmp/wheels "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
  --customize-hook='echo "gpuctl:x:65532:65532:gpuctl:/nonexistent:/usr/sbin/nologin" >> "$1"/etc/passwd' \
  --customize-hook='echo "gpuctl:x:65532:" >> "$1"/etc/group' \
  "$suite" "$rootfs" - < "$sources"
echo "image: rootfs in $(( $(date +%s) - start ))s" >&2

layout="$out/oci"
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
bundle="$out/bundle"
umoci unpack --image "$layout:$tag" "$bundle" >/dev/null
tar -C "$bundle/rootfs" -xf "$rootfs"
umoci repack --image "$layout:$tag" "$bundle"
umoci config --image "$layout:$tag" \
  --config.entrypoint /opt/gpuctl/bin/gpuctl-operator \
  --config.user 65532:65532 \
  --config.exposedports 9443/tcp \
  --config.label "org.opencontainers.image.title=gpuctl-operator" \
  --config.label "org.opencontainers.image.version=$version"
rm -rf "$bundle" "$rootfs"
tar -C "$layout" -cf "$out/gpuctl-operator-${version}.oci.tar" .
echo "image: $out/gpuctl-operator-${version}.oci.tar ($(du -h "$out/gpuctl-operator-${version}.oci.tar" | cut -f1)) in $(( $(date +%s) - start ))s" >&2
echo "$out/gpuctl-operator-${version}.oci.tar"
