#!/bin/sh
# A release's artefacts, made offline from its tag, into dist/out/VERSION/:
#   helm-guard-VERSION-linux-amd64, -linux-arm64     the CLI and server, statically linked (musl),
#                                                   built by `cargo auditable` (their crate list inside)
#   helm-guard-VERSION-linux-ARCH.cdx.json           each binary's CycloneDX SBOM
#   helm-guard-VERSION.tgz                           the chart (`helm package`, version and appVersion VERSION)
#   helm-guard-image-VERSION-amd64.tar, .cdx.json    the image (image/build.sh, `podman save`) and its SBOM
#   SHA256SUMS                                       every file above
#   dist/release.sh [TAG]     TAG defaults to vVERSION (Cargo.toml's version); HEAD must carry it, the
#                             work tree be clean and CHANGELOG.md have a section `## [VERSION]`.
#   RELEASE_TRIAL=1 dist/release.sh      the same artefacts from HEAD as it is, for a trial.
# Needs: the rustup targets x86_64- and aarch64-unknown-linux-musl, Debian's gcc-aarch64-linux-gnu
# (the arm64 C compiler and linker), helm, podman, and what image/build.sh names. The binaries are
# built with the commit's date as SOURCE_DATE_EPOCH: the same commit gives the same bytes.
set -eu
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
tag=${1:-v$version}
fail() { echo "dist/release.sh: $*" >&2; exit 2; }
[ "$tag" = "v$version" ] || fail "the tag $tag is not v$version (Cargo.toml's version)"
if [ -z "${RELEASE_TRIAL:-}" ]; then
  [ "$(git rev-parse -q --verify "$tag^{commit}" || true)" = "$(git rev-parse HEAD)" ] \
    || fail "HEAD is not tagged $tag (RELEASE_TRIAL=1 makes the artefacts anyway)"
  [ -z "$(git status --porcelain)" ] || fail "the work tree has changes"
  grep -q "^## \[$version\]" CHANGELOG.md || fail "CHANGELOG.md has no section ## [$version]"
fi
for tool in cargo-auditable auditable2cdx helm podman aarch64-linux-gnu-gcc; do
  command -v "$tool" >/dev/null || fail "$tool is missing (see the head of this script)"
done
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
export SOURCE_DATE_EPOCH
target=${CARGO_TARGET_DIR:-target}
out=dist/out/$version
rm -rf "$out"
mkdir -p "$out"

# The C in the dependencies (ring) and the link, for arm64: Debian's cross compiler; the musl C
# library and start files are the Rust target's own (self-contained).
export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
for arch in amd64 arm64; do
  case $arch in
    amd64) triple=x86_64-unknown-linux-musl ;;
    arm64) triple=aarch64-unknown-linux-musl ;;
  esac
  cargo auditable build --release --locked --bin helm-guard --target "$triple"
  binary=$out/helm-guard-$version-linux-$arch
  cp "$target/$triple/release/helm-guard" "$binary"
  file "$binary" | grep -Eq "static(-pie)? linked|statically linked" || fail "$binary is not statically linked"
  auditable2cdx "$binary" > "$binary.cdx.json"
  image/check-sbom.sh "$binary" "$binary.cdx.json" "$triple"
done
"$out/helm-guard-$version-linux-amd64" --version | grep -q "$version" || fail "the amd64 binary does not say $version"

helm package charts/helm-guard --version "$version" --app-version "$version" -d "$out" >/dev/null

image/build.sh "helm-guard:$version" >/dev/null
podman save --quiet "helm-guard:$version" -o "$out/helm-guard-image-$version-amd64.tar"
cp "$target/helm-guard-$version.cdx.json" "$out/helm-guard-image-$version-amd64.cdx.json"

(cd "$out" && sha256sum -- * > SHA256SUMS)
echo "dist/release.sh: $out"
cat "$out/SHA256SUMS"
