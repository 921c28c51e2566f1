{{/*
Scheduling of the TensorFlow pods: the gang (PodGroup / Kueue pod group), its scheduler and the
labels and annotations that put a pod in it.
*/}}

{{/*
Gang scheduling and queues (README "Gang scheduling and queues"). The TensorFlow components are the
ones with a workingDir (chief, ps, worker, evaluator); TensorBoard, Serving and the
helm test pod never join the gang, never get the gang scheduler and never carry a queue label.
*/}}
{{- define "tf-distributed.isTfComponent" -}}
{{- if and (kindIs "map" .) (hasKey . "workingDir") -}}true{{- end -}}
{{- end -}}

{{/* TensorFlow pods of the topology: the gang's minMember and Kueue's pod-group-total-count. */}}
{{- define "tf-distributed.tfPodCount" -}}
{{- $count := 0 -}}
{{- range include "tf-distributed.tfRoles" . | fromJsonArray -}}
{{- $count = add $count (ternary 1 (int (index $.Values .).replicas) (has . (list "chief" "evaluator"))) -}}
{{- end -}}
{{- $count -}}
{{- end -}}

{{/* Name of the gang: the PodGroup, and Kueue's pod group (its Workload). */}}
{{- define "tf-distributed.gangName" -}}
{{- include "tf-distributed.componentName" (dict "context" . "role" "training") -}}
{{- end -}}

{{/* Scheduler of the TensorFlow pods: schedulerName, else the gang provider's scheduler. */}}
{{- define "tf-distributed.tfSchedulerName" -}}
{{- $provider := .Values.scheduling.gang.provider -}}
{{- $default := get (dict "volcano" "volcano" "coscheduling" "scheduler-plugins-scheduler") $provider -}}
{{- .Values.schedulerName | default $default -}}
{{- end -}}

{{/*
Labels and annotations a TensorFlow pod carries for the gang / queue, as JSON {"labels": {}, "annotations": {}}.
Usage: include "tf-distributed.gangPodMetadata" (dict "context" $ "role" "worker")
*/}}
{{- define "tf-distributed.gangPodMetadata" -}}
{{- $root := .context -}}
{{- $labels := dict -}}
{{- $annotations := dict -}}
{{- if has .role (list "ps" "worker" "chief" "evaluator") -}}
{{- $name := include "tf-distributed.gangName" $root -}}
{{- $provider := $root.Values.scheduling.gang.provider -}}
{{- if eq $provider "volcano" -}}
{{- $_ := set $annotations "scheduling.k8s.io/group-name" $name -}}
{{- else if eq $provider "coscheduling" -}}
{{- $_ := set $labels "scheduling.x-k8s.io/pod-group" $name -}}
{{- end -}}
{{- $jobset := eq (include "tf-distributed.jobsetEnabled" $root) "true" -}}
{{- with $root.Values.scheduling.kueue -}}
{{- /* Under a JobSet the queue label goes on the JobSet alone (tf-distributed.kueueJobSetLabels). */ -}}
{{- if and .queueName (not $jobset) -}}
{{- /* On the pods only, never on their StatefulSets / Jobs: an owner with a queue label would be
admitted on its own (Kueue's statefulset / batch/job integration) instead of with the group. */ -}}
{{- $_ := set $labels "kueue.x-k8s.io/queue-name" .queueName -}}
{{- $_ := set $labels "kueue.x-k8s.io/pod-group-name" $name -}}
{{- $_ := set $annotations "kueue.x-k8s.io/pod-group-total-count" (include "tf-distributed.tfPodCount" $root) -}}
{{- with .priorityClass }}{{ $_ := set $labels "kueue.x-k8s.io/priority-class" . }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson (dict "labels" $labels "annotations" $annotations) -}}
{{- end -}}

{{/*
Kueue's labels of the JobSet (workload.kind=jobset), as JSON: the queue and the priority class on the
JobSet's own metadata and nowhere else. Kueue's jobset integration makes one Workload of it, a PodSet per
replicatedJob, admits it as a whole by unsuspending it and releases the quota when it finishes; its child
Jobs and pods, owned by a JobSet Kueue manages, are never admitted apart.
*/}}
{{- define "tf-distributed.kueueJobSetLabels" -}}
{{- $labels := dict -}}
{{- with .Values.scheduling.kueue -}}
{{- if .queueName -}}
{{- $_ := set $labels "kueue.x-k8s.io/queue-name" .queueName -}}
{{- with .priorityClass }}{{ $_ := set $labels "kueue.x-k8s.io/priority-class" . }}{{ end -}}
{{- end -}}
{{- end -}}
{{- toJson $labels -}}
{{- end -}}
