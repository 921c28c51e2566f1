{{/*
Pod specs: the pod-level fields every component shares, affinity, volumes and mounts, resources,
and the container of a TensorFlow task.
*/}}

{{/*
A pod's affinity: the component's own, plus (tf-distributed.colocate) a required podAffinity term
that puts it on the node of the release's other pods. The term matches the pod itself, so the
first pod of the release schedules freely and picks the node. Usage: include "tf-distributed.affinity" (dict "context" $ "component" .Values.worker)
*/}}
{{- define "tf-distributed.affinity" -}}
{{- $root := .context -}}
{{- $affinity := deepCopy (.component.affinity | default dict) -}}
{{- if include "tf-distributed.colocate" $root -}}
{{- $podAffinity := $affinity.podAffinity | default dict -}}
{{- $required := $podAffinity.requiredDuringSchedulingIgnoredDuringExecution | default list -}}
{{- $selector := dict "app.kubernetes.io/name" (include "tf-distributed.name" $root) "app.kubernetes.io/instance" $root.Release.Name -}}
{{- $term := dict "labelSelector" (dict "matchLabels" $selector) "topologyKey" "kubernetes.io/hostname" -}}
{{- $_ := set $podAffinity "requiredDuringSchedulingIgnoredDuringExecution" (append $required $term) -}}
{{- $_ := set $affinity "podAffinity" $podAffinity -}}
{{- end -}}
{{- with $affinity }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* resources with the GPU limit (GPUs are set as limits only; Kubernetes copies them to requests). */}}
{{- define "tf-distributed.resources" -}}
{{- $component := . -}}
{{- $resources := deepCopy ($component.resources | default dict) -}}
{{- if gt (int $component.gpu.count) 0 -}}
{{- $limits := $resources.limits | default dict -}}
{{- $_ := set $limits $component.gpu.resourceName (int $component.gpu.count) -}}
{{- $_ := set $resources "limits" $limits -}}
{{- end -}}
{{- toYaml $resources -}}
{{- end -}}

{{/*
Pod-level fields every component shares (same shape for every component).
Usage: include "tf-distributed.podCommon" (dict "context" $ "component" .Values.worker "serviceAccountName" (include "tf-distributed.serviceAccountName" $) "automountToken" false)
*/}}
{{- define "tf-distributed.podCommon" -}}
{{- $root := .context -}}
{{- $component := .component -}}
serviceAccountName: {{ .serviceAccountName | quote }}
automountServiceAccountToken: {{ .automountToken }}
enableServiceLinks: false
{{- with $root.Values.global.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . | quote }}
  {{- end }}
{{- end }}
{{- if include "tf-distributed.isTfComponent" $component }}
{{- with include "tf-distributed.tfSchedulerName" $root }}
schedulerName: {{ . | quote }}
{{- end }}
{{- end }}
{{- with $component.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with $component.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $component.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "tf-distributed.affinity" (dict "context" $root "component" $component) }}
affinity:
  {{- . | nindent 2 }}
{{- end }}
{{- with $component.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $component.podSecurityContext | nindent 2 }}
{{- end -}}

{{/*
Volumes of a pod: shared storage (readOnly: the claim mounted read-only), /tmp, /dev/shm for GPU
pods, extra volumes. Usage: include "tf-distributed.volumes" (dict "context" $ "component" .Values.worker "readOnly" false)
*/}}
{{- define "tf-distributed.volumes" -}}
{{- $root := .context -}}
{{- $component := .component -}}
- name: shared
  persistentVolumeClaim:
    claimName: {{ include "tf-distributed.claimName" $root | quote }}
    {{- if .readOnly }}
    readOnly: true
    {{- end }}
- name: tmp
  emptyDir:
    sizeLimit: 2Gi
{{- if include "tf-distributed.isTfComponent" $component }}
- name: workdir
  emptyDir:
    sizeLimit: 2Gi
{{- end }}
{{- if gt (int $component.gpu.count) 0 }}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: 1Gi
{{- end }}
{{- with $component.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The mounts of tf-distributed.volumes. Usage: include "tf-distributed.volumeMounts" (dict "context" $ "component" .Values.worker "readOnly" false) */}}
{{- define "tf-distributed.volumeMounts" -}}
{{- $root := .context -}}
{{- $component := .component -}}
{{- $readOnly := .readOnly -}}
- name: shared
  mountPath: {{ $root.Values.storage.mountPath | quote }}
  {{- with $root.Values.storage.subPath }}
  subPath: {{ . | quote }}
  {{- end }}
  {{- if $readOnly }}
  readOnly: true
  {{- end }}
