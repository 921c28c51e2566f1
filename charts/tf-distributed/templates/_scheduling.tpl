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

{{/*
Topology-aware placement (docs/scheduling.md "Topology-aware placement"), as JSON:
  {"backend": "kueue" | "volcano" | "",
   "roles": {role: {"mode": "required" | "preferred", "level": <Kueue node label>, "tier": <Volcano tier or null>,
                    "keys": {"mode": .., "level": .., "tier": ..}}},    (the values key each setting came from)
   "together": [] | ["ps", "worker"] | ["chief", "worker"]}
for the rendered ps, worker and chief roles that are placed (mode other than none). The evaluator is never
placed: it reads checkpoints from the claim and exchanges no tensors with the others.
Usage: include "tf-distributed.topology" $
*/}}
{{- define "tf-distributed.topology" -}}
{{- $t := .Values.scheduling.topology -}}
{{- $backend := "" -}}
{{- if .Values.scheduling.kueue.queueName }}{{ $backend = "kueue" }}{{ else if eq .Values.scheduling.gang.provider "volcano" }}{{ $backend = "volcano" }}{{ end -}}
{{- $rendered := include "tf-distributed.tfRoles" . | fromJsonArray -}}
{{- $roles := dict -}}
{{- range $role := list "ps" "worker" "chief" -}}
{{- $own := index $t $role -}}
{{- $key := dict -}}
{{- range $field := list "mode" "level" "tier" -}}
{{- $set := ternary (not (kindIs "invalid" (index $own $field))) (ne (toString (index $own $field)) "") (eq $field "tier") -}}
{{- $_ := set $key $field (printf "scheduling.topology.%s" (ternary (printf "%s.%s" $role $field) $field $set)) -}}
{{- end -}}
{{- $mode := $own.mode | default $t.mode -}}
{{- if and (has $role $rendered) (ne $mode "none") -}}
{{- $tier := ternary $t.tier $own.tier (kindIs "invalid" $own.tier) -}}
{{- $_ := set $roles $role (dict "mode" $mode "level" ($own.level | default $t.level) "tier" $tier "keys" $key) -}}
{{- end -}}
{{- end -}}
{{- $pair := list -}}
{{- if and $t.together (has "worker" $rendered) -}}
{{- if has "ps" $rendered }}{{ $pair = list "ps" "worker" }}{{ else if has "chief" $rendered }}{{ $pair = list "chief" "worker" }}{{ end -}}
{{- end -}}
{{- toJson (dict "backend" $backend "roles" $roles "together" $pair) -}}
{{- end -}}

{{/*
Kueue's topology-aware scheduling (TAS, beta and on by default since Kueue v0.14) on a TensorFlow pod template,
as JSON: kueue.x-k8s.io/podset-required-topology or podset-preferred-topology = the level, and
kueue.x-k8s.io/podset-group-name on the two roles placed together. For Kueue's plain-pod group (not JobSet,
whose PodSets are its replicatedJobs) every TensorFlow pod also names its PodSet, kueue.x-k8s.io/role-hash =
its role: Kueue would otherwise make one PodSet of all pods of one shape (their requests, ports, affinity),
ps and chief alike, and take that PodSet's topology request from whichever pod it read first.
Usage: include "tf-distributed.topologyPodAnnotations" (dict "context" $ "role" "worker")
*/}}
{{- define "tf-distributed.topologyPodAnnotations" -}}
{{- $root := .context -}}
{{- $topology := include "tf-distributed.topology" $root | fromJson -}}
{{- $annotations := dict -}}
{{- if and (eq $topology.backend "kueue") $topology.roles (has .role (list "ps" "worker" "chief" "evaluator")) -}}
{{- if ne (($root.Values.workload | default dict).kind | default "native") "jobset" -}}
{{- $_ := set $annotations "kueue.x-k8s.io/role-hash" .role -}}
{{- end -}}
{{- with index $topology.roles .role -}}
{{- $_ := set $annotations (printf "kueue.x-k8s.io/podset-%s-topology" .mode) .level -}}
{{- end -}}
{{- if has .role $topology.together }}{{ $_ := set $annotations "kueue.x-k8s.io/podset-group-name" "tensorflow" }}{{ end -}}
{{- end -}}
{{- toJson $annotations -}}
{{- end -}}

{{/*
Volcano's network topology in the PodGroup spec (Volcano v1.12+; subGroupPolicy v1.14+): one placement unit per
placed role, or one for the two roles placed together. A unit that is every pod of the gang is the PodGroup's own
networkTopology; otherwise each unit is a subGroupPolicy entry selecting its roles' pods (one subgroup: all of
them share app.kubernetes.io/instance) of subGroupSize = their count. required = mode hard with
highestTierAllowed; preferred = mode soft (Volcano keeps the pods in the lowest tier that fits them).
Usage: include "tf-distributed.volcanoTopology" $
*/}}
{{- define "tf-distributed.volcanoTopology" -}}
{{- $topology := include "tf-distributed.topology" . | fromJson -}}
{{- $units := list -}}
{{- $pair := $topology.together -}}
{{- if and $pair (hasKey $topology.roles (index $pair 0)) -}}
{{- $units = append $units (dict "name" (join "-" $pair) "roles" $pair "placement" (index $topology.roles (index $pair 0))) -}}
{{- end -}}
{{- range $role := list "ps" "worker" "chief" -}}
{{- if and (hasKey $topology.roles $role) (not (has $role $pair)) -}}
{{- $units = append $units (dict "name" $role "roles" (list $role) "placement" (index $topology.roles $role)) -}}
{{- end -}}
{{- end -}}
{{- $gang := include "tf-distributed.tfRoles" . | fromJsonArray -}}
{{- if and (eq (len $units) 1) (eq (len (first $units).roles) (len $gang)) }}
networkTopology:
  {{- include "tf-distributed.volcanoNetworkTopology" (first $units).placement | nindent 2 }}
{{- else if $units }}
subGroupPolicy:
{{- range $units }}
  - name: {{ .name }}
    labelSelector:
      matchExpressions:
        - key: app.kubernetes.io/component
          operator: In
          values: [{{ join ", " .roles }}]
    matchLabelKeys:
      - app.kubernetes.io/instance
    {{- $pods := 0 }}
    {{- range .roles }}{{ $pods = add $pods (ternary 1 (int (index $.Values .).replicas) (eq . "chief")) }}{{ end }}
    subGroupSize: {{ $pods }}
    networkTopology:
      {{- include "tf-distributed.volcanoNetworkTopology" .placement | nindent 6 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* One Volcano NetworkTopologySpec from a role's placement (tf-distributed.topology). */}}
{{- define "tf-distributed.volcanoNetworkTopology" -}}
mode: {{ ternary "hard" "soft" (eq .mode "required") }}
{{- if eq .mode "required" }}
highestTierAllowed: {{ int .tier }}
{{- end }}
{{- end -}}
