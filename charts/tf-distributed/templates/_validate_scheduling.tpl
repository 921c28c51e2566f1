{{/*
The cross-field rules about where and how the TensorFlow pods run: gang scheduling and queues,
topology-aware placement, and what a JobSet (workload.kind) can hold. Called by
tf-distributed.validateValues, which collects them with the chart's other problems; as JSON (a list of
problems, each `key: message. Fix: --set ...`).
Usage: include "tf-distributed.schedulingProblems" $ | fromJsonArray
*/}}
{{- define "tf-distributed.schedulingProblems" -}}
{{- $v := .Values -}}
{{- $problems := list -}}
{{- /* Gang scheduling and queues. */ -}}
{{- $gang := $v.scheduling.gang -}}
{{- $provider := $gang.provider -}}
{{- $gangSchedulers := dict "volcano" "volcano" "coscheduling" "scheduler-plugins-scheduler" -}}
{{- if hasKey $gangSchedulers $provider -}}
{{- $wrong := list "default-scheduler" -}}
{{- range $key, $name := $gangSchedulers }}{{ if ne $key $provider }}{{ $wrong = append $wrong $name }}{{ end }}{{ end -}}
{{- if has $v.schedulerName $wrong -}}
{{- $problems = append $problems (printf "schedulerName: %s does not schedule the %s PodGroup, so scheduling.gang.provider=%s would not start the TensorFlow pods together. Fix: --set schedulerName=\"\" (the %s default, %s, or the name your %s scheduler runs as)" $v.schedulerName $provider $provider $provider (index $gangSchedulers $provider) $provider) -}}
{{- end -}}
{{- end -}}
{{- if and $gang.volcanoQueue (has $provider (list "none" "coscheduling")) -}}
{{- $problems = append $problems (printf "scheduling.gang.volcanoQueue: a Volcano Queue needs scheduling.gang.provider=volcano (got %s). Fix: --set scheduling.gang.provider=volcano (or --set scheduling.gang.volcanoQueue=\"\")" $provider) -}}
{{- end -}}
{{- if and (gt (int $gang.scheduleTimeoutSeconds) 0) (has $provider (list "none" "volcano")) -}}
{{- $problems = append $problems (printf "scheduling.gang.scheduleTimeoutSeconds: only the coscheduling PodGroup has a schedule timeout (scheduling.gang.provider=%s). Fix: --set scheduling.gang.scheduleTimeoutSeconds=0 (or --set scheduling.gang.provider=coscheduling)" $provider) -}}
{{- end -}}
{{- $kueue := $v.scheduling.kueue -}}
{{- if and $kueue.queueName (hasKey $gangSchedulers $provider) -}}
{{- $problems = append $problems (printf "scheduling.kueue.queueName: Kueue already admits the TensorFlow pods as one group; scheduling.gang.provider=%s would put them in a second queue (PodGroup) that Kueue does not see, and each could hold them back. Fix: --set scheduling.gang.provider=none (or --set scheduling.kueue.queueName=\"\")" $provider) -}}
{{- end -}}
{{- if and $kueue.priorityClass (not $kueue.queueName) -}}
{{- $problems = append $problems "scheduling.kueue.priorityClass: a Kueue WorkloadPriorityClass needs scheduling.kueue.queueName: without a queue Kueue ignores the pods. Fix: --set scheduling.kueue.queueName=<LocalQueue> (or --set scheduling.kueue.priorityClass=\"\")" -}}
{{- end -}}
{{- /* Topology-aware placement (tf-distributed.topology: the placed roles, and the values key of each setting). */ -}}
{{- $topology := include "tf-distributed.topology" . | fromJson -}}{{- $placed := $topology.roles -}}{{- $backend := $topology.backend -}}{{- $topo := list -}}
{{- range $role := keys $placed | sortAlpha -}}
{{- $p := index $placed $role -}}{{- $k := $p.keys -}}{{- $tier := not (kindIs "invalid" $p.tier) -}}
{{- if not $backend }}{{ $topo = append $topo (printf "%s: topology-aware placement needs Kueue (scheduling.kueue.queueName) or Volcano (scheduling.gang.provider=volcano, got %s): the default scheduler and coscheduling do not place by topology. Fix: --set %s=none (or --set scheduling.kueue.queueName=<LocalQueue>)" $k.mode $provider $k.mode) }}{{ end -}}
{{- if and (eq $backend "kueue") (not $p.level) }}{{ $topo = append $topo (printf "%s: Kueue places the pods in one domain of a level of the Topology of the ClusterQueue's flavor, a node label such as cloud.provider.com/topology-rack (kubectl get topologies -o yaml), but none is set. Fix: --set %s=<node-label> (or --set %s=none)" $k.level $k.level $k.mode) }}{{ end -}}
{{- if and (eq $backend "kueue") $tier }}{{ $topo = append $topo (printf "%s: a HyperNode tier is Volcano's; Kueue places by a node label (scheduling.topology.level). Fix: --set %s=null" $k.tier $k.tier) }}{{ end -}}
{{- if and (eq $backend "volcano") $p.level }}{{ $topo = append $topo (printf "%s: Volcano places by HyperNode tier (scheduling.topology.tier), not by a Kueue Topology's node label. Fix: --set %s=\"\"" $k.level $k.level) }}{{ end -}}
{{- if and (eq $backend "volcano") (eq $p.mode "required") (not $tier) }}{{ $topo = append $topo (printf "%s: Volcano's hard network topology needs the highest HyperNode tier the pods may spread across (1: one HyperNode of the lowest tier, such as a leaf switch). Fix: --set %s=1 (or --set %s=preferred)" $k.tier $k.tier $k.mode) }}{{ end -}}
{{- if and (eq $backend "volcano") (eq $p.mode "preferred") $tier (eq $k.tier (replace ".mode" ".tier" $k.mode)) }}{{ $topo = append $topo (printf "%s: Volcano's soft network topology keeps the pods in the lowest HyperNode tier that fits them and takes no tier. Fix: --set %s=null (or --set %s=required)" $k.tier $k.tier $k.mode) }}{{ end -}}
{{- end -}}
{{- with $topology.together -}}{{- $where := list -}}
{{- range $role := . }}{{ $p := index $placed $role | default dict }}{{ $where = append $where (ternary "not placed" (printf "%s %s" $p.mode (ternary (printf "tier %v" $p.tier) $p.level (eq $backend "volcano"))) (empty $p)) }}{{ end -}}
{{- if and $backend (or (eq (first $where) "not placed") (ne (first $where) (last $where))) }}{{ $topo = append $topo (printf "scheduling.topology.together: the %s and %s pods share one domain, so they need one placement, but %s is %s and %s %s. Fix: --set scheduling.topology.together=false (or the same scheduling.topology.%s.* and scheduling.topology.%s.* settings)" (first .) (last .) (first .) (first $where) (last .) (last $where) (first .) (last .)) }}
{{- else if and (eq $backend "kueue") (eq (first .) "ps") (gt (int $v.ps.replicas) 1) (gt (int $v.worker.replicas) 1) }}{{ $topo = append $topo (printf "scheduling.topology.together: Kueue puts two PodSets in one domain only when one of them is a single pod (a leader and its workers; Kueue v0.19: at least one pod set has only 1 replica), but ps.replicas=%d and worker.replicas=%d. Fix: --set scheduling.topology.together=false (or --set ps.replicas=1)" (int $v.ps.replicas) (int $v.worker.replicas)) }}{{ end -}}
{{- end -}}
{{- range $owner := ternary (list "commonAnnotations" "ps.podAnnotations" "worker.podAnnotations" "chief.podAnnotations" "evaluator.podAnnotations") list (and (not (empty $placed)) (eq $backend "kueue")) -}}
{{- range $key := keys (ternary $v.commonAnnotations (index $v (first (splitList "." $owner))).podAnnotations (eq $owner "commonAnnotations") | default dict) | sortAlpha }}{{ if regexMatch "^kueue\\.x-k8s\\.io/(podset-|role-hash$)" $key }}{{ $topo = append $topo (printf "%s.%s: is set by the chart from scheduling.topology on the TensorFlow pods; set by hand too, Kueue would find two topology requests or split the pod group's PodSets. Fix: --set %s.%s=null" $owner $key $owner ($key | replace "." "\\.")) }}{{ end }}{{ end -}}
{{- end -}}
{{- $problems = concat $problems (uniq $topo) -}}

