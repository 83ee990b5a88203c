#!/usr/bin/env bash
# Start the built image's entrypoint in a chroot of its unpacked rootfs, as its non-root user: it must answer --help
# and, serving, a health check.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/image}
version=$(.venv/bin/python -c 'import gpuctl; print(gpuctl.__version__)')
bundle=$(mktemp -d)
pid=
cleanup() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$bundle"; }
trap cleanup EXIT
bundle_dir="$bundle/bundle"
umoci unpack --image "$out/oci:gpuctl-operator:${version}" "$bundle_dir" >/dev/null
entry=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(" ".join(c["process"]["args"]))' "$bundle_dir/config.json")
user=$(python3 -c 'import json,sys; u=json.load(open(sys.argv[1]))["process"]["user"]; print("%s:%s" % (u["uid"], u["gid"]))' "$bundle_dir/config.json")
echo "entrypoint: $entry (user $user)"
chroot --userspec="$user" "$bundle_dir/rootfs" $entry --help | head -3
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
chroot --userspec="$user" "$bundle_dir/rootfs" $entry --insecure-http --bind 127.0.0.1 --port "$port" --kubeconfig /nonexistent --no-controllers >"$bundle/operator.log" 2>&1 &
pid=$!
for _ in $(seq 1 50); do
  if chroot --userspec="$user" "$bundle_dir/rootfs" $entry --health-check "http://127.0.0.1:$port" >/dev/null 2>&1; then
    echo "health check: ok"
    exit 0
  fi
  sleep 0.2
done
echo "health check failed; operator log:" >&2
cat "$bundle/operator.log" >&2
exit 1
