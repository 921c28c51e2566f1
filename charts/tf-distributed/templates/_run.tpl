{{/*
The run and its supervisor: the run's identity (run-spec), what ended, the StatefulSets the
supervisor ends and its environment.
*/}}

{{/*
The run supervisor (templates/supervisor/, trainer/supervisor.py) runs when it has something to do:
StatefulSets to scale down or an evaluator to suspend on an ending, a start timeout or a stall to
enforce, the chief's progress to write on its Job. Under a JobSet, which deletes its running Jobs itself
when it finishes, only the chief's progress and a stall (the run's JobSet ended through its chief Job's
deadline, its ending recorded on the JobSet).
*/}}
{{- define "tf-distributed.supervisorEnabled" -}}
{{- $v := .Values -}}
{{- if include "tf-distributed.jobsetEnabled" . -}}
{{- include "tf-distributed.progressEnabled" . -}}
{{- else if and $v.supervisor.enabled (or (include "tf-distributed.cleanupTargets" . | fromJsonArray) $v.evaluator.enabled (gt (int $v.scheduling.startTimeoutSeconds) 0) (include "tf-distributed.progressEnabled" .)) -}}true{{- end -}}
{{- end -}}

{{/* The supervisor follows the chief's progress (and so may end a stall): it reads the chief's log. */}}
{{- define "tf-distributed.progressEnabled" -}}
{{- if and .Values.supervisor.enabled (or .Values.supervisor.progress.enabled (gt (int .Values.training.stallTimeoutSeconds) 0)) -}}true{{- end -}}
{{- end -}}

{{/* The ps/worker StatefulSets the supervisor scales to 0 on an ending, as a JSON list: none under a JobSet. */}}
{{- define "tf-distributed.supervisorScales" -}}
{{- if include "tf-distributed.jobsetEnabled" . }}[]{{ else }}{{ include "tf-distributed.cleanupTargets" . }}{{ end -}}
{{- end -}}

{{/* The evaluator Job the supervisor suspends on an ending: none under a JobSet, which deletes it. */}}
{{- define "tf-distributed.supervisorEvaluator" -}}
{{- if and .Values.evaluator.enabled (not (include "tf-distributed.jobsetEnabled" .)) }}{{ include "tf-distributed.componentName" (dict "context" . "role" "evaluator") }}{{ end -}}
{{- end -}}

{{/*
The run's identity: a hash of everything that decides what is trained (training, images, the
TensorFlow roles' replicas, commands, env, resources and GPUs, storage paths), and nothing that
does not (labels, annotations, TensorBoard, Serving, placement). The run's Job carries it in its pod
template, so a changed spec is a new Job (tfchart upgrade --recreate).
*/}}
{{- define "tf-distributed.runSpec" -}}
{{- $v := .Values -}}
{{- /* the stall timeout is the supervisor's: changing it on a running release is no new run */ -}}
{{- $spec := dict "training" (omit $v.training "stallTimeoutSeconds") "image" $v.image "storage" (pick $v.storage "mountPath" "subPath" "existingClaim") -}}
{{- range $role := include "tf-distributed.tfRoles" . | fromJsonArray -}}
{{- $_ := set $spec $role (pick (index $v $role) "replicas" "image" "command" "args" "extraEnv" "resources" "gpu" "workingDir" "home") -}}
{{- end -}}
{{- toJson $spec | sha256sum | trunc 16 -}}
{{- end -}}

{{/*
The live run object as JSON ({} when there is none, and always under helm template or --dry-run=client,
which see no cluster): the run's Job (the chief Job, or the workers' Job), or under workload.kind=jobset
the release's JobSet, which carries the run's records itself and outlives its child Jobs.
*/}}
{{- define "tf-distributed.liveRun" -}}
{{- $namespace := include "tf-distributed.namespace" . -}}
{{- if include "tf-distributed.jobsetEnabled" . -}}
{{- lookup "jobset.x-k8s.io/v1alpha2" "JobSet" $namespace (include "tf-distributed.fullname" .) | default dict | toJson -}}
{{- else -}}
{{- lookup "batch/v1" "Job" $namespace (include "tf-distributed.runJobName" .) | default dict | toJson -}}
{{- end -}}
{{- end -}}

{{/* The run-spec the live run object carries: in the Job's pod template, on the JobSet itself. */}}
{{- define "tf-distributed.liveRunSpec" -}}
{{- $run := include "tf-distributed.liveRun" . | fromJson -}}
{{- if include "tf-distributed.jobsetEnabled" . -}}
{{- dig "metadata" "annotations" "tf-distributed.io/run-spec" "" $run -}}
{{- else -}}
{{- dig "spec" "template" "metadata" "annotations" "tf-distributed.io/run-spec" "" $run -}}
{{- end -}}
{{- end -}}

{{/*
"true" when this run has ended: the live run object carries this render's run-spec and the ending the
supervisor or `tfchart stop` recorded (tf-distributed.io/ending); a JobSet also when it finished on its own
(its Completed or Failed condition). A run is one object: one deleted and created again (tfchart upgrade
--recreate, kubectl delete) is a new run, so its ps, workers and supervisor start again.
*/}}
{{- define "tf-distributed.runFinished" -}}
{{- $run := include "tf-distributed.liveRun" . | fromJson -}}
{{- $ending := dig "metadata" "annotations" "tf-distributed.io/ending" "" $run -}}
{{- if include "tf-distributed.jobsetEnabled" . -}}
{{- range (dig "status" "conditions" (list) $run) }}{{ if and (has .type (list "Completed" "Failed")) (eq .status "True") }}{{ $ending = .type }}{{ end }}{{ end -}}
{{- end -}}
{{- if and $ending (eq (include "tf-distributed.liveRunSpec" .) (include "tf-distributed.runSpec" .)) }}true{{ end -}}
{{- end -}}

