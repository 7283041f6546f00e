#!/bin/sh
# Lays out the image's whole filesystem from a built helm-guard binary: the binary and exactly the
# shared libraries it loads (as `ldd` resolves them, the loader included), nothing else. Both
# image builds use it: image/build.sh (offline, podman) and the Dockerfile (with a registry).
#   image/rootfs.sh target/release/helm-guard target/image/rootfs
set -eu
binary=${1:?usage: rootfs.sh BINARY OUT}
out=${2:?usage: rootfs.sh BINARY OUT}
rm -rf "$out"
mkdir -p "$out/usr/local/bin"
cp "$binary" "$out/usr/local/bin/helm-guard"
strip "$out/usr/local/bin/helm-guard" 2>/dev/null || true
# Every path ldd prints: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and the loader
# "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
ldd "$binary" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | while read -r lib; do
  mkdir -p "$out$(dirname "$lib")"
  cp -L "$lib" "$out$lib"
done
# A name for the user the image runs as (uid 65532, as distroless's nonroot), for tools that print
# it; the guard itself needs none.
mkdir -p "$out/etc"
printf 'nonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' > "$out/etc/passwd"
printf 'nonroot:x:65532:\n' > "$out/etc/group"
