{{/*
The TensorFlow cluster: which roles run and how, the cluster map and its size (which validateValues
holds to Linux's limit), the shell prelude that writes TF_CONFIG and the trainer's argv.
*/}}

{{/* Which TensorFlow roles the strategy runs as long-lived StatefulSets. */}}
{{- define "tf-distributed.psEnabled" -}}
{{- if and (eq .Values.training.strategy "parameter_server") (gt (int .Values.ps.replicas) 0) -}}true{{- end -}}
{{- end -}}

{{- define "tf-distributed.workerEnabled" -}}
{{- if and (has .Values.training.strategy (list "parameter_server" "multi_worker_mirrored")) (gt (int .Values.worker.replicas) 0) -}}true{{- end -}}
{{- end -}}

{{/* A separate chief task: always, except multi_worker_mirrored with chief.replicas=0 (worker 0 is the chief). */}}
{{- define "tf-distributed.chiefEnabled" -}}
{{- if or (ne .Values.training.strategy "multi_worker_mirrored") (gt (int .Values.chief.replicas) 0) -}}true{{- end -}}
{{- end -}}

{{/* Without a chief the workers are an Indexed Job that completes when training ends. */}}
{{- define "tf-distributed.workersAsJob" -}}
{{- if and (include "tf-distributed.workerEnabled" .) (not (include "tf-distributed.chiefEnabled" .)) -}}true{{- end -}}
{{- end -}}

{{/*
workload.kind=jobset: one JobSet (templates/jobset/jobset.yaml) runs every TensorFlow pod, one Indexed
Job per role, instead of the ps/worker StatefulSets and the chief/evaluator Jobs.
*/}}
{{- define "tf-distributed.jobsetEnabled" -}}
{{- if eq .Values.workload.kind "jobset" -}}true{{- end -}}
{{- end -}}

{{/* The role whose Job's ending is the run's: the chief, or the workers when worker 0 is the chief. */}}
{{- define "tf-distributed.runRole" -}}
{{- ternary "worker" "chief" (eq (include "tf-distributed.workersAsJob" .) "true") -}}
{{- end -}}

{{/*
That Job's name: <fullname>-chief (or -worker); under a JobSet, its Job of that role <fullname>-<role>-0
(JobSet names a Job <jobset>-<replicatedJob>-<jobIndex>).
*/}}
{{- define "tf-distributed.runJobName" -}}
{{- $name := include "tf-distributed.componentName" (dict "context" . "role" (include "tf-distributed.runRole" .)) -}}
{{- if include "tf-distributed.jobsetEnabled" . }}{{ printf "%s-0" $name }}{{ else }}{{ $name }}{{ end -}}
{{- end -}}

{{- define "tf-distributed.tfRoles" -}}
{{- $roles := list -}}
{{- if include "tf-distributed.psEnabled" . }}{{ $roles = append $roles "ps" }}{{ end -}}
{{- if include "tf-distributed.workerEnabled" . }}{{ $roles = append $roles "worker" }}{{ end -}}
{{- if include "tf-distributed.chiefEnabled" . }}{{ $roles = append $roles "chief" }}{{ end -}}
{{- if .Values.evaluator.enabled }}{{ $roles = append $roles "evaluator" }}{{ end -}}
{{- toJson $roles -}}
{{- end -}}

{{/*
DNS name of one TensorFlow task's pod, <hostname>.<subdomain> (the namespace and cluster domain follow):
  native  <fullname>-<role>-<i>.<fullname>-<role>   a StatefulSet pod (or an Indexed Job pod) under its
                                                     role's headless Service
          <fullname>-chief.<fullname>-chief          the chief Job's pod: hostname and subdomain set
  jobset  <fullname>-<role>-0-<i>.<fullname>         the Job controller names an Indexed Job's pod
                                                     <job>-<index>, JobSet names its Jobs
                                                     <jobset>-<replicatedJob>-<jobIndex> and its
                                                     headless Service (network.subdomain) <jobset>
Usage: include "tf-distributed.taskHost" (dict "context" $ "role" "worker" "index" 3)
*/}}
{{- define "tf-distributed.taskHost" -}}
{{- $root := .context -}}
{{- $service := include "tf-distributed.componentName" (dict "context" $root "role" .role) -}}
{{- if include "tf-distributed.jobsetEnabled" $root -}}
{{- printf "%s-0-%d.%s" $service (int .index) (include "tf-distributed.fullname" $root) -}}
{{- else if eq .role "chief" -}}
{{- printf "%s.%s" $service $service -}}
{{- else -}}
{{- printf "%s-%d.%s" $service (int .index) $service -}}
{{- end -}}
{{- end -}}

