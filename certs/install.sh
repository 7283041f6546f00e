#!/usr/bin/env bash
# Makes the serving certificate, stores it as the Secret the Deployment mounts, waits for the guard
# to be ready, then registers the webhooks with the CA in their caBundle. Registering last means
# the API server never calls a guard that is not there yet. Re-run to rotate the certificate (the
# guard reloads the files by itself): the new CA is registered beside the one before it first, so
# no answer is refused while the kubelet and the guard catch up.
#   certs/install.sh [NAMESPACE] [SERVICE]
# The webhooks are registered for that namespace and service (their clientConfig, the guard's own
# namespace left out of their namespaceSelector, cert-manager's annotation). The key and
# certificates go to certs/out (git-ignored), or $HELM_GUARD_CERTS_OUT.
set -euo pipefail
namespace=${1:-helm-guard}
service=${2:-helm-guard}
here=$(cd "$(dirname "$0")" && pwd)
out=${HELM_GUARD_CERTS_OUT:-$here/out}
helm_guard=${HELM_GUARD:-helm-guard}

"$helm_guard" certs --out "$out" --service "$service" --namespace "$namespace" --force >/dev/null

# The CA the webhooks trust now, if any (a rotation): trusted beside the new one until the next
# run, so that the API server accepts the certificate the guard serves before and after it
# reloads the new one. Only the newest registered CA is kept: an older one goes at each run.
registered=$(kubectl get validatingwebhookconfiguration helm-guard \
  -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>/dev/null | base64 -d 2>/dev/null || true)
previous=$(printf '%s\n' "$registered" | awk '/-----BEGIN CERTIFICATE-----/ {keep = 1} keep {print} /-----END CERTIFICATE-----/ && keep {exit}')
ca_bundle=$({ cat "$out/ca.crt"; if [ -n "$previous" ]; then printf '%s\n' "$previous"; fi; } | base64 | tr -d '\n')

register() {
  sed -e "s|caBundle: \"\"|caBundle: \"$ca_bundle\"|" \
      -e "s|service: {name: helm-guard, namespace: helm-guard,|service: {name: $service, namespace: $namespace,|" \
      -e "s|operator: NotIn, values: \[\"helm-guard\"\]|operator: NotIn, values: [\"$namespace\"]|" \
      -e "s|operator: In, values: \[\"helm-guard\"\]|operator: In, values: [\"$namespace\"]|" \
      -e "s|cert-manager.io/inject-ca-from: helm-guard/helm-guard|cert-manager.io/inject-ca-from: $namespace/helm-guard|" \
      "$here/../manifests/webhooks.yaml" | kubectl apply -f -
}

# A rotation: both CAs trusted before the guard can serve the new certificate.
if [ -n "$previous" ]; then register; fi
kubectl -n "$namespace" create secret tls helm-guard-tls \
  --cert="$out/tls.crt" --key="$out/tls.key" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$namespace" rollout status deploy/helm-guard --timeout=180s
# A first install: registered only now, so that the API server never calls a guard not yet there.
register
echo "helm-guard registered for $service.$namespace.svc; the private key stays in $out (git-ignored): delete it"
