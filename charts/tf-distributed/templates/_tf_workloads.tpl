{{/*
Workload shapes shared by the TensorFlow roles. ps and worker are identical StatefulSets behind
headless Services; chief and evaluator are Jobs. One definition each, so every role renders the
same way.
*/}}

{{/*
Headless Service giving every task of a role a stable DNS name. While a ServiceMonitor scrapes the
TensorFlow pods (tf-distributed.serviceMonitorScrapesTf) it lists the metrics port too: Services
select one role each (name + instance + component), so each role's own Service carries it. The
evaluator needs no DNS name: it gets a Service only for that (no gRPC port).
Usage: include "tf-distributed.tfHeadlessService" (dict "context" $ "role" "worker")
*/}}
{{- define "tf-distributed.tfHeadlessService" -}}
{{- $root := .context -}}
{{- $role := .role -}}
{{- $c := index $root.Values $role -}}
{{- $grpc := ne $role "evaluator" -}}
apiVersion: v1
kind: Service
metadata:
  {{- include "tf-distributed.metadata" (dict "context" $root "role" $role "name" (include "tf-distributed.componentName" (dict "context" $root "role" $role))) | nindent 2 }}
spec:
  type: ClusterIP
  clusterIP: None
  # TensorFlow servers must reach peers before those report Ready.
  publishNotReadyAddresses: true
  selector:
    {{- include "tf-distributed.selectorLabels" (dict "context" $root "role" $role) | nindent 4 }}
  ports:
    {{- if $grpc }}
    - name: tf-grpc
      port: {{ $c.service.port }}
      targetPort: tf-grpc
      protocol: TCP
    {{- end }}
    {{- if include "tf-distributed.serviceMonitorScrapesTf" $root }}
    - name: metrics
      port: {{ int $root.Values.metrics.port }}
      targetPort: metrics
      protocol: TCP
    {{- end }}
{{- end -}}

{{/* ps / worker StatefulSet. Usage: include "tf-distributed.tfStatefulSet" (dict "context" $ "role" "worker") */}}
{{- define "tf-distributed.tfStatefulSet" -}}
{{- $root := .context -}}
{{- $role := .role -}}
{{- $c := index $root.Values $role -}}
{{- $name := include "tf-distributed.componentName" (dict "context" $root "role" $role) -}}
{{- $finished := include "tf-distributed.finishedReplicas" (dict "context" $root "role" $role) }}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  {{- include "tf-distributed.metadata" (dict "context" $root "role" $role "name" $name "annotations" (dict "tf-distributed.io/run-spec" (include "tf-distributed.runSpec" $root))) | nindent 2 }}
spec:
  serviceName: {{ $name | quote }}
  {{- if ne $finished "" }}
  # This run ended (tf-distributed.io/ending on its Job): an upgrade that starts no new run keeps it so.
  replicas: {{ $finished }}
  {{- else }}
  replicas: {{ $c.replicas }}
  {{- end }}
  # TensorFlow servers wait for their peers: OrderedReady would serialise or deadlock start-up.
  podManagementPolicy: Parallel
  updateStrategy:
    type: RollingUpdate
  selector:
    matchLabels:
      {{- include "tf-distributed.selectorLabels" (dict "context" $root "role" $role) | nindent 6 }}
  template:
    metadata:
      {{- include "tf-distributed.podMetadata" (dict "context" $root "role" $role "component" $c) | nindent 6 }}
    spec:
      {{- include "tf-distributed.podCommon" (dict "context" $root "component" $c "serviceAccountName" (include "tf-distributed.serviceAccountName" $root) "automountToken" false) | nindent 6 }}
      terminationGracePeriodSeconds: 30
      containers:
        {{- include "tf-distributed.tfContainer" (dict "context" $root "role" $role "component" $c "taskType" $role "indexField" "metadata.labels['apps.kubernetes.io/pod-index']" "port" $c.service.port "probes" true) | nindent 8 }}
      volumes:
        {{- include "tf-distributed.volumes" (dict "context" $root "component" $c "readOnly" false) | nindent 8 }}
{{- end -}}

