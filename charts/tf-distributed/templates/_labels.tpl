{{/*
Labels and metadata: selector labels, release-wide labels, the metadata block of every object, pod
template metadata, and label selectors of the release's pods.
*/}}

{{/*
Selector labels: name + instance + component only (immutable in StatefulSets and Jobs).
Usage: include "tf-distributed.selectorLabels" (dict "context" $ "role" "worker")
*/}}
{{- define "tf-distributed.selectorLabels" -}}
{{- $root := .context -}}
app.kubernetes.io/name: {{ include "tf-distributed.name" $root | quote }}
app.kubernetes.io/instance: {{ $root.Release.Name | quote }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{/* Release-wide labels without a component. Usage: include "tf-distributed.releaseLabels" $ */}}
{{- define "tf-distributed.releaseLabels" -}}
app.kubernetes.io/name: {{ include "tf-distributed.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tf-distributed
helm.sh/chart: {{ include "tf-distributed.chart" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Full labels of a component's objects. Usage: include "tf-distributed.labels" (dict "context" $ "role" "worker") */}}
{{- define "tf-distributed.labels" -}}
{{ include "tf-distributed.releaseLabels" .context }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{/*
Labels of pod templates: no chart or app version, so that a chart upgrade alone neither rolls every
pod nor changes the (immutable) pod template of the chief Job.
Usage: include "tf-distributed.podLabels" (dict "context" $ "role" "worker")
*/}}
{{- define "tf-distributed.podLabels" -}}
{{- $root := .context -}}
{{ include "tf-distributed.selectorLabels" (dict "context" $root "role" .role) }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: tf-distributed
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
metadata block shared by every object, with the chart's own labels and annotations of this object as the
optional "labels" and "annotations". Usage: include "tf-distributed.metadata" (dict "context" $ "role" "worker" "name" "<name>")
*/}}
{{- define "tf-distributed.metadata" -}}
{{- $root := .context -}}
name: {{ .name | quote }}
namespace: {{ include "tf-distributed.namespace" $root | quote }}
labels:
  {{- include "tf-distributed.labels" (dict "context" $root "role" .role) | nindent 2 }}
  {{- with .labels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- $own := dict -}}
{{- if hasKey . "annotations" }}{{ $own = .annotations }}{{ end -}}
{{- with merge (dict) $own ($root.Values.commonAnnotations | default dict) }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Pod template metadata (labels + annotations), with the chart's own annotations of this pod as the
optional "annotations". A TensorFlow pod's gang / queue labels and annotations and its topology-aware placement
(tf-distributed.gangPodMetadata, tf-distributed.topologyPodAnnotations) come from here, so every workload whose
pod templates use it carries them. Usage: include "tf-distributed.podMetadata" (dict "context" $ "role" "worker" "component" .Values.worker)
*/}}
{{- define "tf-distributed.podMetadata" -}}
{{- $root := .context -}}
{{- $component := .component -}}
{{- $gang := include "tf-distributed.gangPodMetadata" (dict "context" $root "role" .role) | fromJson -}}
{{- $topology := include "tf-distributed.topologyPodAnnotations" (dict "context" $root "role" .role) | fromJson -}}
{{- $_ := set $gang "annotations" (merge (dict) $gang.annotations $topology) -}}
{{- if hasKey . "annotations" }}{{ $_ := set $gang "annotations" (merge (dict) .annotations $gang.annotations) }}{{ end -}}
labels:
  {{- include "tf-distributed.podLabels" (dict "context" $root "role" .role) | nindent 2 }}
  {{- with merge (dict) $gang.labels ($component.podLabels | default dict) }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- $annotations := merge (dict) $gang.annotations ($component.podAnnotations | default dict) ($root.Values.commonAnnotations | default dict) -}}
{{- if $root.Values.disableIstioSidecar }}{{ $_ := set $annotations "sidecar.istio.io/inject" "false" }}{{ end }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Selector of this release's pods of some components (NetworkPolicy peers and targets).
Usage: include "tf-distributed.tfPodSelector" (dict "context" $ "roles" (list "chief" "ps"))
*/}}
{{- define "tf-distributed.tfPodSelector" -}}
{{- $root := .context -}}
matchExpressions:
  - key: app.kubernetes.io/name
    operator: In
    values:
      - {{ include "tf-distributed.name" $root | quote }}
  - key: app.kubernetes.io/instance
    operator: In
    values:
      - {{ $root.Release.Name | quote }}
  - key: app.kubernetes.io/component
    operator: In
    values: [{{ join ", " .roles }}]
{{- end -}}
