#!/bin/bash
# Go's net/http client (the API server's) reads the guard's 413 for an oversized body, over
# HTTP/1.1 (a connection each, and keep-alive) and HTTP/2: RUNS of each (BENCHMARKS.md).
#   benches/go-413.sh [RUNS] [BODY_BYTES]      needs Go (Debian: apt-get install golang-go)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-100}; size=${2:-6291456}
bin=${BIN:-target/release/helm-guard}
[ -n "${BIN:-}" ] || cargo build --release --locked --bin helm-guard >&2
certs=target/go-413-certs
$bin certs --out $certs --san localhost --san 127.0.0.1 --force >/dev/null
$bin serve --snapshot examples/cluster-snapshot.json --listen 127.0.0.1:18643 \
  --metrics-listen 127.0.0.1:19643 --tls-cert $certs/tls.crt --tls-key $certs/tls.key \
  --shutdown-delay 0s >/dev/null 2>&1 &
guard=$!
trap 'kill $guard 2>/dev/null' EXIT
for _ in $(seq 1 100); do curl -sf 127.0.0.1:19643/readyz >/dev/null && break; sleep 0.1; done
(cd benches/go-413 && GOFLAGS=-mod=mod GOCACHE=${GOCACHE:-$PWD/../../target/go-cache} go run . 127.0.0.1:18643 ../../$certs/ca.crt "$runs" "$size")