{{/*
The lengths of a task host's two labels (tf-distributed.taskHost), for the size rules below, as JSON
{"<role>": [host, subdomain]}: the host label without its index digits (the chief's whole label: its
index is always 0). tests/chart/test_cluster_limits.py and test_jobset.py hold them to rendered maps.
*/}}
{{- define "tf-distributed.taskHostShape" -}}
{{- $prefix := len (include "tf-distributed.fullname" .) -}}
{{- $jobset := eq (include "tf-distributed.jobsetEnabled" .) "true" -}}
{{- $shape := dict -}}
{{- range $role := list "chief" "ps" "worker" -}}
{{- $own := add $prefix 1 (len $role) -}}
{{- $chief := eq $role "chief" -}}
{{- if $jobset -}}
{{- $_ := set $shape $role (list (add $own (ternary 4 3 $chief)) $prefix) -}}
{{- else -}}
{{- $_ := set $shape $role (list (add $own (ternary 0 1 $chief)) $own) -}}
{{- end -}}
{{- end -}}
{{- toJson $shape -}}
{{- end -}}

{{/*
Address of one TensorFlow task: the stable DNS name of its pod (tf-distributed.taskHost) and its port.
Usage: include "tf-distributed.taskAddress" (dict "context" $ "role" "worker" "index" 3 "port" 2222)
*/}}
{{- define "tf-distributed.taskAddress" -}}
{{- $root := .context -}}
{{- $host := include "tf-distributed.taskHost" (dict "context" $root "role" .role "index" .index) -}}
{{- printf "%s.%s.svc.%s:%d" $host (include "tf-distributed.namespace" $root) $root.Values.clusterDomain (int .port) -}}
{{- end -}}

{{/*
The cluster map (TF_CONFIG "cluster"), rendered once from the same helper that names the pods:
job name -> addresses ordered by task index (StatefulSet ordinal, Indexed Job completion index).
*/}}
{{- define "tf-distributed.clusterSpec" -}}
{{- $cluster := dict -}}
{{- if include "tf-distributed.chiefEnabled" . -}}
{{- $_ := set $cluster "chief" (list (include "tf-distributed.taskAddress" (dict "context" $ "role" "chief" "index" 0 "port" .Values.chief.service.port))) -}}
{{- end -}}
{{- if include "tf-distributed.psEnabled" . -}}
{{- $ps := list -}}
{{- range $i := until (int .Values.ps.replicas) }}{{ $ps = append $ps (include "tf-distributed.taskAddress" (dict "context" $ "role" "ps" "index" $i "port" $.Values.ps.service.port)) }}{{ end -}}
{{- $_ := set $cluster "ps" $ps -}}
{{- end -}}
{{- if include "tf-distributed.workerEnabled" . -}}
{{- $workers := list -}}
{{- range $i := until (int .Values.worker.replicas) }}{{ $workers = append $workers (include "tf-distributed.taskAddress" (dict "context" $ "role" "worker" "index" $i "port" $.Values.worker.service.port)) }}{{ end -}}
{{- $_ := set $cluster "worker" $workers -}}
{{- end -}}
{{- toJson $cluster -}}
{{- end -}}

{{/*
Size of the cluster map, computed without rendering it: validateValues compares it with Linux's
limit on one environment variable. The map is {"chief":["<chief>"],"ps":[...],"worker":[...]}
with addresses <host><i>.<subdomain>.<namespace>.svc.<clusterDomain>:<port> (tf-distributed.taskHostShape
gives the lengths of <host> and <subdomain>), so each role adds count * (len(host) + len(subdomain) +
len(namespace) + len(clusterDomain) + 10 + digits(port)) + digits of its indexes + count - 1 (commas) +
the key. tests/chart/test_cluster_limits.py holds it to len() of the rendered map.
*/}}
{{/* Characters of the ordinals 0 .. n-1 in decimal. Usage: include "tf-distributed.digitSum" 120 */}}
{{- define "tf-distributed.digitSum" -}}
{{- $n := int . -}}
{{- $total := 0 -}}
{{- $low := 0 -}}
{{- $high := 10 -}}
{{- range $digits := until 7 -}}
{{- if gt $n $low }}{{ $total = add $total (mul (sub (min $n $high) $low) (add $digits 1)) }}{{ end -}}
{{- $low = $high -}}
{{- $high = mul $high 10 -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* Tasks of each role in the map, as JSON {"ps": P, "worker": W} (0 where the role is absent). */}}
{{- define "tf-distributed.clusterTasks" -}}
{{- $ps := ternary (int .Values.ps.replicas) 0 (eq (include "tf-distributed.psEnabled" .) "true") -}}
{{- $workers := ternary (int .Values.worker.replicas) 0 (eq (include "tf-distributed.workerEnabled" .) "true") -}}
{{- toJson (dict "ps" $ps "worker" $workers) -}}
{{- end -}}