{{/*
A TensorFlow Job (chief, evaluator, or the workers when worker 0 is the chief). restartPolicy Never,
so that the Job's podFailurePolicy decides: exit code 2 (a configuration error) fails the Job at
once, a pod disruption (preemption, node drain, eviction: the DisruptionTarget condition) is retried
without counting against backoffLimit, any other failure is retried up to backoffLimit. Every retry
resumes from the last checkpoint on the shared volume.
The workers' Job is Indexed: one pod per worker, hostname <name>-<index> under the headless Service
<name> (the same DNS names as StatefulSet pods), the index from the completion-index annotation. In
synchronous training one worker's failure ends every worker's pod, so its backoffLimit is
chief.backoffLimit per worker; its run-level settings (deadline, TTL, grace) are the chief's.
Usage: include "tf-distributed.tfJob" (dict "context" $ "role" "chief" "port" 2222 "stableHostname" true)
       include "tf-distributed.tfJob" (dict "context" $ "role" "worker" "port" 2222 "indexed" true)
*/}}
{{- define "tf-distributed.tfJob" -}}
{{- $root := .context -}}
{{- $role := .role -}}
{{- $c := index $root.Values $role -}}
{{- $run := ternary $root.Values.chief $c (eq $role "worker") -}}
{{- $runLevel := or (eq $role "chief") (eq .indexed true) -}}
{{- $tasks := ternary (int $c.replicas) 1 (eq .indexed true) -}}
{{- $name := include "tf-distributed.componentName" (dict "context" $root "role" $role) -}}
apiVersion: batch/v1
kind: Job
metadata:
  {{- include "tf-distributed.metadata" (dict "context" $root "role" $role "name" $name) | nindent 2 }}
spec:
  backoffLimit: {{ mul $run.backoffLimit $tasks }}
  completions: {{ $tasks }}
  parallelism: {{ $tasks }}
  {{- if .indexed }}
  completionMode: Indexed
  {{- end }}
  # A replacement pod starts only once the failed one is gone: never two pods with one task address.
  podReplacementPolicy: Failed
  podFailurePolicy:
    rules:
      - action: FailJob
        onExitCodes:
          containerName: {{ $role | quote }}
          operator: In
          values:
            - 2
      - action: Ignore
        onPodConditions:
          - type: DisruptionTarget
            status: "True"
  {{- if and $runLevel (not (kindIs "invalid" $run.activeDeadlineSeconds)) }}
  activeDeadlineSeconds: {{ $run.activeDeadlineSeconds }}
  {{- end }}
  {{- if and $runLevel (not (kindIs "invalid" $run.ttlSecondsAfterFinished)) }}
  ttlSecondsAfterFinished: {{ $run.ttlSecondsAfterFinished }}
  {{- end }}
  template:
    metadata:
      {{- $own := ternary (dict "tf-distributed.io/run-spec" (include "tf-distributed.runSpec" $root)) (dict) $runLevel }}
      {{- include "tf-distributed.podMetadata" (dict "context" $root "role" $role "component" $c "annotations" $own) | nindent 6 }}
    spec:
      {{- include "tf-distributed.podCommon" (dict "context" $root "component" $c "serviceAccountName" (include "tf-distributed.serviceAccountName" $root) "automountToken" false) | nindent 6 }}
      restartPolicy: Never
      {{- if .stableHostname }}
      hostname: {{ $name | quote }}
      subdomain: {{ $name | quote }}
      {{- else if .indexed }}
      # Indexed Job pods are named <name>-<index> by Kubernetes; the subdomain gives them DNS names
      subdomain: {{ $name | quote }}
      {{- end }}
      terminationGracePeriodSeconds: {{ $run.terminationGracePeriodSeconds | default 60 }}
      containers:
        {{- $index := ternary "metadata.annotations['batch.kubernetes.io/job-completion-index']" "" (eq .indexed true) }}
        {{- include "tf-distributed.tfContainer" (dict "context" $root "role" $role "component" $c "taskType" $role "indexField" $index "port" .port "probes" false) | nindent 8 }}
      volumes:
        {{- include "tf-distributed.volumes" (dict "context" $root "component" $c "readOnly" false) | nindent 8 }}
{{- end -}}