- name: tmp
  mountPath: /tmp
{{- if include "tf-distributed.isTfComponent" $component }}
- name: workdir
  mountPath: {{ $component.workingDir | quote }}
{{- end }}
{{- if gt (int $component.gpu.count) 0 }}
- name: dshm
  mountPath: /dev/shm
{{- end }}
{{- with $component.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Probes of a TensorFlow server (a ps or worker StatefulSet pod), Bitnami style: <role>.custom<Kind>Probe
replaces the chart's TCP check of the TensorFlow port, <role>.<kind>Probe.enabled=false drops it. The
startup probe holds liveness back until the server listens, so a program that prepares data first is
not restarted meanwhile. Usage: include "tf-distributed.tfProbes" .Values.worker
*/}}
{{- define "tf-distributed.tfProbes" -}}
{{- $c := . -}}
{{- range $name := list "startupProbe" "readinessProbe" "livenessProbe" -}}
{{- $custom := index $c (printf "custom%s" (title $name)) -}}
{{- $probe := index $c $name -}}
{{- if $custom }}
{{ $name }}:
  {{- toYaml $custom | nindent 2 }}
{{- else if $probe.enabled }}
{{ $name }}:
  tcpSocket:
    port: tf-grpc
  {{- toYaml (omit $probe "enabled") | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The container of a TensorFlow task (ps, worker, chief, evaluator): same shape for every role.
indexField: the pod field holding the task index (a StatefulSet's pod-index label, an Indexed Job's
completion-index annotation), or empty for index 0.
Usage: include "tf-distributed.tfContainer" (dict "context" $ "role" "worker" "component" .Values.worker "taskType" "worker" "indexField" "metadata.labels['apps.kubernetes.io/pod-index']" "port" 2222 "probes" true)
*/}}
{{- define "tf-distributed.tfContainer" -}}
{{- $root := .context -}}
{{- $c := .component -}}
- name: {{ .role }}
  image: {{ include "tf-distributed.image" (dict "context" $root "image" $c.image) | quote }}
  imagePullPolicy: {{ include "tf-distributed.imagePullPolicy" (dict "context" $root "image" $c.image) | quote }}
  # an emptyDir (volume workdir), writable whatever the image's user: relative paths work
  workingDir: {{ $c.workingDir | quote }}
  command:
    - /bin/sh
    - -c
    - |
      {{- include "tf-distributed.prelude" $root | nindent 6 }}
    - tf-distributed-prelude
  args:
    {{- include "tf-distributed.tfArgv" (dict "context" $root "component" $c) | fromJsonArray | toYaml | nindent 4 }}
  env:
    - name: TFD_CLUSTER
      value: {{ include "tf-distributed.clusterSpec" $root | quote }}
    - name: TFD_TASK_TYPE
      value: {{ .taskType }}
    {{- if .indexField }}
    - name: TFD_TASK_INDEX
      valueFrom:
        fieldRef:
          fieldPath: {{ .indexField }}
    {{- else }}
    - name: TFD_TASK_INDEX
      value: "0"
    {{- end }}
    - name: GRPC_FAIL_FAST
      value: use_caller
    {{- with $c.home }}
    - name: HOME
      value: {{ . | quote }}
    {{- end }}
    - name: PYTHONUNBUFFERED
      value: "1"
    # the storage contract: where this program's checkpoints, logs and exports go on the claim
    {{- include "tf-distributed.storageEnv" $root | nindent 4 }}
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- if and (eq (int $c.gpu.count) 0) (eq $c.gpu.resourceName "nvidia.com/gpu") }}
    - name: NVIDIA_VISIBLE_DEVICES
      value: void
    {{- end }}
    {{- if $root.Values.metrics.enabled }}
    # metrics.enabled: the trainer serves Prometheus metrics (/metrics) on this port
    - name: TFD_METRICS_PORT
      value: {{ int $root.Values.metrics.port | quote }}
    - name: TFD_METRICS_LINGER_SECONDS
      value: {{ int $root.Values.metrics.lingerSeconds | quote }}
    {{- end }}
    {{- with $c.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if or .port $root.Values.metrics.enabled }}
  ports:
    {{- if .port }}
    - name: tf-grpc
      containerPort: {{ .port }}
      protocol: TCP
    {{- end }}
    {{- if $root.Values.metrics.enabled }}
    - name: metrics
      containerPort: {{ int $root.Values.metrics.port }}
      protocol: TCP
    {{- end }}
  {{- end }}
  {{- if .probes }}
  {{- include "tf-distributed.tfProbes" $c | nindent 2 }}
  {{- end }}
  resources:
    {{- include "tf-distributed.resources" $c | nindent 4 }}
  securityContext:
    {{- toYaml $c.containerSecurityContext | nindent 4 }}
  volumeMounts:
    {{- include "tf-distributed.volumeMounts" (dict "context" $root "component" $c "readOnly" false) | nindent 4 }}
{{- end -}}
