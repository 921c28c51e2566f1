{{/*
Workload shapes shared by the TensorFlow roles. ps and worker are identical StatefulSets behind
headless Services; chief and evaluator are Jobs; under a JobSet every role is a Job of the same shape
(tf-distributed.tfJobSpec). One definition each, so every role renders the same way.
*/}}

{{/*
Headless Service giving every task of a role a stable DNS name. While a ServiceMonitor scrapes the
TensorFlow pods (tf-distributed.serviceMonitorScrapesTf) it lists the metrics port too: Services
select one role each (name + instance + component), so each role's own Service carries it. The
evaluator needs no DNS name: it gets a Service only for that (no gRPC port), and so does every role
under a JobSet, whose own headless Service <fullname> gives the pods their names.
Usage: include "tf-distributed.tfHeadlessService" (dict "context" $ "role" "worker")
*/}}
{{- define "tf-distributed.tfHeadlessService" -}}
{{- $root := .context -}}
{{- $role := .role -}}
{{- $c := index $root.Values $role -}}
{{- $grpc := and (ne $role "evaluator") (not (include "tf-distributed.jobsetEnabled" $root)) -}}
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
A TensorFlow Job (chief, evaluator, or the workers when worker 0 is the chief). Its spec is
tf-distributed.tfJobSpec, which the JobSet's replicatedJobs share.
Usage: include "tf-distributed.tfJob" (dict "context" $ "role" "chief")
*/}}
{{- define "tf-distributed.tfJob" -}}
{{- $root := .context -}}
apiVersion: batch/v1
kind: Job
metadata:
  {{- include "tf-distributed.metadata" (dict "context" $root "role" .role "name" (include "tf-distributed.componentName" (dict "context" $root "role" .role))) | nindent 2 }}
spec:
  {{- include "tf-distributed.tfJobSpec" (dict "context" $root "role" .role) | nindent 2 }}
{{- end -}}

{{/*
The spec of a TensorFlow Job: of the chief, the evaluator or the workers when worker 0 is the chief
(native), or of any role under a JobSet. restartPolicy Never, so that the Job's podFailurePolicy
decides: exit code 2 (a configuration error) fails the Job at once, a pod disruption (preemption,
node drain, eviction: the DisruptionTarget condition) is retried without counting against
backoffLimit, any other failure is retried up to backoffLimit. Every retry resumes from the last
checkpoint on the shared volume.
A Job of several tasks (the workers', and ps under a JobSet) is Indexed: one pod per task, its index
from the completion-index annotation. In synchronous training one worker's failure ends every
worker's pod, so its backoffLimit is chief.backoffLimit per task. The run's Job (tf-distributed.runRole:
the chief's, or the workers') takes the run-level settings of the chief (deadline, grace, and natively
the TTL: a JobSet has its own). Pod names (tf-distributed.taskHost): natively the chief's pod takes the
hostname and subdomain <fullname>-chief and an Indexed Job's pods (named <name>-<index> by the Job
controller) the subdomain <fullname>-<role>; under a JobSet, JobSet sets the subdomain itself.
The pod is the native one of that role: a ps/worker pod keeps the StatefulSet's probes and 30 s grace.
Usage: include "tf-distributed.tfJobSpec" (dict "context" $ "role" "worker")
*/}}
{{- define "tf-distributed.tfJobSpec" -}}
{{- $root := .context -}}
{{- $role := .role -}}
{{- $c := index $root.Values $role -}}
{{- $jobset := eq (include "tf-distributed.jobsetEnabled" $root) "true" -}}
{{- $runLevel := eq $role (include "tf-distributed.runRole" $root) -}}
{{- $server := and (has $role (list "ps" "worker")) (not $runLevel) -}}
{{- $run := ternary $root.Values.chief $c (has $role (list "ps" "worker")) -}}
{{- $tasks := ternary (int $c.replicas) 1 (has $role (list "ps" "worker")) -}}
{{- $indexed := or $jobset (has $role (list "ps" "worker")) -}}
{{- $name := include "tf-distributed.componentName" (dict "context" $root "role" $role) -}}
{{- $port := 0 -}}
{{- if ne $role "evaluator" }}{{ $port = int $c.service.port }}{{ end -}}
backoffLimit: {{ mul $run.backoffLimit $tasks }}
completions: {{ $tasks }}
parallelism: {{ $tasks }}
{{- if $indexed }}
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
{{- if and $runLevel (not $jobset) (not (kindIs "invalid" $run.ttlSecondsAfterFinished)) }}
ttlSecondsAfterFinished: {{ $run.ttlSecondsAfterFinished }}
{{- end }}
template:
  metadata:
    {{- $own := ternary (dict "tf-distributed.io/run-spec" (include "tf-distributed.runSpec" $root)) (dict) $runLevel }}
    {{- include "tf-distributed.podMetadata" (dict "context" $root "role" $role "component" $c "annotations" $own) | nindent 4 }}
  spec:
    {{- include "tf-distributed.podCommon" (dict "context" $root "component" $c "serviceAccountName" (include "tf-distributed.serviceAccountName" $root) "automountToken" false) | nindent 4 }}
    restartPolicy: Never
    {{- if $jobset }}
    # JobSet sets the subdomain (network.subdomain); the Job controller names the pod <job>-<index>
    {{- else if eq $role "chief" }}
    hostname: {{ $name | quote }}
    subdomain: {{ $name | quote }}
    {{- else if $indexed }}
    # Indexed Job pods are named <name>-<index> by Kubernetes; the subdomain gives them DNS names
    subdomain: {{ $name | quote }}
    {{- end }}
    terminationGracePeriodSeconds: {{ ternary 30 ($run.terminationGracePeriodSeconds | default 60) $server }}
    containers:
      {{- $index := ternary "metadata.annotations['batch.kubernetes.io/job-completion-index']" "" $indexed }}
      {{- include "tf-distributed.tfContainer" (dict "context" $root "role" $role "component" $c "taskType" $role "indexField" $index "port" $port "probes" $server) | nindent 6 }}
    volumes:
      {{- include "tf-distributed.volumes" (dict "context" $root "component" $c "readOnly" false) | nindent 6 }}
{{- end -}}
