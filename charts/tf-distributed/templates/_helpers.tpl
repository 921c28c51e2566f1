{{/* vim: set filetype=mustache: */}}

{{/*
Name budget. Pod hostnames must be DNS labels (<= 63 characters):
  StatefulSet pod hostname      <fullname>-worker-<ordinal>          (ordinal < 100000: 6 chars)
  controller-revision-hash      <fullname>-worker-<10-char hash>     (a label value, <= 63)
  chief pod hostname            <fullname>-chief
The longest component suffix is "-worker" (7) and the revision hash adds "-" + 10 = 11, so
  len(fullname) <= 63 - 7 - 11 = 45.
A longer <release>-<name> keeps its first 36 characters and ends in "-" + the first 8 hex digits of
the SHA-256 of the whole name, so two long release names that share a 45-character prefix still get
different object names. Every object name is <fullname>-<component>; Service names must be DNS-1035
labels (start with a letter), so validateValues rejects a release name that starts with a digit.
*/}}
{{- define "tf-distributed.nameBudget" -}}45{{- end -}}

{{- define "tf-distributed.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The untruncated name prefix: fullnameOverride, else <release>-<name> (the release alone when it contains the name). */}}
{{- define "tf-distributed.untruncatedFullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tf-distributed.fullname" -}}
{{- $budget := include "tf-distributed.nameBudget" . | int -}}
{{- $full := include "tf-distributed.untruncatedFullname" . -}}
{{- if le (len $full) $budget -}}
{{- $full | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" ($full | trunc (sub $budget 9 | int) | trimSuffix "-") (sha256sum $full | trunc 8) -}}
{{- end -}}
{{- end -}}

{{/* Object name of a component: <fullname>-<component>. Usage: include "tf-distributed.componentName" (list $ "worker") */}}
{{- define "tf-distributed.componentName" -}}
{{- printf "%s-%s" (include "tf-distributed.fullname" (index . 0)) (index . 1) -}}
{{- end -}}

{{- define "tf-distributed.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tf-distributed.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: name + instance + component only (immutable in StatefulSets and Jobs). */}}
{{- define "tf-distributed.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "tf-distributed.name" $root | quote }}
app.kubernetes.io/instance: {{ $root.Release.Name | quote }}
app.kubernetes.io/component: {{ index . 1 }}
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

{{/* Full labels of a component's objects. Usage: include "tf-distributed.labels" (list $ "worker") */}}
{{- define "tf-distributed.labels" -}}
{{ include "tf-distributed.releaseLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/*
Labels of pod templates: no chart or app version, so that a chart upgrade alone neither rolls every
pod nor changes the (immutable) pod template of the chief Job.
*/}}
{{- define "tf-distributed.podLabels" -}}
{{- $root := index . 0 -}}
{{ include "tf-distributed.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: tf-distributed
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
metadata block shared by every object, with the chart's own annotations of this object as an
optional 4th element. Usage: include "tf-distributed.metadata" (list $ "worker" "<name>")
*/}}
{{- define "tf-distributed.metadata" -}}
{{- $root := index . 0 -}}
name: {{ index . 2 | quote }}
namespace: {{ include "tf-distributed.namespace" $root | quote }}
labels:
  {{- include "tf-distributed.labels" (list $root (index . 1)) | nindent 2 }}
{{- $own := dict -}}
{{- if gt (len .) 3 }}{{ $own = index . 3 }}{{ end -}}
{{- with merge (dict) $own ($root.Values.commonAnnotations | default dict) }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Image reference of a component: fields left empty fall back to the trainer image (.Values.image);
global.imageRegistry overrides every registry. Usage: include "tf-distributed.image" (list $ .Values.worker.image)
*/}}
{{- define "tf-distributed.image" -}}
{{- $root := index . 0 -}}
{{- $own := index . 1 -}}
{{- $base := $root.Values.image -}}
{{- $registry := $root.Values.global.imageRegistry | default $own.registry | default $base.registry -}}
{{- $repository := $own.repository | default $base.repository -}}
{{- $tag := $own.tag | default $base.tag | default $root.Chart.AppVersion | toString -}}
{{- $digest := $own.digest | default (ternary $base.digest "" (empty $own.repository)) -}}
{{- $ref := $repository -}}
{{- if $registry }}{{ $ref = printf "%s/%s" $registry $repository }}{{ end -}}
{{- if $digest -}}
{{- printf "%s@%s" $ref $digest -}}
{{- else -}}
{{- printf "%s:%s" $ref $tag -}}
{{- end -}}
{{- end -}}

{{- define "tf-distributed.imagePullPolicy" -}}
{{- $own := index . 1 -}}
{{- $own.pullPolicy | default (index . 0).Values.image.pullPolicy -}}
{{- end -}}

{{- define "tf-distributed.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tf-distributed.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The run supervisor (templates/supervisor/, trainer/supervisor.py) runs when it has something to do
on an ending: StatefulSets to scale down, an evaluator to suspend or a start timeout to enforce.
*/}}
{{- define "tf-distributed.supervisorEnabled" -}}
{{- $v := .Values -}}
{{- if and $v.supervisor.enabled (or (include "tf-distributed.cleanupTargets" . | fromJsonArray) $v.evaluator.enabled (gt (int $v.scheduling.startTimeoutSeconds) 0)) -}}true{{- end -}}
{{- end -}}

{{/*
The run's identity: a hash of everything that decides what is trained (training, images, the
TensorFlow roles' replicas, commands, env, resources and GPUs, storage paths), and nothing that
does not (labels, annotations, TensorBoard, Serving, placement). The supervisor copies it into
tf-distributed.io/finished-run-spec when the run ends; a render that finds its own run-spec there
(lookup) keeps the finished StatefulSets at their live replicas and the supervisor at 0, and the
chief's pod template carries it, so a changed spec is a new Job (tfchart upgrade --recreate).
*/}}
{{- define "tf-distributed.runSpec" -}}
{{- $v := .Values -}}
{{- $spec := dict "training" $v.training "image" $v.image "storage" (pick $v.storage "mountPath" "subPath" "existingClaim") -}}
{{- range $role := include "tf-distributed.tfRoles" . | fromJsonArray -}}
{{- $_ := set $spec $role (pick (index $v $role) "replicas" "image" "command" "args" "extraEnv" "resources" "gpu" "workingDir" "home") -}}
{{- end -}}
{{- toJson $spec | sha256sum | trunc 16 -}}
{{- end -}}

{{/*
Live replicas of a ps/worker StatefulSet whose run already ended with this run-spec, else nothing
(so the values' replicas apply). helm template and --dry-run=client see no cluster: never finished.
Usage: include "tf-distributed.finishedReplicas" (list $ "worker")
*/}}
{{- define "tf-distributed.finishedReplicas" -}}
{{- $root := index . 0 -}}
{{- $live := lookup "apps/v1" "StatefulSet" (include "tf-distributed.namespace" $root) (include "tf-distributed.componentName" (list $root (index . 1))) -}}
{{- $annotations := dig "metadata" "annotations" (dict) ($live | default dict) -}}
{{- if and $live (eq (get $annotations "tf-distributed.io/finished-run-spec") (include "tf-distributed.runSpec" $root)) -}}
{{- dig "spec" "replicas" 0 $live | int -}}
{{- end -}}
{{- end -}}

{{/* "true" when every ps/worker StatefulSet of this run-spec has ended (the supervisor's work is done). */}}
{{- define "tf-distributed.runFinished" -}}
{{- $targets := include "tf-distributed.cleanupTargets" . | fromJsonArray -}}
{{- $finished := gt (len $targets) 0 -}}
{{- range $role := list "ps" "worker" -}}
{{- if and (has (include "tf-distributed.componentName" (list $ $role)) $targets) (eq (include "tf-distributed.finishedReplicas" (list $ $role)) "") }}{{ $finished = false }}{{ end -}}
{{- end -}}
{{- if $finished }}true{{ end -}}
{{- end -}}

{{- define "tf-distributed.claimName" -}}
{{- default (include "tf-distributed.componentName" (list . "data")) .Values.storage.existingClaim -}}
{{- end -}}

{{/*
Storage placement. Every pod of the release mounts the shared claim. Without ReadWriteMany the
pods must share the volume on one node, so each gets a required podAffinity to the release's pods
on kubernetes.io/hostname (tf-distributed.affinity); the twin of these helpers is tfchart/rules.py.
*/}}
{{- define "tf-distributed.colocate" -}}
{{- if not (has "ReadWriteMany" .Values.storage.accessModes) -}}true{{- end -}}
{{- end -}}

{{/* Pods that mount the claim, as JSON {"total": N, "roles": ["ps 1", "worker 2", ...]}; the helm test pod counts. */}}
{{- define "tf-distributed.claimPods" -}}
{{- $v := .Values -}}
{{- $counts := list -}}
{{- if include "tf-distributed.psEnabled" . }}{{ $counts = append $counts (list "ps" (int $v.ps.replicas)) }}{{ end -}}
{{- if include "tf-distributed.workerEnabled" . }}{{ $counts = append $counts (list "worker" (int $v.worker.replicas)) }}{{ end -}}
{{- if include "tf-distributed.chiefEnabled" . }}{{ $counts = append $counts (list "chief" 1) }}{{ end -}}
{{- if $v.evaluator.enabled }}{{ $counts = append $counts (list "evaluator" 1) }}{{ end -}}
{{- if $v.tensorboard.enabled }}{{ $counts = append $counts (list "tensorboard" (int $v.tensorboard.replicas)) }}{{ end -}}
{{- if $v.serving.enabled }}{{ $counts = append $counts (list "serving" (int $v.serving.replicas)) }}{{ end -}}
{{- if $v.tests.enabled }}{{ $counts = append $counts (list "helm test" 1) }}{{ end -}}
{{- $total := 0 -}}
{{- $roles := list -}}
{{- range $counts }}{{ $total = add $total (index . 1) }}{{ $roles = append $roles (printf "%s %d" (index . 0) (index . 1)) }}{{ end -}}
{{- toJson (dict "total" $total "roles" $roles) -}}
{{- end -}}

{{/* "N pods mount the claim (ps 1, worker 2, ...)": the subject of the storage messages. */}}
{{- define "tf-distributed.claimPodsPhrase" -}}
{{- $pods := include "tf-distributed.claimPods" . | fromJson -}}
{{- $total := int $pods.total -}}
{{- printf "%d %s the claim (%s)" $total (ternary "pod mounts" "pods mount" (eq $total 1)) (join ", " $pods.roles) -}}
{{- end -}}

{{/* The one line `tfchart validate` prints too: the access mode these values need, and why. */}}
{{- define "tf-distributed.storageNeed" -}}
{{- $modes := .Values.storage.accessModes -}}
{{- $pods := include "tf-distributed.claimPodsPhrase" . -}}
{{- if has "ReadWriteMany" $modes -}}
storage: needs ReadWriteMany: {{ $pods }} from any node, so the StorageClass must offer ReadWriteMany (NFS, CephFS, EFS, Azure Files, Filestore, Longhorn...)
{{- else if has "ReadWriteOnce" $modes -}}
storage: needs ReadWriteOnce: {{ $pods }} from one node (co-located), so any StorageClass will do
{{- else -}}
storage: needs {{ first $modes }}: {{ $pods }}
{{- end -}}
{{- end -}}

{{/*
A pod's affinity: the component's own, plus (tf-distributed.colocate) a required podAffinity term
that puts it on the node of the release's other pods. The term matches the pod itself, so the
first pod of the release schedules freely and picks the node. Usage: include "tf-distributed.affinity" (list $ .Values.worker)
*/}}
{{- define "tf-distributed.affinity" -}}
{{- $root := index . 0 -}}
{{- $affinity := deepCopy ((index . 1).affinity | default dict) -}}
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

{{/*
Selector of this release's pods of some components (NetworkPolicy peers and targets).
Usage: include "tf-distributed.tfPodSelector" (list $ (list "chief" "ps"))
*/}}
{{- define "tf-distributed.tfPodSelector" -}}
{{- $root := index . 0 -}}
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
    values: [{{ join ", " (index . 1) }}]
{{- end -}}

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

{{/* The Job whose ending is the run's: the chief's, or the workers' when worker 0 is the chief. */}}
{{- define "tf-distributed.runJobName" -}}
{{- include "tf-distributed.componentName" (list . (ternary "worker" "chief" (eq (include "tf-distributed.workersAsJob" .) "true"))) -}}
{{- end -}}

{{/* The ps/worker StatefulSets the supervisor ends, as a JSON list. */}}
{{- define "tf-distributed.cleanupTargets" -}}
{{- $targets := list -}}
{{- if include "tf-distributed.psEnabled" . }}{{ $targets = append $targets (include "tf-distributed.componentName" (list . "ps")) }}{{ end -}}
{{- if and (include "tf-distributed.workerEnabled" .) (not (include "tf-distributed.workersAsJob" .)) }}{{ $targets = append $targets (include "tf-distributed.componentName" (list . "worker")) }}{{ end -}}
{{- toJson $targets -}}
{{- end -}}

{{/*
Address of one TensorFlow task: the stable DNS name of its pod through its headless Service.
Usage: include "tf-distributed.taskAddress" (list $ "worker" 3 2222)
*/}}
{{- define "tf-distributed.taskAddress" -}}
{{- $root := index . 0 -}}
{{- $service := include "tf-distributed.componentName" (list $root (index . 1)) -}}
{{- printf "%s-%d.%s.%s.svc.%s:%d" $service (int (index . 2)) $service (include "tf-distributed.namespace" $root) $root.Values.clusterDomain (int (index . 3)) -}}
{{- end -}}

{{/*
The cluster map (TF_CONFIG "cluster"), rendered once from the same helpers that name the Services:
job name -> addresses ordered by StatefulSet ordinal. The chief is a Job pod whose hostname and
subdomain are both <fullname>-chief, so its address has the same shape with ordinal-free hostname.
*/}}
{{- define "tf-distributed.clusterSpec" -}}
{{- $chiefService := include "tf-distributed.componentName" (list . "chief") -}}
{{- $cluster := dict -}}
{{- if include "tf-distributed.chiefEnabled" . -}}
{{- $_ := set $cluster "chief" (list (printf "%s.%s.%s.svc.%s:%d" $chiefService $chiefService (include "tf-distributed.namespace" .) .Values.clusterDomain (int .Values.chief.service.port))) -}}
{{- end -}}
{{- if include "tf-distributed.psEnabled" . -}}
{{- $ps := list -}}
{{- range $i := until (int .Values.ps.replicas) }}{{ $ps = append $ps (include "tf-distributed.taskAddress" (list $ "ps" $i $.Values.ps.service.port)) }}{{ end -}}
{{- $_ := set $cluster "ps" $ps -}}
{{- end -}}
{{- if include "tf-distributed.workerEnabled" . -}}
{{- $workers := list -}}
{{- range $i := until (int .Values.worker.replicas) }}{{ $workers = append $workers (include "tf-distributed.taskAddress" (list $ "worker" $i $.Values.worker.service.port)) }}{{ end -}}
{{- $_ := set $cluster "worker" $workers -}}
{{- end -}}
{{- toJson $cluster -}}
{{- end -}}

{{/*
Size of the cluster map, computed the way tfchart/rules.py (ClusterShape) does, without rendering
it: validateValues compares it with Linux's limit on one environment variable. The map is
{"chief":["<chief>"],"ps":[...],"worker":[...]} with addresses
<service>-<i>.<service>.<namespace>.svc.<clusterDomain>:<port>, so each role adds
count * (2 len(service) + len(namespace) + len(clusterDomain) + 11 + digits(port)) + digits of its
ordinals + count - 1 (commas) + the key. Tests hold it to len() of the rendered map.
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

{{/* len() of the cluster map with P parameter servers and W workers. Usage: include "tf-distributed.clusterMapBytes" (list $ P W) */}}
{{- define "tf-distributed.clusterMapBytes" -}}
{{- $root := index . 0 -}}
{{- $v := $root.Values -}}
{{- $prefix := len (include "tf-distributed.fullname" $root) -}}
{{- $common := add (len (include "tf-distributed.namespace" $root)) (len $v.clusterDomain) -}}
{{- $size := add 11 (mul 2 (add $prefix 6)) $common 8 (len (toString (int $v.chief.service.port))) 2 1 -}}
{{- range $role := list (list "ps" 3 (index . 1) 8) (list "worker" 7 (index . 2) 12) -}}
{{- $count := int (index $role 2) -}}
{{- if gt $count 0 -}}
{{- $service := add $prefix (index $role 1) -}}
{{- $port := len (toString (int (index $v (index $role 0)).service.port)) -}}
{{- $element := add (mul 2 $service) $common 11 $port -}}
{{- $size = add $size (index $role 3) (mul $count $element) (include "tf-distributed.digitSum" $count | int) $count -1 -}}
{{- end -}}
{{- end -}}
{{- $size -}}
{{- end -}}

{{/*
Bytes of the largest TF_CONFIG=<value> string a task execs with (NUL included): the map plus
{"cluster":,"task":{"type":"<type>","index":<i>}} of the task with the longest type and index.
Usage: include "tf-distributed.tfConfigBytes" (list $ P W)
*/}}
{{- define "tf-distributed.tfConfigBytes" -}}
{{- $root := index . 0 -}}
{{- $ps := int (index . 1) -}}
{{- $workers := int (index . 2) -}}
{{- $task := 6 -}}
{{- if gt $ps 0 }}{{ $task = max $task (add 2 (len (toString (sub $ps 1)))) }}{{ end -}}
{{- if gt $workers 0 }}{{ $task = max $task (add 6 (len (toString (sub $workers 1)))) }}{{ end -}}
{{- if $root.Values.evaluator.enabled }}{{ $task = max $task 10 }}{{ end -}}
{{- add 10 (include "tf-distributed.clusterMapBytes" . | int) 40 $task 1 -}}
{{- end -}}

{{/* The longest task host name of the map, as JSON {"task": "worker 41", "length": N}. */}}
{{- define "tf-distributed.longestTaskHost" -}}
{{- $prefix := len (include "tf-distributed.fullname" .) -}}
{{- $common := add (len (include "tf-distributed.namespace" .)) (len .Values.clusterDomain) 7 -}}
{{- $tasks := include "tf-distributed.clusterTasks" . | fromJson -}}
{{- $task := "chief" -}}
{{- $length := add (mul 2 (add $prefix 6)) $common -}}
{{- range $role := list (list "ps" 3) (list "worker" 7) -}}
{{- $count := int (index $tasks (index $role 0)) -}}
{{- if gt $count 0 -}}
{{- $host := add (mul 2 (add $prefix (index $role 1))) 1 (len (toString (sub $count 1))) $common -}}
{{- if gt $host $length }}{{ $task = printf "%s %d" (index $role 0) (sub $count 1) }}{{ $length = $host }}{{ end -}}
{{- end -}}
{{- end -}}
{{- toJson (dict "task" $task "length" $length) -}}
{{- end -}}

{{/*
A quantity as messages show it: strings as written, numbers as decimals (integers below 10^15 in
full, others as Go's %v writes a float), whether helm read them as float64 (files) or int64 (--set).
The twin of tfchart/rules.py shown_quantity.
*/}}
{{- define "tf-distributed.quantityText" -}}
{{- if kindIs "string" . -}}
{{- . -}}
{{- else if and (lt (float64 .) 1e15) (eq (float64 .) (floor (float64 .))) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- printf "%v" (float64 .) -}}
{{- end -}}
{{- end -}}

{{/*
A Kubernetes quantity as the API server stores it, as a string that compares like the number:
<19-digit integer part>.<9-digit nano part>, rounded up to 1n and capped at 2^63-1 as
resource.ParseQuantity does. Exact (decimal digit strings; binary suffixes multiply by 1024), the
twin of tfchart/rules.py quantity_nanos. Usage: include "tf-distributed.quantityKey" "1.5Gi"
*/}}
{{- define "tf-distributed.quantityKey" -}}
{{- $text := toString . -}}
{{- $pattern := `^\+?([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?$` -}}
{{- $whole := regexReplaceAll $pattern $text "${1}" -}}
{{- $fraction := regexReplaceAll $pattern $text "${2}" -}}
{{- $suffix := regexReplaceAll $pattern $text "${3}" -}}
{{- $digits := regexReplaceAll "^0+" (printf "%s%s" $whole $fraction) "" -}}
{{- $exponent := sub 0 (len $fraction) -}}
{{- $shift := 0 -}}
{{- $binary := dict "Ki" 1 "Mi" 2 "Gi" 3 "Ti" 4 "Pi" 5 "Ei" 6 -}}
{{- $decimal := dict "m" -3 "k" 3 "M" 6 "G" 9 "T" 12 "P" 15 "E" 18 -}}
{{- if hasKey $binary $suffix -}}
{{- $shift = index $binary $suffix | int -}}
{{- else if hasKey $decimal $suffix -}}
{{- $exponent = add $exponent (index $decimal $suffix) -}}
{{- else if $suffix -}}
{{- $written := trimPrefix "+" (substr 1 -1 $suffix) -}}
{{- $magnitude := regexReplaceAll "^0+" (trimPrefix "-" $written) "" -}}
{{- $power := ternary 10000 (atoi (default "0" $magnitude)) (gt (len $magnitude) 4) -}}
{{- $exponent = ternary (sub $exponent $power) (add $exponent $power) (hasPrefix "-" $written) -}}
{{- end -}}
{{- $exponent = max -10000 (min 10000 $exponent) -}}
{{- range until $shift -}}
{{- $carry := 0 -}}
{{- $product := "" -}}
{{- $characters := splitList "" $digits -}}
{{- range $i := until (len $characters) -}}
{{- $x := add (mul (atoi (index $characters (sub (sub (len $characters) 1) $i))) 1024) $carry -}}
{{- $product = printf "%d%s" (mod $x 10) $product -}}
{{- $carry = div $x 10 -}}
{{- end -}}
{{- if gt $carry 0 }}{{ $product = printf "%d%s" $carry $product }}{{ end -}}
{{- $digits = $product -}}
{{- end -}}
{{- $max := "9223372036854775807" -}}
{{- if not $digits -}}
{{- printf "%s.000000000" (repeat 19 "0") -}}
{{- else if gt (add (len $digits) $exponent) 19 -}}
{{- printf "%s.000000000" $max -}}
{{- else -}}
{{- /* $digits * 10^$exponent = <integer>.<fraction>; only 9 fraction digits are kept, any further non-zero digit rounds up */ -}}
{{- $nanos := "" -}}
{{- $roundUp := false -}}
{{- $scaled := add $exponent 9 -}}
{{- if ge $scaled 0 -}}
{{- $nanos = printf "%s%s" $digits (repeat (int $scaled) "0") -}}
{{- else if gt (len $digits) (sub 0 $scaled) -}}
{{- $nanos = substr 0 (int (add (len $digits) $scaled)) $digits -}}
{{- $roundUp = regexMatch "[1-9]" (substr (int (add (len $digits) $scaled)) -1 $digits) -}}
{{- else -}}
{{- $nanos = "0" -}}
{{- $roundUp = true -}}
{{- end -}}
{{- if $roundUp -}}
{{- $carry := 1 -}}
{{- $sum := "" -}}
{{- $characters := splitList "" $nanos -}}
{{- range $i := until (len $characters) -}}
{{- $x := add (atoi (index $characters (sub (sub (len $characters) 1) $i))) $carry -}}
{{- $sum = printf "%d%s" (mod $x 10) $sum -}}
{{- $carry = div $x 10 -}}
{{- end -}}
{{- if gt $carry 0 }}{{ $sum = printf "%d%s" $carry $sum }}{{ end -}}
{{- $nanos = $sum -}}
{{- end -}}
{{- $nanos = printf "%s%s" (repeat (int (max 0 (sub 28 (len $nanos)))) "0") $nanos -}}
{{- $integer := substr 0 19 $nanos -}}
{{- if or (gt (len $nanos) 28) (gt $integer $max) (and (eq $integer $max) (ne (substr 19 28 $nanos) "000000000")) -}}
{{- printf "%s.000000000" $max -}}
{{- else -}}
{{- printf "%s.%s" $integer (substr 19 28 $nanos) -}}
{{- end -}}
{{- end -}}
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
{{- if include "tf-distributed.workersAsJob" . }}{{ $args = append $args "--exit-when-done" }}{{ end -}}
{{- toJson (concat $args $t.extraArgs) -}}
{{- end -}}

{{/* argv of a TensorFlow container: the component's command/args override, else the trainer. */}}
{{- define "tf-distributed.tfArgv" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $command := $component.command | default (list "python" "-m" "trainer") -}}
{{- $args := $component.args -}}
{{- if and (empty $component.command) (empty $component.args) }}{{ $args = include "tf-distributed.trainerArgs" $root | fromJsonArray }}{{ end -}}
{{- toJson (concat $command $args) -}}
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
Gang scheduling and queues (README "Gang scheduling and queues"). The TensorFlow components are the
ones with a workingDir (chief, ps, worker, evaluator); TensorBoard, Serving and the
helm test pod never join the gang, never get the gang scheduler and never carry a queue label.
*/}}
{{- define "tf-distributed.isTfComponent" -}}
{{- if and (kindIs "map" .) (hasKey . "workingDir") -}}true{{- end -}}
{{- end -}}

{{- define "tf-distributed.tfRoles" -}}
{{- $roles := list -}}
{{- if include "tf-distributed.psEnabled" . }}{{ $roles = append $roles "ps" }}{{ end -}}
{{- if include "tf-distributed.workerEnabled" . }}{{ $roles = append $roles "worker" }}{{ end -}}
{{- if include "tf-distributed.chiefEnabled" . }}{{ $roles = append $roles "chief" }}{{ end -}}
{{- if .Values.evaluator.enabled }}{{ $roles = append $roles "evaluator" }}{{ end -}}
{{- toJson $roles -}}
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
{{- include "tf-distributed.componentName" (list . "training") -}}
{{- end -}}

{{/* Scheduler of the TensorFlow pods: schedulerName, else the gang provider's scheduler. */}}
{{- define "tf-distributed.tfSchedulerName" -}}
{{- $provider := .Values.scheduling.gang.provider -}}
{{- $default := get (dict "volcano" "volcano" "coscheduling" "scheduler-plugins-scheduler") $provider -}}
{{- .Values.schedulerName | default $default -}}
{{- end -}}

{{/* Labels and annotations a TensorFlow pod carries for the gang / queue, as JSON {"labels": {}, "annotations": {}}. */}}
{{- define "tf-distributed.gangPodMetadata" -}}
{{- $root := index . 0 -}}
{{- $labels := dict -}}
{{- $annotations := dict -}}
{{- if has (index . 1) (list "ps" "worker" "chief" "evaluator") -}}
{{- $name := include "tf-distributed.gangName" $root -}}
{{- $provider := $root.Values.scheduling.gang.provider -}}
{{- if eq $provider "volcano" -}}
{{- $_ := set $annotations "scheduling.k8s.io/group-name" $name -}}
{{- else if eq $provider "coscheduling" -}}
{{- $_ := set $labels "scheduling.x-k8s.io/pod-group" $name -}}
{{- end -}}
{{- with $root.Values.scheduling.kueue -}}
{{- if .queueName -}}
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
Pod-level fields every component shares (same shape for every component).
Usage: include "tf-distributed.podCommon" (list $ .Values.worker "serviceAccountName" "automountToken")
*/}}
{{- define "tf-distributed.podCommon" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
serviceAccountName: {{ index . 2 | quote }}
automountServiceAccountToken: {{ index . 3 }}
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
{{- with include "tf-distributed.affinity" (list $root $component) }}
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
Pod template metadata (labels + annotations), with the chart's own annotations of this pod as an
optional 4th element. Usage: include "tf-distributed.podMetadata" (list $ "worker" .Values.worker)
*/}}
{{- define "tf-distributed.podMetadata" -}}
{{- $root := index . 0 -}}
{{- $component := index . 2 -}}
{{- $gang := include "tf-distributed.gangPodMetadata" (list $root (index . 1)) | fromJson -}}
{{- if gt (len .) 3 }}{{ $_ := set $gang "annotations" (merge (dict) (index . 3) $gang.annotations) }}{{ end -}}
labels:
  {{- include "tf-distributed.podLabels" (list $root (index . 1)) | nindent 2 }}
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

{{/* Volumes of a pod: shared storage, /tmp, /dev/shm for GPU pods, extra volumes. */}}
{{- define "tf-distributed.volumes" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
- name: shared
  persistentVolumeClaim:
    claimName: {{ include "tf-distributed.claimName" $root | quote }}
    {{- if index . 2 }}
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

{{- define "tf-distributed.volumeMounts" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
- name: shared
  mountPath: {{ $root.Values.storage.mountPath | quote }}
  {{- with $root.Values.storage.subPath }}
  subPath: {{ . | quote }}
  {{- end }}
  {{- if index . 2 }}
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
The container of a TensorFlow task (ps, worker, chief, evaluator): same shape for every role.
indexField: the pod field holding the task index (a StatefulSet's pod-index label, an Indexed Job's
completion-index annotation), or empty for index 0.
Usage: include "tf-distributed.tfContainer" (dict "root" $ "role" "worker" "component" .Values.worker "taskType" "worker" "indexField" "metadata.labels['apps.kubernetes.io/pod-index']")
*/}}
{{- define "tf-distributed.tfContainer" -}}
{{- $root := .root -}}
{{- $c := .component -}}
- name: {{ .role }}
  image: {{ include "tf-distributed.image" (list $root $c.image) | quote }}
  imagePullPolicy: {{ include "tf-distributed.imagePullPolicy" (list $root $c.image) | quote }}
  # an emptyDir (volume workdir), writable whatever the image's user: relative paths work
  workingDir: {{ $c.workingDir | quote }}
  command:
    - /bin/sh
    - -c
    - |
      {{- include "tf-distributed.prelude" $root | nindent 6 }}
    - tf-distributed-prelude
  args:
    {{- include "tf-distributed.tfArgv" (list $root $c) | fromJsonArray | toYaml | nindent 4 }}
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
    {{- with $c.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if .port }}
  ports:
    - name: tf-grpc
      containerPort: {{ .port }}
      protocol: TCP
  {{- end }}
  {{- if .probes }}
  readinessProbe:
    tcpSocket:
      port: tf-grpc
    periodSeconds: 10
    failureThreshold: 3
  livenessProbe:
    tcpSocket:
      port: tf-grpc
    initialDelaySeconds: 60
    periodSeconds: 20
    failureThreshold: 6
  {{- end }}
  resources:
    {{- include "tf-distributed.resources" $c | nindent 4 }}
  securityContext:
    {{- toYaml $c.containerSecurityContext | nindent 4 }}
  volumeMounts:
    {{- include "tf-distributed.volumeMounts" (list $root $c false) | nindent 4 }}
{{- end -}}

{{/* The supervisor's environment: its whole configuration (trainer/supervisor.py Settings). */}}
{{- define "tf-distributed.supervisorEnv" -}}
{{- $v := .Values -}}
{{- $roles := include "tf-distributed.tfRoles" . | fromJsonArray -}}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: TFD_CHIEF_JOB
  value: {{ include "tf-distributed.runJobName" . | quote }}
- name: TFD_EVALUATOR_JOB
  value: {{ ternary (include "tf-distributed.componentName" (list . "evaluator")) "" $v.evaluator.enabled | quote }}
- name: TFD_STATEFULSETS
  value: {{ include "tf-distributed.cleanupTargets" . | fromJsonArray | join "," | quote }}
- name: TFD_SUPERVISOR_DEPLOYMENT
  value: {{ include "tf-distributed.componentName" (list . "supervisor") | quote }}
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
- name: TFD_HEALTH_PORT
  value: "8080"
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- end -}}
