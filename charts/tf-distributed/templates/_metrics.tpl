{{/*
Prometheus metrics: which monitors scrape what, and the ServiceMonitor / PodMonitor themselves.
The TensorFlow containers serve metrics.port (container port "metrics", tf-distributed.tfContainer);
TensorFlow Serving serves serving.metrics.path on its REST port ("http", its monitoring config).
*/}}

{{/* A ServiceMonitor scrapes the TensorFlow pods: their headless Services list the metrics port. */}}
{{- define "tf-distributed.serviceMonitorScrapesTf" -}}
{{- if and .Values.metrics.enabled .Values.metrics.serviceMonitor.enabled -}}true{{- end -}}
{{- end -}}

{{/* TensorFlow Serving runs and serves its Prometheus metrics. */}}
{{- define "tf-distributed.servingMetricsEnabled" -}}
{{- if and .Values.serving.enabled .Values.serving.metrics.enabled -}}true{{- end -}}
{{- end -}}

{{/*
The components a monitor selects (their pods, or their Services): the TensorFlow roles while
metrics.enabled, Serving while it serves metrics. Never TensorBoard: its Service port is "http" too.
Usage: include "tf-distributed.monitoredComponents" $ (a JSON list)
*/}}
{{- define "tf-distributed.monitoredComponents" -}}
{{- $components := list -}}
{{- if .Values.metrics.enabled }}{{ $components = concat $components (list "chief" "ps" "worker" "evaluator") }}{{ end -}}
{{- if include "tf-distributed.servingMetricsEnabled" . }}{{ $components = append $components "serving" }}{{ end -}}
{{- toJson $components -}}
{{- end -}}

{{/*
Name of a monitoring object (monitor, PrometheusRule) placed in namespace: <fullname>, or
<release namespace>-<fullname> in another namespace, so that two releases of one name in two
namespaces stay apart in a shared one.
Usage: include "tf-distributed.monitoringName" (dict "context" $ "namespace" "monitoring")
*/}}
{{- define "tf-distributed.monitoringName" -}}
{{- $namespace := include "tf-distributed.namespace" .context -}}
{{- $name := include "tf-distributed.fullname" .context -}}
{{- if ne .namespace $namespace }}{{ $name = printf "%s-%s" $namespace $name }}{{ end -}}
{{- $name -}}
{{- end -}}

{{/*
A monitoring.coreos.com/v1 ServiceMonitor or PodMonitor (kind). Its namespaceSelector defaults to
the release namespace, so a monitor placed in another namespace (its .namespace) still finds the
targets. Every endpoint goes to every selected Service / pod; one whose port a target lacks yields
nothing there, so the TensorFlow endpoint ("metrics") and Serving's ("http") never cross.
Usage: include "tf-distributed.monitor" (dict "context" $ "kind" "ServiceMonitor")
*/}}
{{- define "tf-distributed.monitor" -}}
{{- $root := .context -}}
{{- $kind := .kind -}}
{{- $m := ternary $root.Values.metrics.serviceMonitor $root.Values.metrics.podMonitor (eq $kind "ServiceMonitor") -}}
{{- $namespace := include "tf-distributed.namespace" $root -}}
{{- $components := include "tf-distributed.monitoredComponents" $root | fromJsonArray -}}
{{- $endpoints := list -}}
{{- if $root.Values.metrics.enabled -}}
{{- $endpoints = append $endpoints (dict "port" "metrics" "path" "/metrics") -}}
{{- end -}}
{{- if include "tf-distributed.servingMetricsEnabled" $root -}}
{{- $endpoints = append $endpoints (dict "port" "http" "path" $root.Values.serving.metrics.path) -}}
{{- end -}}
apiVersion: monitoring.coreos.com/v1
kind: {{ $kind }}
{{- $home := $m.namespace | default $namespace }}
metadata:
  name: {{ include "tf-distributed.monitoringName" (dict "context" $root "namespace" $home) | quote }}
  namespace: {{ $home | quote }}
  labels:
    {{- /* the chart's own labels win over metrics.*.labels */}}
    {{- merge (dict) (include "tf-distributed.labels" (dict "context" $root "role" "metrics") | fromYaml) ($m.labels | default dict) | toYaml | nindent 4 }}
  {{- with merge (dict) ($m.annotations | default dict) ($root.Values.commonAnnotations | default dict) }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ include "tf-distributed.name" $root | quote }}
      app.kubernetes.io/instance: {{ $root.Release.Name | quote }}
    matchExpressions:
      - key: app.kubernetes.io/component
        operator: In
        values:
          {{- toYaml $components | nindent 10 }}
  namespaceSelector:
    {{- if $m.namespaceSelector }}
    {{- toYaml $m.namespaceSelector | nindent 4 }}
    {{- else }}
    matchNames:
      - {{ $namespace | quote }}
    {{- end }}
  # The release, the task's role and ordinal as target labels (app_kubernetes_io_instance, which the
  # PrometheusRule's alerts select on, app_kubernetes_io_component, apps_kubernetes_io_pod_index).
  podTargetLabels:
    - app.kubernetes.io/instance
    - app.kubernetes.io/component
    - apps.kubernetes.io/pod-index
  {{ ternary "endpoints" "podMetricsEndpoints" (eq $kind "ServiceMonitor") }}:
    {{- range $endpoints }}
    - port: {{ .port }}
      path: {{ .path | quote }}
      scheme: http
      {{- with $m.interval }}
      interval: {{ . | quote }}
      {{- end }}
      {{- with $m.scrapeTimeout }}
      scrapeTimeout: {{ . | quote }}
      {{- end }}
      honorLabels: {{ $m.honorLabels }}
      {{- with $m.relabelings }}
      relabelings:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $m.metricRelabelings }}
      metricRelabelings:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    {{- end }}
{{- end -}}

{{/*
NetworkPolicy ingress rule admitting the scraper (metrics.scraper) to one named port; a null
namespaceSelector keeps the peer in the release namespace.
Usage: include "tf-distributed.scraperRule" (dict "context" $ "port" "metrics")
*/}}
{{- define "tf-distributed.scraperRule" -}}
{{- $scraper := .context.Values.metrics.scraper -}}
- from:
    - podSelector:
        {{- toYaml ($scraper.podSelector | default dict) | nindent 8 }}
      {{- if not (kindIs "invalid" $scraper.namespaceSelector) }}
      namespaceSelector:
        {{- toYaml $scraper.namespaceSelector | nindent 8 }}
      {{- end }}
  ports:
    - port: {{ .port }}
      protocol: TCP
{{- end -}}