{{/*
"true" when this run is suspended (`tfchart suspend`): the live run object carries the suspension record
(tf-distributed.io/suspended) and this render's run-spec. `tfchart resume` brings its pods back.
*/}}
{{- define "tf-distributed.runSuspended" -}}
{{- $run := include "tf-distributed.liveRun" . | fromJson -}}
{{- $record := dig "metadata" "annotations" "tf-distributed.io/suspended" "" $run -}}
{{- if and $record (eq (include "tf-distributed.liveRunSpec" .) (include "tf-distributed.runSpec" .)) }}true{{ end -}}
{{- end -}}

{{/*
The live replicas of a ps/worker StatefulSet whose run has ended (what the supervisor or `keep` left)
or is suspended (0 until `tfchart resume`), else nothing (so the values' replicas apply).
Usage: include "tf-distributed.finishedReplicas" (dict "context" $ "role" "worker")
*/}}
{{- define "tf-distributed.finishedReplicas" -}}
{{- $root := .context -}}
{{- if or (include "tf-distributed.runFinished" $root) (include "tf-distributed.runSuspended" $root) -}}
{{- $live := lookup "apps/v1" "StatefulSet" (include "tf-distributed.namespace" $root) (include "tf-distributed.componentName" (dict "context" $root "role" .role)) | default dict -}}
{{- dig "spec" "replicas" 0 $live | int -}}
{{- end -}}
{{- end -}}

{{/* The ps/worker StatefulSets the supervisor ends, as a JSON list. */}}
{{- define "tf-distributed.cleanupTargets" -}}
{{- $targets := list -}}
{{- if include "tf-distributed.psEnabled" . }}{{ $targets = append $targets (include "tf-distributed.componentName" (dict "context" . "role" "ps")) }}{{ end -}}
{{- if and (include "tf-distributed.workerEnabled" .) (not (include "tf-distributed.workersAsJob" .)) }}{{ $targets = append $targets (include "tf-distributed.componentName" (dict "context" . "role" "worker")) }}{{ end -}}
{{- toJson $targets -}}
{{- end -}}

{{/*
The supervisor's environment: its whole configuration (trainer/supervisor.py Settings). The run's object
(TFD_RUN_KIND, TFD_RUN_NAME): the run's Job, or the JobSet; TFD_CHIEF_JOB: the Job whose deadline ends the
run (native: the run's Job itself; under a JobSet, the chief's Job <fullname>-chief-0).
*/}}
{{- define "tf-distributed.supervisorEnv" -}}
{{- $v := .Values -}}
{{- $roles := include "tf-distributed.tfRoles" . | fromJsonArray -}}
{{- $jobset := include "tf-distributed.jobsetEnabled" . -}}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: TFD_RUN_KIND
  value: {{ ternary "JobSet" "Job" (eq $jobset "true") | quote }}
- name: TFD_RUN_NAME
  value: {{ ternary (include "tf-distributed.fullname" .) (include "tf-distributed.runJobName" .) (eq $jobset "true") | quote }}
- name: TFD_CHIEF_JOB
  value: {{ include "tf-distributed.runJobName" . | quote }}
- name: TFD_EVALUATOR_JOB
  value: {{ include "tf-distributed.supervisorEvaluator" . | quote }}
- name: TFD_STATEFULSETS
  value: {{ include "tf-distributed.supervisorScales" . | fromJsonArray | join "," | quote }}
- name: TFD_SUPERVISOR_DEPLOYMENT
  value: {{ include "tf-distributed.componentName" (dict "context" . "role" "supervisor") | quote }}
- name: TFD_ON_SUCCESS
  value: {{ $v.training.cleanup.onSuccess | quote }}
- name: TFD_ON_FAILURE
  value: {{ $v.training.cleanup.onFailure | quote }}
- name: TFD_START_TIMEOUT_SECONDS
  value: {{ int $v.scheduling.startTimeoutSeconds | quote }}
- name: TFD_POD_SELECTOR
  value: {{ printf "app.kubernetes.io/name=%s,app.kubernetes.io/instance=%s,app.kubernetes.io/component in (%s)" (include "tf-distributed.name" .) .Release.Name (join "," $roles) | quote }}
- name: TFD_EXPECTED_PODS
  value: {{ include "tf-distributed.tfPodCount" . | quote }}
- name: TFD_POLL_SECONDS
  value: {{ int $v.supervisor.pollSeconds | quote }}
- name: TFD_CHIEF_MISSING_SECONDS
  value: {{ int $v.supervisor.chiefMissingSeconds | quote }}
- name: TFD_PROGRESS
  value: {{ ternary "true" "false" (eq (include "tf-distributed.progressEnabled" .) "true") | quote }}
- name: TFD_PROGRESS_JOB
  value: {{ include "tf-distributed.runJobName" . | quote }}
- name: TFD_PROGRESS_CONTAINER
  value: {{ ternary "worker" "chief" (eq (include "tf-distributed.workersAsJob" .) "true") | quote }}
- name: TFD_STALL_TIMEOUT_SECONDS
  value: {{ int $v.training.stallTimeoutSeconds | quote }}
- name: TFD_HEALTH_PORT
  value: "8080"
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- end -}}
