{{/* The name of every object of the release: helm-guard, or the release name when it differs. */}}
{{- define "helm-guard.name" -}}
{{- if eq .Release.Name "helm-guard" -}}helm-guard{{- else -}}{{ printf "%s-helm-guard" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "helm-guard.selector" -}}
app.kubernetes.io/name: helm-guard
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "helm-guard.labels" -}}
{{ include "helm-guard.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "helm-guard.tlsSecret" -}}
{{- if eq .Values.certificates.source "existingSecret" -}}{{ required "certificates.existingSecret names the Secret" .Values.certificates.existingSecret }}{{- else -}}{{ include "helm-guard.name" . }}-tls{{- end -}}
{{- end -}}

{{- define "helm-guard.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}
