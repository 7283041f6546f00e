#!/bin/sh
# Builds the image with no network: the release binary from this checkout (cargo's registry only),
# laid out by rootfs.sh, `podman build` from scratch. Prints the image and its size.
#   image/build.sh [TAG]      default helm-guard:<crate version>
#   image/build.sh helm-guard:0.1.0 && podman save helm-guard:0.1.0 -o helm-guard-0.1.0.tar
set -eu
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
tag=${1:-helm-guard:$version}
cargo build --release --locked --bin helm-guard
target=${CARGO_TARGET_DIR:-target}
context=$target/image
image/rootfs.sh "$target/release/helm-guard" "$context/rootfs"
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
podman build --quiet -t "$tag" --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  -f image/Containerfile "$context" >/dev/null
echo "$tag $(podman image inspect "$tag" --format '{{.Size}}') bytes"