{{/* len() of the cluster map with P parameter servers and W workers. Usage: include "tf-distributed.clusterMapBytes" (dict "context" $ "ps" P "workers" W) */}}
{{- define "tf-distributed.clusterMapBytes" -}}
{{- $root := .context -}}
{{- $v := $root.Values -}}
{{- $shape := include "tf-distributed.taskHostShape" $root | fromJson -}}
{{- $common := add (len (include "tf-distributed.namespace" $root)) (len $v.clusterDomain) -}}
{{- /* {"chief":[""]} is 12 characters; each address adds its two dots, ".svc.", ":" and its quotes (10) */ -}}
{{- $size := add 12 (index $shape.chief 0) (index $shape.chief 1) $common 10 (len (toString (int $v.chief.service.port))) -}}
{{- range $role := list (list "ps" .ps 8) (list "worker" .workers 12) -}}
{{- $count := int (index $role 1) -}}
{{- if gt $count 0 -}}
{{- $labels := index $shape (index $role 0) -}}
{{- $port := len (toString (int (index $v (index $role 0)).service.port)) -}}
{{- $element := add (index $labels 0) (index $labels 1) $common 10 $port -}}
{{- $size = add $size (index $role 2) (mul $count $element) (include "tf-distributed.digitSum" $count | int) $count -1 -}}
{{- end -}}
{{- end -}}
{{- $size -}}
{{- end -}}

{{/*
Bytes of the largest TF_CONFIG=<value> string a task execs with (NUL included): the map plus
{"cluster":,"task":{"type":"<type>","index":<i>}} of the task with the longest type and index.
Usage: include "tf-distributed.tfConfigBytes" (dict "context" $ "ps" P "workers" W)
*/}}
{{- define "tf-distributed.tfConfigBytes" -}}
{{- $root := .context -}}
{{- $ps := int .ps -}}
{{- $workers := int .workers -}}
{{- $task := 6 -}}
{{- if gt $ps 0 }}{{ $task = max $task (add 2 (len (toString (sub $ps 1)))) }}{{ end -}}
{{- if gt $workers 0 }}{{ $task = max $task (add 6 (len (toString (sub $workers 1)))) }}{{ end -}}
{{- if $root.Values.evaluator.enabled }}{{ $task = max $task 10 }}{{ end -}}
{{- add 10 (include "tf-distributed.clusterMapBytes" (dict "context" $root "ps" $ps "workers" $workers) | int) 40 $task 1 -}}
{{- end -}}

{{/* The longest task host name of the map, as JSON {"task": "worker 41", "length": N}. */}}
{{- define "tf-distributed.longestTaskHost" -}}
{{- $shape := include "tf-distributed.taskHostShape" . | fromJson -}}
{{- $common := add (len (include "tf-distributed.namespace" .)) (len .Values.clusterDomain) 7 -}}
{{- $tasks := include "tf-distributed.clusterTasks" . | fromJson -}}
{{- $task := "chief" -}}
{{- $length := add (index $shape.chief 0) (index $shape.chief 1) $common -}}
{{- range $role := list "ps" "worker" -}}
{{- $count := int (index $tasks $role) -}}
{{- if gt $count 0 -}}
{{- $labels := index $shape $role -}}
{{- $host := add (index $labels 0) (len (toString (sub $count 1))) (index $labels 1) $common -}}
{{- if gt $host $length }}{{ $task = printf "%s %d" $role (sub $count 1) }}{{ $length = $host }}{{ end -}}
{{- end -}}
{{- end -}}
{{- toJson (dict "task" $task "length" $length) -}}
{{- end -}}

