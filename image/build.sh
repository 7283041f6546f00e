#!/bin/sh
# Builds the image with no network: the release binary from this checkout (cargo's registry only),
# built by `cargo auditable` so that it carries its dependency list (Trivy, Grype and
# `rust-audit-info` read it from the image), laid out by rootfs.sh, `podman build` from scratch;
# and the image's CycloneDX SBOM beside it, checked against Cargo.lock's linked crates and the
# binary's own list. Prints the image, its size and the SBOM's path.
#   image/build.sh [TAG]      default helm-guard:<crate version>
#   image/build.sh helm-guard:0.1.0 && podman save helm-guard:0.1.0 -o helm-guard-0.1.0.tar
# Needs, once: cargo install --locked cargo-auditable@0.7.7 auditable2cdx@0.1.0 rust-audit-info@0.5.4
set -eu
cd "$(dirname "$0")/.."
for tool in cargo-auditable auditable2cdx rust-audit-info jq; do
  command -v "$tool" >/dev/null || {
    echo "image/build.sh: $tool is missing; once: cargo install --locked cargo-auditable@0.7.7 auditable2cdx@0.1.0 rust-audit-info@0.5.4 (and jq from your package manager)" >&2
    exit 1
  }
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# The build date the binary reports is the commit's, so two builds of one commit are the same
# bytes (BENCHMARKS.md, "Reproducible builds").
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH
tag=${1:-helm-guard:$version}
cargo auditable build --release --locked --bin helm-guard
target=${CARGO_TARGET_DIR:-target}
context=$target/image
image/rootfs.sh "$target/release/helm-guard" "$context/rootfs"
binary=$context/rootfs/usr/local/bin/helm-guard
sbom=$target/helm-guard-$version.cdx.json
auditable2cdx "$binary" > "$sbom"
image/check-sbom.sh "$binary" "$sbom"
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
podman build --quiet -t "$tag" --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  -f image/Containerfile "$context" >/dev/null
echo "$tag $(podman image inspect "$tag" --format '{{.Size}}') bytes"
echo "SBOM: $sbom"
