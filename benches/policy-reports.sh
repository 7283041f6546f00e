#!/bin/bash
# The PolicyReport writer at scale, in live mode against the real API server: 100,000 release
# records (1,000 namespaces x 10 releases x 10 revisions) unless told otherwise. Measures, for
# the guard with reports on (the Policy WG's CRDs installed from their upstream repository) and
# off: the time from start to every report written, the API calls the writer made (the API
# server's apiserver_request_total for policyreports and clusterpolicyreports), peak memory
# (VmHWM); then a quiet minute (writes: 0 expected) and one release changed (1 write expected).
#   HELM_GUARD_E2E_WGPOLICY_GIT=<git dir of kubernetes-sigs/wg-policy-prototypes> \
#     benches/policy-reports.sh [NAMESPACES] [RELEASES] [REVISIONS]     (BENCHMARKS.md)
set -euo pipefail
cd "$(dirname "$0")/.."
namespaces=${1:-1000}; releases=${2:-10}; revisions=${3:-10}
cargo build --release --locked --bin helm-guard --example live_load >&2
bin=target/release/helm-guard; rig=target/release/examples/live_load
last=$(printf 'bench-%03d' $((namespaces - 1)))
kubectl get ns "$last" >/dev/null 2>&1 || { echo "seeding $namespaces x $releases x $revisions" >&2; time $rig seed "$namespaces" "$releases" "$revisions" >&2; }
git_dir=${HELM_GUARD_E2E_WGPOLICY_GIT:?a git directory of kubernetes-sigs/wg-policy-prototypes}
for crd in policyreports clusterpolicyreports; do
  git --git-dir "$git_dir" show "HEAD:policy-report/crd/v1alpha2/wgpolicyk8s.io_$crd.yaml" | kubectl apply --server-side -f - >/dev/null
done
kubectl wait --for=condition=Established crd/policyreports.wgpolicyk8s.io crd/clusterpolicyreports.wgpolicyk8s.io >/dev/null
kubectl create ns hg-bench >/dev/null 2>&1 || true
kubectl delete polr -A -l app.kubernetes.io/managed-by=helm-guard --wait=false >/dev/null 2>&1 || true
certs=target/policy-reports-certs
$bin certs --out $certs --san localhost --san 127.0.0.1 --force >/dev/null
metric() { curl -s localhost:19090/metrics | awk -v m="$1" '$1 == m {print int($2)}'; }

run() {  # label, reports (auto|off)
  local label=$1 reports=$2
  local calls_before; calls_before=$($rig apicalls policyreports clusterpolicyreports)
  local start; start=$(date +%s.%N)
  $bin serve --listen 127.0.0.1:18443 --metrics-listen 127.0.0.1:19090 --guard-namespace hg-bench \
    --tls-cert $certs/tls.crt --tls-key $certs/tls.key --shutdown-delay 0s --recycle-bin=false \
    --policy-reports "$reports" >target/policy-reports-guard.log 2>&1 &
  local pid=$!
  for _ in $(seq 1 1200); do curl -sf localhost:19090/readyz >/dev/null && break; sleep 0.1; done
  local ready; ready=$(date +%s.%N)
  local written=0 done_at=""
  if [ "$reports" != off ]; then
    for _ in $(seq 1 6000); do
      written=$(metric helm_guard_policy_reports_written_total); written=${written:-0}
      [ "$written" -ge $((namespaces + 1)) ] && { done_at=$(date +%s.%N); break; }
      sleep 0.1
    done
  else
    sleep 20; done_at=$(date +%s.%N)
  fi
  local hwm; hwm=$(awk '/VmHWM/ {printf "%.1f", $2 / 1024}' /proc/$pid/status)
  local calls; calls=$(awk -v a="$($rig apicalls policyreports clusterpolicyreports)" -v b="$calls_before" 'BEGIN { print a - b }')
  local quiet="" change=""
  if [ "$reports" != off ]; then
    sleep 60
    local after_quiet; after_quiet=$(metric helm_guard_policy_reports_written_total)
    quiet=$((after_quiet - written))
    kubectl label secret -n bench-000 sh.helm.release.v1.r0000.v$revisions status=failed --overwrite >/dev/null
    sleep 12
    change=$(( $(metric helm_guard_policy_reports_written_total) - after_quiet ))
    kubectl label secret -n bench-000 sh.helm.release.v1.r0000.v$revisions status=deployed --overwrite >/dev/null
  fi
  kill $pid; wait $pid 2>/dev/null || true
  awk -v l="$label" -v s="$start" -v r="$ready" -v d="$done_at" -v w="$written" -v c="$calls" -v h="$hwm" -v q="$quiet" -v ch="$change" \
    'BEGIN { printf "| %s | %.1f s | %.1f s | %s | %s | %s MiB | %s | %s |\n", l, r - s, d - s, w, c, h, q, ch }'
}

echo "| guard | ready | all reports written | reports written | report API calls | peak RSS | writes in a quiet minute | writes after one release changed |"
echo "|---|---|---|---|---|---|---|---|"
run "reports on (auto)" auto
run "reports off" off