{{/*
Shell prelude of every TensorFlow container: derives the task index (StatefulSet ordinal from the
pod-index label, else the hostname suffix), writes TF_CONFIG in TensorFlow's exact shape and execs
the real command. Needs only /bin/sh, so any image whose program reads TF_CONFIG works.
*/}}
{{- define "tf-distributed.prelude" -}}
set -eu
index="${TFD_TASK_INDEX:-}"
[ -n "$index" ] || index="${HOSTNAME##*-}"
case "$index" in
  ''|*[!0-9]*)
    echo "tf-distributed: cannot derive the ${TFD_TASK_TYPE} task index from HOSTNAME='${HOSTNAME:-}' (expected <name>-<ordinal>); set TFD_TASK_INDEX" >&2
    exit 64 ;;
esac
TF_CONFIG="{\"cluster\":${TFD_CLUSTER},\"task\":{\"type\":\"${TFD_TASK_TYPE}\",\"index\":${index}}}"
export TF_CONFIG
exec "$@"
{{- end -}}

{{/* Trainer arguments rendered from .Values.training. */}}
{{- define "tf-distributed.trainerArgs" -}}
{{- $t := .Values.training -}}
{{- $args := list
  (printf "--strategy=%s" $t.strategy)
  (printf "--dataset=%s" $t.dataset)
  (printf "--data-dir=%s" ($t.dataDir | default (printf "%s/datasets" .Values.storage.mountPath)))
  (printf "--storage-root=%s" .Values.storage.mountPath)
  (printf "--model-name=%s" $t.modelName)
  (printf "--batch-size=%d" (int $t.batchSize))
  (printf "--train-steps=%d" (int $t.trainSteps))
  (printf "--learning-rate=%v" $t.learningRate)
  (printf "--checkpoint-every-steps=%d" (int $t.checkpointEverySteps))
  (printf "--log-every-steps=%d" (int $t.logEverySteps))
  (printf "--steps-per-execution=%d" (int $t.stepsPerExecution))
  (printf "--checkpoint-every-seconds=%d" (int $t.checkpointEverySeconds))
  (printf "--shutdown-grace-seconds=%d" (max 1 (sub (int .Values.chief.terminationGracePeriodSeconds) 5)))
  "--cleanup=keep"
-}}
{{- if $t.download }}{{ $args = append $args "--download" }}{{ end -}}
{{- if $t.logDevicePlacement }}{{ $args = append $args "--log-device-placement" }}{{ end -}}
{{- if ne ($t.precision | default "auto") "auto" }}{{ $args = append $args (printf "--precision=%s" $t.precision) }}{{ end -}}
{{- if gt (float64 ($t.exportMinAccuracy | default 0)) 0.0 }}{{ $args = append $args (printf "--export-min-accuracy=%v" $t.exportMinAccuracy) }}{{ end -}}
{{- if include "tf-distributed.workersAsJob" . }}{{ $args = append $args "--exit-when-done" }}{{ end -}}
{{- toJson (concat $args $t.extraArgs) -}}
{{- end -}}

{{/*
The TensorFlow roles that run the project's trainer with the arguments rendered from training.* (no
command or args of their own): the rules about training.* (validateValues) apply only when one does.
*/}}
{{- define "tf-distributed.trainerRoles" -}}
{{- $roles := list -}}
{{- range $role := include "tf-distributed.tfRoles" . | fromJsonArray -}}
{{- $c := index $.Values $role -}}
{{- if and (empty $c.command) (empty $c.args) }}{{ $roles = append $roles $role }}{{ end -}}
{{- end -}}
{{- toJson $roles -}}
{{- end -}}

{{/*
argv of a TensorFlow container: the component's command/args override, else the trainer.
Usage: include "tf-distributed.tfArgv" (dict "context" $ "component" .Values.worker)
*/}}
{{- define "tf-distributed.tfArgv" -}}
{{- $root := .context -}}
{{- $component := .component -}}
{{- $command := $component.command | default (list "python" "-m" "trainer") -}}
{{- $args := $component.args -}}
{{- if and (empty $component.command) (empty $component.args) }}{{ $args = include "tf-distributed.trainerArgs" $root | fromJsonArray }}{{ end -}}
{{- toJson (concat $command $args) -}}
{{- end -}}