{{- /* workload.kind: what cannot hold under a JobSet (no StatefulSet, no chief Job before its turn, JobSet's pod names), and JobSet settings without one. */ -}}
{{- $js := $v.workload.jobset -}}
{{- $under := "under a JobSet (workload.kind=jobset)" -}}
{{- if include "tf-distributed.jobsetEnabled" . -}}
{{- range $when := list "onSuccess" "onFailure" }}{{ if eq (index $v.training.cleanup $when) "keep" }}{{ $problems = append $problems (printf "training.cleanup.%s: keep leaves the ps/worker pods running after the run, but %s JobSet deletes the Jobs still running as soon as it completes or fails. Fix: --set training.cleanup.%s=scaleDown (or --set workload.kind=native)" $when $under $when) }}{{ end }}{{ end -}}
{{- if not (kindIs "invalid" $v.chief.ttlSecondsAfterFinished) }}{{ $problems = append $problems (printf "chief.ttlSecondsAfterFinished: %s the chief's Job goes with its JobSet, whose own TTL is workload.jobset.ttlSecondsAfterFinished. Fix: --set workload.jobset.ttlSecondsAfterFinished=%d --set chief.ttlSecondsAfterFinished=null" $under (int $v.chief.ttlSecondsAfterFinished)) }}{{ end -}}
{{- /* the budgets natively rendered: of the ps and worker StatefulSets (tf-distributed.cleanupTargets) */ -}}
{{- range $role := list "ps" "worker" }}{{ if and (index $v $role).podDisruptionBudget.enabled (has (include "tf-distributed.componentName" (dict "context" $ "role" $role)) (include "tf-distributed.cleanupTargets" $ | fromJsonArray)) }}{{ $problems = append $problems (printf "%s.podDisruptionBudget.enabled: the chart's budget (maxUnavailable 0) needs pods of a controller with a scale subresource, and the Jobs of a JobSet (workload.kind=jobset) have none, so Kubernetes could not compute it; %s a drained or preempted %s pod is replaced without counting against backoffLimit (its Job's podFailurePolicy). Fix: --set %s.podDisruptionBudget.enabled=false (or --set workload.kind=native)" $role $under $role $role) }}{{ end }}{{ end -}}
{{- if gt (int $v.scheduling.startTimeoutSeconds) 0 }}{{ $problems = append $problems (printf "scheduling.startTimeoutSeconds: the run supervisor ends a run through its chief's Job, which %s exists only once the ps and workers are Ready (dependsOn), so a run held up before that could not be ended; Kueue's waitForPodsReady or scheduling.gang.scheduleTimeoutSeconds (coscheduling) bound the wait for pods there. Fix: --set scheduling.startTimeoutSeconds=0 (or --set workload.kind=native)" $under) }}{{ end -}}
{{- $budget := include "tf-distributed.nameBudget" . | int -}}
{{- if gt (len $v.fullnameOverride) $budget }}{{ $problems = append $problems (printf "fullnameOverride: %d characters, but %s at most %d: JobSet's admission webhook refuses a JobSet whose longest pod name (<fullname>-evaluator-0-0-<5 random characters>) would pass 63 characters. Fix: --set fullnameOverride=%s" (len $v.fullnameOverride) $under $budget ($v.fullnameOverride | trunc $budget | trimSuffix "-")) }}{{ end -}}
{{- else -}}
{{- if gt (int $js.maxRestarts) 0 }}{{ $problems = append $problems "workload.jobset.maxRestarts: restarts a JobSet, but workload.kind=native runs no JobSet. Fix: --set workload.kind=jobset (or --set workload.jobset.maxRestarts=0)" }}{{ end -}}
{{- if not (kindIs "invalid" $js.ttlSecondsAfterFinished) }}{{ $problems = append $problems "workload.jobset.ttlSecondsAfterFinished: deletes a finished JobSet, but workload.kind=native runs no JobSet (its run's Job has chief.ttlSecondsAfterFinished). Fix: --set workload.kind=jobset (or --set workload.jobset.ttlSecondsAfterFinished=null)" }}{{ end -}}
{{- end -}}

{{- range $owner := list "commonLabels" "ps.podLabels" "worker.podLabels" "chief.podLabels" "evaluator.podLabels" "tensorboard.podLabels" "serving.podLabels" -}}
{{- $labels := ternary $v.commonLabels (index $v (first (splitList "." $owner))).podLabels (eq $owner "commonLabels") | default dict -}}
{{- range $key := list "kueue.x-k8s.io/queue-name" "kueue.x-k8s.io/pod-group-name" "kueue.x-k8s.io/priority-class" "scheduling.x-k8s.io/pod-group" -}}
{{- if hasKey $labels $key -}}
{{- $problems = append $problems (printf "%s.%s: is set by the chart from scheduling.kueue / scheduling.gang on the TensorFlow pods only; by hand it would also label their StatefulSets and Jobs or other pods, which Kueue or the gang scheduler would then admit apart from the group. Fix: --set %s.%s=null (use scheduling.kueue.queueName, scheduling.kueue.priorityClass or scheduling.gang.provider)" $owner $key $owner ($key | replace "." "\\.")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $problems -}}
{{- end -}}
