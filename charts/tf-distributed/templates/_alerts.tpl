{{/*
The release's alerts (templates/metrics/prometheusrule.yaml, docs/install.md "Alerts"). Every
expression is scoped to this release: the trainer's tfd_ series by the target labels the chart's
monitors give (namespace and app_kubernetes_io_instance, tf-distributed.monitor's podTargetLabels),
kube-state-metrics' series by the namespace and the exact names of the release's objects.
*/}}

{{/*
Seconds as a Prometheus duration (1h30m, 45s; 0s for 0), for range selectors and alert texts.
Usage: include "tf-distributed.promDuration" (dict "context" $ "seconds" 1800)
*/}}
{{- define "tf-distributed.promDuration" -}}
{{- $s := int .seconds -}}
{{- $out := "" -}}
{{- range $unit := list (list "d" 86400) (list "h" 3600) (list "m" 60) (list "s" 1) -}}
{{- $n := div $s (index $unit 1) -}}
{{- if gt $n 0 }}{{ $out = printf "%s%d%s" $out $n (index $unit 0) }}{{ $s = sub $s (mul $n (index $unit 1)) }}{{ end -}}
{{- end -}}
{{- $out | default "0s" -}}
{{- end -}}

{{/* The label matchers of the release's tfd_ series (the trainer's metrics as the chart's monitors scrape them). */}}
{{- define "tf-distributed.alertSeriesSelector" -}}
namespace="{{ include "tf-distributed.namespace" . }}", app_kubernetes_io_instance="{{ .Release.Name }}"
{{- end -}}

{{/*
The window of TFDistributedRunStalled in seconds: runStalled.windowSeconds, else the supervisor's
training.stallTimeoutSeconds when set, else 30 minutes.
*/}}
{{- define "tf-distributed.stallWindowSeconds" -}}
{{- $set := int .Values.metrics.prometheusRule.runStalled.windowSeconds -}}
{{- $stall := int (default 0 .Values.training.stallTimeoutSeconds) -}}
{{- if gt $set 0 }}{{ $set }}{{ else if gt $stall 0 }}{{ $stall }}{{ else }}1800{{ end -}}
{{- end -}}

{{/*
The oldest checkpoint of a Running chief TFDistributedCheckpointsStopped accepts, in seconds:
checkpointsStopped.maxAgeSeconds, else 2 hours or twice training.checkpointEverySeconds when longer.
*/}}
{{- define "tf-distributed.checkpointMaxAgeSeconds" -}}
{{- $set := int .Values.metrics.prometheusRule.checkpointsStopped.maxAgeSeconds -}}
{{- if gt $set 0 }}{{ $set }}{{ else }}{{ max 7200 (mul 2 (int .Values.training.checkpointEverySeconds)) }}{{ end -}}
{{- end -}}

{{/*
The objects whose pods must be gone once the run ended, as a JSON object {"success": [...],
"failure": [...]}: natively the evaluator Job (the supervisor suspends it on every ending) and the
ps/worker StatefulSets (scaled to 0 unless that ending's training.cleanup policy is keep); under a
JobSet (workload.kind=jobset) the Jobs <fullname>-<role>-0 of the other roles, which JobSet ends
with the run whatever the policy.
*/}}
{{- define "tf-distributed.freedOnEnding" -}}
{{- $v := .Values -}}
{{- if include "tf-distributed.jobsetEnabled" . -}}
{{- $jobs := list -}}
{{- $run := include "tf-distributed.runJobName" . -}}
{{- range $role := include "tf-distributed.tfRoles" . | fromJsonArray -}}
{{- $job := printf "%s-0" (include "tf-distributed.componentName" (dict "context" $ "role" $role)) -}}
{{- if and (ne $job $run) (ne $job (printf "%s-0" $run)) }}{{ $jobs = append $jobs $job }}{{ end -}}
{{- end -}}
{{- toJson (dict "success" $jobs "failure" $jobs) -}}
{{- else -}}
{{- $evaluator := list -}}
{{- if $v.evaluator.enabled }}{{ $evaluator = list (include "tf-distributed.componentName" (dict "context" . "role" "evaluator")) }}{{ end -}}
{{- $statefulSets := include "tf-distributed.cleanupTargets" . | fromJsonArray -}}
{{- $freed := dict "success" $evaluator "failure" $evaluator -}}
{{- if eq $v.training.cleanup.onSuccess "scaleDown" }}{{ $_ := set $freed "success" (concat $statefulSets $evaluator) }}{{ end -}}
{{- if eq $v.training.cleanup.onFailure "scaleDown" }}{{ $_ := set $freed "failure" (concat $statefulSets $evaluator) }}{{ end -}}
{{- toJson $freed -}}
{{- end -}}
{{- end -}}

{{/*
GPUs (kube-state-metrics' sanitized resource names of the ps/worker/evaluator gpu.resourceName)
requested by the live (not Succeeded/Failed) pods of the named owners, per pod, while the run's Job
has the condition (kube_job_complete or kube_job_failed).
Usage: include "tf-distributed.gpusHeldExpr" (dict "context" $ "owners" (list ...) "condition" "kube_job_complete")
*/}}
{{- define "tf-distributed.gpusHeldExpr" -}}
{{- $root := .context -}}
{{- $ns := include "tf-distributed.namespace" $root -}}
{{- $resources := list -}}
{{- range $role := list "ps" "worker" "evaluator" -}}
{{- $resources = append $resources (regexReplaceAll "[^a-zA-Z0-9_]" (index $root.Values $role).gpu.resourceName "_") -}}
{{- end -}}
(
  sum by (namespace, pod) (kube_pod_container_resource_requests{namespace="{{ $ns }}", resource=~"{{ $resources | uniq | join "|" }}"})
  and on (namespace, pod) (kube_pod_status_phase{namespace="{{ $ns }}", phase=~"Pending|Running|Unknown"} == 1)
  and on (namespace, pod) kube_pod_owner{namespace="{{ $ns }}", owner_name=~"{{ .owners | join "|" }}"}
  and on (namespace) ({{ .condition }}{namespace="{{ $ns }}", job_name="{{ include "tf-distributed.runJobName" $root }}", condition="true"} == 1)
)
{{- end -}}
