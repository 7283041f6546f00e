#!/usr/bin/env bash
# Makes the serving certificate, stores it as the Secret the Deployment mounts, and puts the CA
# into both webhook configurations. Re-run to rotate (the guard reloads the files by itself).
#   certs/install.sh [NAMESPACE] [SERVICE]
set -euo pipefail
namespace=${1:-helm-guard}
service=${2:-helm-guard}
out=$(dirname "$0")/out
helm_guard=${HELM_GUARD:-helm-guard}

"$helm_guard" certs --out "$out" --service "$service" --namespace "$namespace" --force >/dev/null
kubectl -n "$namespace" create secret tls helm-guard-tls \
  --cert="$out/tls.crt" --key="$out/tls.key" --dry-run=client -o yaml | kubectl apply -f -
ca_bundle=$(base64 <"$out/ca.crt" | tr -d '\n')
for kind in validatingwebhookconfiguration mutatingwebhookconfiguration; do
  count=$(kubectl get "$kind" helm-guard -o jsonpath='{range .webhooks[*]}x{end}' | wc -c)
  for ((i = 0; i < count; i++)); do
    kubectl patch "$kind" helm-guard --type=json \
      -p "[{\"op\":\"replace\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$ca_bundle\"}]"
  done
done
echo "certificate installed for $service.$namespace.svc; the private key stays in $out (git-ignored)"
