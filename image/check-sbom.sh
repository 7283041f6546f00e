#!/bin/sh
# Checks the image's SBOM against the binary's embedded dependency list (cargo auditable) and
# Cargo.lock: the SBOM's runtime components are exactly the embedded list (the same source, so a
# scanner reading the image and one reading the SBOM see the same crates), and both name every
# crate cargo links into the binary (normal dependencies of helm-guard for this target, not the
# proc-macros that only run in the compiler). The embedded list may name a few crates more: cargo
# auditable reads `cargo metadata`, whose features are unified with the dev-dependencies'.
# Exits 1 and prints the difference when one is missing.
#   image/check-sbom.sh BINARY SBOM [TARGET]
# TARGET: the binary's target triple, default the host's (what cargo links differs by target:
# a cross build does not unify the proc-macros' features with the binary's).
set -eu
binary=${1:?usage: check-sbom.sh BINARY SBOM [TARGET]}
sbom=${2:?usage: check-sbom.sh BINARY SBOM [TARGET]}
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
target=${3:-$(rustc -vV | sed -n 's/^host: //p')}
cargo tree --locked --edges normal,no-proc-macro --target "$target" --package helm-guard \
    --prefix none --format '{p}' \
  | awk '{ sub(/^v/, "", $2); print $1 "@" $2 }' | sort -u > "$dir/linked"
rust-audit-info "$binary" \
  | jq -r '.packages[] | select((.kind // "runtime") == "runtime") | "\(.name)@\(.version)"' \
  | sort -u > "$dir/embedded"
jq -r '(.metadata.component // empty), ((.components // [])[]
         | select(all(.properties[]?; .name != "cdx:rustc:dependency_kind" or .value == "runtime")))
       | "\(.name)@\(.version)"' "$sbom" | sort -u > "$dir/sbom"
status=0
if ! diff -u "$dir/embedded" "$dir/sbom" > "$dir/diff"; then
  echo "image/check-sbom.sh: the SBOM's runtime components differ from the binary's list (- binary, + SBOM):" >&2
  cat "$dir/diff" >&2
  status=1
fi
comm -23 "$dir/linked" "$dir/embedded" > "$dir/missing"
if [ -s "$dir/missing" ]; then
  echo "image/check-sbom.sh: crates cargo links that the binary's list and the SBOM do not name:" >&2
  cat "$dir/missing" >&2
  status=1
fi
if [ "$status" = 0 ]; then
  echo "SBOM = the binary's embedded list: $(wc -l < "$dir/embedded") crates, every one of the" \
    "$(wc -l < "$dir/linked") cargo links among them ($(comm -13 "$dir/linked" "$dir/embedded" | tr '\n' ' ')more)"
fi
exit "$status"
