{{/*
Cross-field rules the JSON schema cannot express: the chart's one rule set (`tfchart validate` runs
it through helm and reads the problems back). Every problem is collected, then the render fails once
with all of them, each with the --set that fixes it. Rendered with the API version tf-distributed.io/no-rules
(helm's --api-versions), they do not run: `tfchart validate --policy` checks the policy on values they refuse so.
*/}}
{{- define "tf-distributed.validateValues" -}}
{{- if not (.Capabilities.APIVersions.Has "tf-distributed.io/no-rules") -}}
{{- $v := .Values -}}
{{- $problems := list -}}
{{- $strategy := $v.training.strategy -}}
{{- /* Rules about what only the trainer reads (training.* but the strategy) skip roles that run a command
of their own: a bring-your-own program never sees training.batchSize or training.learningRate. */ -}}
{{- $trainerRoles := include "tf-distributed.trainerRoles" . | fromJsonArray -}}

{{- if eq $strategy "parameter_server" -}}
{{- if lt (int $v.ps.replicas) 1 -}}
{{- $problems = append $problems (printf "ps.replicas: training.strategy=parameter_server needs at least one parameter server (got %d). Fix: --set ps.replicas=1" (int $v.ps.replicas)) -}}
{{- end -}}
{{- if lt (int $v.worker.replicas) 1 -}}
{{- $problems = append $problems (printf "worker.replicas: training.strategy=parameter_server needs at least one worker (got %d). Fix: --set worker.replicas=2" (int $v.worker.replicas)) -}}
{{- end -}}
{{- end -}}

{{- $chief := eq (include "tf-distributed.chiefEnabled" .) "true" -}}
{{- if and (lt (int $v.chief.replicas) 1) (ne $strategy "multi_worker_mirrored") -}}
{{- $problems = append $problems (printf "chief.replicas: only training.strategy=multi_worker_mirrored runs without a separate chief (worker 0 is the chief), but training.strategy=%s. Fix: --set chief.replicas=1 (or --set training.strategy=multi_worker_mirrored)" $strategy) -}}
{{- else if and (not $chief) (lt (int $v.worker.replicas) 1) -}}
{{- $problems = append $problems (printf "worker.replicas: with chief.replicas=0 worker 0 is the chief, so at least one worker is needed (got %d). Fix: --set worker.replicas=2 (or --set chief.replicas=1)" (int $v.worker.replicas)) -}}
{{- end -}}

{{- if and (eq $strategy "single_device") (gt (int $v.chief.gpu.count) 1) (has "chief" $trainerRoles) -}}
{{- $problems = append $problems (printf "chief.gpu.count: training.strategy=single_device uses one device but chief.gpu.count=%d. Fix: --set training.strategy=mirrored (or --set chief.gpu.count=1)" (int $v.chief.gpu.count)) -}}
{{- end -}}

{{- if and (eq $strategy "multi_worker_mirrored") $chief (gt (int $v.worker.replicas) 0) (ne (int $v.chief.gpu.count) (int $v.worker.gpu.count)) -}}
{{- $problems = append $problems (printf "chief.gpu.count: training.strategy=multi_worker_mirrored needs the same GPU count on every replica (chief %d, worker %d). Fix: --set chief.gpu.count=%d" (int $v.chief.gpu.count) (int $v.worker.gpu.count) (int $v.worker.gpu.count)) -}}
{{- end -}}

{{- $perTask := max 1 (int $v.chief.gpu.count) -}}
{{- $syncTasks := 0 -}}
{{- $syncShape := "" -}}
{{- if eq $strategy "mirrored" -}}
{{- $syncTasks = 1 -}}
{{- $syncShape = printf "mirrored: %d device(s)" $perTask -}}
{{- else if and (eq $strategy "multi_worker_mirrored") $chief (eq (int $v.chief.gpu.count) (int $v.worker.gpu.count)) -}}
{{- $syncTasks = add 1 (int $v.worker.replicas) -}}
{{- $syncShape = printf "multi_worker_mirrored: chief + %d worker(s) x %d device(s)" (int $v.worker.replicas) $perTask -}}
{{- else if and (eq $strategy "multi_worker_mirrored") (not $chief) -}}
{{- $perTask = max 1 (int $v.worker.gpu.count) -}}
{{- $syncTasks = int $v.worker.replicas -}}
{{- $syncShape = printf "multi_worker_mirrored: %d worker(s) x %d device(s), worker 0 the chief" (int $v.worker.replicas) $perTask -}}
{{- end -}}
{{- $syncReplicas := mul $syncTasks $perTask -}}
{{- $syncRoles := ternary (list "chief" "worker") (list "worker") $chief -}}
{{- $syncTrainer := false -}}
{{- range $syncRoles }}{{ if has . $trainerRoles }}{{ $syncTrainer = true }}{{ end }}{{ end -}}
{{- if and $syncTrainer (gt $syncReplicas 0) (ge (int $v.training.batchSize) 1) (ne (mod (int $v.training.batchSize) $syncReplicas) 0) -}}
{{- $problems = append $problems (printf "training.batchSize: %d is the global batch, split evenly across the %d replicas in sync (%s); it is not divisible by %d. Fix: --set training.batchSize=%d" (int $v.training.batchSize) $syncReplicas $syncShape $syncReplicas (sub (add (int $v.training.batchSize) $syncReplicas) (mod (int $v.training.batchSize) $syncReplicas))) -}}
{{- end -}}

{{- if and (eq $strategy "multi_worker_mirrored") $chief (ne $v.chief.gpu.resourceName $v.worker.gpu.resourceName) (gt (int $v.worker.replicas) 0) -}}
{{- $problems = append $problems (printf "chief.gpu.resourceName: multi_worker_mirrored replicas must use one GPU kind (chief %s, worker %s). Fix: --set chief.gpu.resourceName=%s" $v.chief.gpu.resourceName $v.worker.gpu.resourceName $v.worker.gpu.resourceName) -}}
{{- end -}}

{{- range $role := list "ps" "worker" "chief" "evaluator" "tensorboard" "serving" -}}
{{- $c := index $v $role -}}
{{- range $kind := list "requests" "limits" -}}
{{- $set := index ($c.resources | default dict) $kind | default dict -}}
{{- if hasKey $set $c.gpu.resourceName -}}
{{- $problems = append $problems (printf "%s.resources.%s: sets %s directly; GPUs are requested only through %s.gpu.count (rendered as a limit). Fix: --set %s.resources.%s.%s=null --set %s.gpu.count=%v" $role $kind $c.gpu.resourceName $role $role $kind ($c.gpu.resourceName | replace "." "\\.") $role (index $set $c.gpu.resourceName)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- with $v.serving.modelVersionPolicy -}}
{{- if and $v.serving.enabled (eq .type "specific") (empty .versions) -}}
{{- $problems = append $problems "serving.modelVersionPolicy.versions: type specific serves exactly the versions listed, and none are. Fix: --set serving.modelVersionPolicy.versions={1} (or --set serving.modelVersionPolicy.type=latest)" -}}
{{- end -}}
{{- end -}}

{{- if and (not $v.storage.create) (not $v.storage.existingClaim) -}}
{{- $problems = append $problems "storage: storage.create=false and no storage.existingClaim: checkpoints, logs and exports need a volume. Fix: --set storage.create=true (or --set storage.existingClaim=<pvc-name>)" -}}
{{- end -}}

{{- $modes := $v.storage.accessModes -}}
{{- if and (has "ReadWriteOncePod" $modes) (gt (len $modes) 1) -}}
{{- $problems = append $problems "storage.accessModes: ReadWriteOncePod cannot be combined with other access modes (Kubernetes rejects such a claim). Fix: --set storage.accessModes={ReadWriteOnce}" -}}
{{- else if has "ReadWriteOncePod" $modes -}}
{{- $pods := include "tf-distributed.claimPods" . | fromJson -}}
{{- if gt (int $pods.total) 1 -}}
{{- $problems = append $problems (printf "storage.accessModes: ReadWriteOncePod lets a single pod mount the claim, but %d pods mount it (%s). Fix: --set storage.accessModes={ReadWriteOnce} (co-locates them on one node)" (int $pods.total) (join ", " $pods.roles)) -}}
{{- end -}}
{{- else if not (or (has "ReadWriteOnce" $modes) (has "ReadWriteMany" $modes)) -}}
{{- $problems = append $problems "storage.accessModes: ReadOnlyMany alone is not writable, but training writes checkpoints, logs and exports to the claim. Fix: --set storage.accessModes={ReadWriteOnce} (or {ReadWriteMany} with a StorageClass that offers it)" -}}
{{- end -}}

{{- if and (include "tf-distributed.supervisorEnabled" .) (not $v.rbac.create) -}}
{{- if include "tf-distributed.jobsetEnabled" . -}}
{{- $problems = append $problems "supervisor.enabled: the run supervisor (under a JobSet: the chief's progress on its Job, training.stallTimeoutSeconds) needs its ServiceAccount and Role, but rbac.create=false. Fix: --set rbac.create=true (or --set supervisor.enabled=false: no progress record, no stall timeout; JobSet still frees the pods when the run ends)" -}}
{{- else -}}
{{- $problems = append $problems "supervisor.enabled: the run supervisor needs its ServiceAccount and Role, but rbac.create=false. Fix: --set rbac.create=true (or --set supervisor.enabled=false and free the GPUs by hand: tfchart stop RELEASE)" -}}
{{- end -}}
{{- end -}}
{{- if and (gt (int $v.scheduling.startTimeoutSeconds) 0) (not $v.supervisor.enabled) -}}
{{- $problems = append $problems "scheduling.startTimeoutSeconds: the run supervisor enforces it, but supervisor.enabled=false. Fix: --set supervisor.enabled=true (or --set scheduling.startTimeoutSeconds=0)" -}}
{{- end -}}
{{- if gt (int $v.training.stallTimeoutSeconds) 0 -}}
{{- if not $v.supervisor.enabled -}}
{{- $problems = append $problems "training.stallTimeoutSeconds: the run supervisor ends a stalled run, but supervisor.enabled=false. Fix: --set supervisor.enabled=true (or --set training.stallTimeoutSeconds=0)" -}}
{{- else if not $v.supervisor.progress.enabled -}}
{{- $problems = append $problems "training.stallTimeoutSeconds: the stall clock is kept in the chief's progress record, but supervisor.progress.enabled=false. Fix: --set supervisor.progress.enabled=true (or --set training.stallTimeoutSeconds=0)" -}}
{{- end -}}
{{- end -}}

{{- if $trainerRoles -}}
{{- $exportGate := float64 ($v.training.exportMinAccuracy | default 0) -}}
{{- if or (lt $exportGate 0.0) (gt $exportGate 1.0) -}}
{{- $problems = append $problems (printf "training.exportMinAccuracy: %v is out of range [0, 1]. Fix: --set training.exportMinAccuracy=0.95 (0 exports always)" $v.training.exportMinAccuracy) -}}
{{- end -}}
{{- $learningRate := float64 $v.training.learningRate -}}
{{- if or (le $learningRate 0.0) (gt $learningRate 10.0) -}}
{{- $problems = append $problems (printf "training.learningRate: %v is out of range (0, 10]. Fix: --set training.learningRate=0.01" $v.training.learningRate) -}}
{{- end -}}

{{- if gt (int $v.training.checkpointEverySteps) (int $v.training.trainSteps) -}}
{{- $problems = append $problems (printf "training.checkpointEverySteps: %d is larger than training.trainSteps=%d, so no checkpoint would be written before the end. Fix: --set training.checkpointEverySteps=%d" (int $v.training.checkpointEverySteps) (int $v.training.trainSteps) (int $v.training.trainSteps)) -}}
{{- end -}}
{{- end -}}

{{- if eq (int $v.serving.service.restPort) (int $v.serving.service.grpcPort) -}}
{{- $problems = append $problems (printf "serving.service.grpcPort: equals serving.service.restPort (%d). Fix: --set serving.service.grpcPort=8500 --set serving.service.restPort=8501" (int $v.serving.service.restPort)) -}}
{{- end -}}

{{- /* Prometheus metrics: monitors need targets, Serving's metrics need Serving, the metrics port is free, each
target is scraped once, and custom serving.args keep the monitoring config. */ -}}
{{- range $kind := list "serviceMonitor" "podMonitor" -}}
{{- if and (index $v.metrics $kind).enabled (not $v.metrics.enabled) (not $v.serving.metrics.enabled) -}}
{{- $problems = append $problems (printf "metrics.%s.enabled: the %s scrapes the TensorFlow pods (metrics.enabled) and TensorFlow Serving (serving.metrics.enabled), and both are off, so it would scrape nothing. Fix: --set metrics.enabled=true (or --set serving.metrics.enabled=true, or --set metrics.%s.enabled=false)" $kind (index (dict "serviceMonitor" "ServiceMonitor" "podMonitor" "PodMonitor") $kind) $kind) -}}
{{- end -}}
{{- end -}}
{{- if and $v.serving.metrics.enabled (not $v.serving.enabled) -}}
{{- $problems = append $problems "serving.metrics.enabled: TensorFlow Serving's metrics need TensorFlow Serving. Fix: --set serving.enabled=true (or --set serving.metrics.enabled=false)" -}}
{{- end -}}
{{- if $v.metrics.enabled -}}
{{- $taken := list -}}
{{- $grpcPorts := list -}}
{{- range $role := include "tf-distributed.tfRoles" . | fromJsonArray -}}
{{- if ne $role "evaluator" -}}
{{- $port := int (index $v $role).service.port -}}
{{- $grpcPorts = append $grpcPorts $port -}}
{{- if eq $port (int $v.metrics.port) }}{{ $taken = append $taken $role }}{{ end -}}
{{- end -}}
{{- end -}}
{{- if $taken -}}
{{- $free := 9464 -}}
{{- range until 20 }}{{ if has $free $grpcPorts }}{{ $free = add $free 1 | int }}{{ end }}{{ end -}}
{{- $problems = append $problems (printf "metrics.port: %d is also the TensorFlow gRPC port (<role>.service.port) of %s; the metrics server and the TensorFlow server of one container cannot both listen on it. Fix: --set metrics.port=%d" (int $v.metrics.port) (join ", " $taken) $free) -}}
{{- end -}}
{{- end -}}
{{- /* Both monitors select the same pods (the ServiceMonitor through their Services): every target twice. */ -}}
{{- if and $v.metrics.serviceMonitor.enabled $v.metrics.podMonitor.enabled (or $v.metrics.enabled $v.serving.metrics.enabled) -}}
{{- $problems = append $problems "metrics.podMonitor.enabled: metrics.serviceMonitor.enabled is on too, and both monitors scrape the same targets (the ServiceMonitor through the pods' Services, the PodMonitor the pods directly), so Prometheus would scrape every target twice: each series twice under two job labels, and sums doubled. Fix: --set metrics.podMonitor.enabled=false (or --set metrics.serviceMonitor.enabled=false)" -}}
{{- end -}}
{{- /* The PrometheusRule: the alerts on the trainer's metrics select the labels the chart's monitors give
(namespace, app_kubernetes_io_instance), and a rule with no alert at all alerts nothing. */ -}}
{{- $pr := $v.metrics.prometheusRule -}}
{{- if $pr.enabled -}}
{{- range $alert := list "runStalled" "checkpointsStopped" -}}
{{- if and (index $pr $alert).enabled (not (and $v.metrics.enabled (or $v.metrics.serviceMonitor.enabled $v.metrics.podMonitor.enabled))) -}}
{{- $problems = append $problems (printf "metrics.prometheusRule.%s.enabled: the alert reads the trainer's tfd_ metrics as the chart's ServiceMonitor or PodMonitor scrapes them (labelled with the release), but metrics.enabled=%v, metrics.serviceMonitor.enabled=%v, metrics.podMonitor.enabled=%v. Fix: --set metrics.enabled=true --set metrics.serviceMonitor.enabled=true (or --set metrics.prometheusRule.%s.enabled=false)" $alert $v.metrics.enabled $v.metrics.serviceMonitor.enabled $v.metrics.podMonitor.enabled $alert) -}}
{{- end -}}
{{- end -}}
{{- if not (or $pr.runStalled.enabled $pr.gpusHeldAfterRunEnded.enabled $pr.checkpointsStopped.enabled $pr.additionalRules) -}}
{{- $problems = append $problems "metrics.prometheusRule.enabled: every alert is off and metrics.prometheusRule.additionalRules is empty, so the PrometheusRule would hold no rule. Fix: --set metrics.prometheusRule.gpusHeldAfterRunEnded.enabled=true (or --set metrics.prometheusRule.enabled=false)" -}}
{{- end -}}
{{- end -}}
{{- /* The chart adds --monitoring_config_file only to its own arguments (serving/deployment.yaml); serving.args replaces them.
serving.command alone keeps them, and a flag in serving.command (a shell line) counts. */ -}}
{{- if and $v.serving.enabled $v.serving.metrics.enabled $v.serving.args -}}
{{- $flagged := false -}}
{{- range $arg := concat ($v.serving.command | default list) $v.serving.args -}}
{{- if contains "--monitoring_config_file" (toString $arg) }}{{ $flagged = true }}{{ end -}}
{{- end -}}
{{- if not $flagged -}}
{{- $problems = append $problems "serving.args: serving.metrics.enabled=true, but the chart adds --monitoring_config_file=/etc/tf-serving/monitoring.config only to its own arguments, which serving.args replaces, and neither serving.args nor serving.command has it, so TensorFlow Serving would not serve serving.metrics.path and the monitors would scrape a 404. Fix: add --monitoring_config_file=/etc/tf-serving/monitoring.config to serving.args (--set cannot append to a list: give the whole list) (or --set serving.metrics.enabled=false)" -}}
{{- end -}}
{{- end -}}

{{- if and $v.tensorboard.ingress.enabled (not $v.tensorboard.enabled) -}}
{{- $problems = append $problems "tensorboard.ingress.enabled: the Ingress needs TensorBoard. Fix: --set tensorboard.enabled=true (or --set tensorboard.ingress.enabled=false)" -}}
{{- end -}}
{{- if and $v.serving.ingress.enabled (not $v.serving.enabled) -}}
{{- $problems = append $problems "serving.ingress.enabled: the Ingress needs TensorFlow Serving. Fix: --set serving.enabled=true (or --set serving.ingress.enabled=false)" -}}
{{- end -}}

{{- /* Where and how the TensorFlow pods run: gangs, queues, topology, workload.kind (_validate_scheduling.tpl). */ -}}
{{- $problems = concat $problems (include "tf-distributed.schedulingProblems" . | fromJsonArray) -}}

{{- /* Object names start with the release name unless fullnameOverride is set; Service names must be DNS-1035 labels. */ -}}
{{- $fullname := include "tf-distributed.fullname" . -}}
{{- if and (not $v.fullnameOverride) (not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname)) -}}
{{- $suggestion := regexReplaceAll "[^-a-z0-9]" $fullname "-" -}}
{{- if not (regexMatch "^[a-z]" $suggestion) }}{{ $suggestion = printf "tf-%s" $suggestion }}{{ end -}}
{{- $suggestion = $suggestion | trunc (include "tf-distributed.nameBudget" . | int) | trimSuffix "-" -}}
{{- $problems = append $problems (printf "fullnameOverride: the release name \"%s\" makes object names such as %s-worker that are not DNS-1035 labels, which Kubernetes requires of Service names (lower-case letters, digits and '-', starting with a letter). Fix: --set fullnameOverride=%s (or a release name that starts with a letter and has no dots)" .Release.Name $fullname $suggestion) -}}
{{- end -}}

{{- /* The cluster map: every task host must be a DNS name, and TF_CONFIG one environment variable. */ -}}
{{- $host := include "tf-distributed.longestTaskHost" . | fromJson -}}
{{- if gt (int $host.length) 253 -}}
{{- $problems = append $problems (printf "clusterDomain: the host name of TensorFlow task %s (<task>.<service>.<namespace>.svc.<clusterDomain>) would be %d characters, but DNS names are limited to 253, so the task could not be resolved. Fix: --set clusterDomain=<at most %d characters> (or a shorter release name or namespace)" $host.task (int $host.length) (add (sub 253 (int $host.length)) (len $v.clusterDomain))) -}}
{{- end -}}
{{- $tasks := include "tf-distributed.clusterTasks" . | fromJson -}}
{{- $ps := int $tasks.ps -}}
{{- $workers := int $tasks.worker -}}
{{- $limit := 131072 -}}
{{- $tfConfig := include "tf-distributed.tfConfigBytes" (dict "context" . "ps" $ps "workers" $workers) | int -}}
{{- if gt $tfConfig $limit -}}
{{- $message := printf "the cluster map of %d tasks would be %s bytes and TF_CONFIG %d bytes; Linux limits one environment variable to %d bytes (MAX_ARG_STRLEN), so the pods would not start (Argument list too long)" (add 1 $ps $workers) (include "tf-distributed.clusterMapBytes" (dict "context" . "ps" $ps "workers" $workers)) $tfConfig $limit -}}
{{- $namesFix := "shorter release/namespace names or clusterDomain" -}}
{{- /* The largest count that fits, by bisection (the size grows with the count). */ -}}
{{- $fit := dict -}}
{{- range $role := list "worker" "ps" -}}
{{- $count := ternary $workers $ps (eq $role "worker") -}}
{{- $low := -1 -}}
{{- $high := $count -}}
{{- range until 20 -}}
{{- if lt $low $high -}}
{{- $middle := div (add $low $high 1) 2 -}}
{{- $size := include "tf-distributed.tfConfigBytes" (dict "context" $ "ps" (ternary $ps $middle (eq $role "worker")) "workers" (ternary $middle $workers (eq $role "worker"))) | int -}}
{{- if le $size $limit }}{{ $low = $middle }}{{ else }}{{ $high = sub $middle 1 }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $_ := set $fit $role $low -}}
{{- end -}}
{{- if and (gt $workers 0) (ge (int $fit.worker) 1) -}}
{{- $problems = append $problems (printf "worker.replicas: %s. Fix: fewer tasks (--set worker.replicas=%d) or %s" $message (int $fit.worker) $namesFix) -}}
{{- else if and (gt $ps 0) (ge (int $fit.ps) 1) -}}
{{- $problems = append $problems (printf "ps.replicas: %s. Fix: fewer tasks (--set ps.replicas=%d) or %s" $message (int $fit.ps) $namesFix) -}}
{{- else -}}
{{- $problems = append $problems (printf "clusterDomain: %s. Fix: %s" $message $namesFix) -}}
{{- end -}}
{{- end -}}

{{- /* Labels the chart sets itself: selectors of Services, NetworkPolicies and co-location, and the task index. */ -}}
{{- $reserved := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/managed-by" "app.kubernetes.io/part-of" "app.kubernetes.io/version" "helm.sh/chart" "apps.kubernetes.io/pod-index" -}}
{{- range $owner := list "commonLabels" "ps.podLabels" "worker.podLabels" "chief.podLabels" "evaluator.podLabels" "tensorboard.podLabels" "serving.podLabels" -}}
{{- $labels := ternary $v.commonLabels (index $v (first (splitList "." $owner))).podLabels (eq $owner "commonLabels") | default dict -}}
{{- range $key := $reserved -}}
{{- if hasKey $labels $key -}}
{{- $problems = append $problems (printf "%s.%s: is a label the chart sets itself to select the release's pods (Services, NetworkPolicies, co-location) or to find the task index; overriding it would let other pods in or break them. Fix: --set %s.%s=null (choose another label key)" $owner $key $owner ($key | replace "." "\\.")) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Mounts the chart adds (tf-distributed.volumes / volumeMounts). */ -}}
{{- $reservedMounts := list (list "/tmp" "an emptyDir for temporary files") (list "/dev/shm" "shared memory of GPU pods") (list "/var/run/secrets/kubernetes.io/serviceaccount" "the service-account token directory") -}}
{{- $mountPath := $v.storage.mountPath -}}
{{- range $reservedMounts -}}
{{- $path := index . 0 -}}
{{- /* on a chart mount (duplicate mountPath) or above it; below one is fine (mounts nest) */ -}}
{{- if or (eq $mountPath $path) (hasPrefix (printf "%s/" (trimSuffix "/" $mountPath)) $path) -}}
{{- $problems = append $problems (printf "storage.mountPath: %s is or contains %s, where the chart mounts %s. Fix: --set storage.mountPath=/data" $mountPath $path (index . 1)) -}}
{{- end -}}
{{- end -}}
{{- /* The working directory is an emptyDir of its own: it must not be or contain another mount. */ -}}
{{- range $role := list "ps" "worker" "chief" "evaluator" -}}
{{- $path := (index $v $role).workingDir -}}
{{- $taken := concat $reservedMounts (list (list $mountPath "the shared volume (storage.mountPath)")) -}}
{{- $found := false -}}
{{- range $taken -}}
{{- if and (not $found) (or (eq $path (index . 0)) (hasPrefix (printf "%s/" (trimSuffix "/" $path)) (index . 0))) -}}
{{- $found = true -}}
{{- $problems = append $problems (printf "%s.workingDir: %s is or contains %s, where the chart mounts %s; the working directory is an emptyDir of its own. Fix: --set %s.workingDir=/workspace" $role $path (index . 0) (index . 1) $role) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $role := list "ps" "worker" "chief" "evaluator" "tensorboard" "serving" -}}
{{- $c := index $v $role -}}
{{- $gpus := gt (int $c.gpu.count) 0 -}}
{{- $tf := has $role (list "ps" "worker" "chief" "evaluator") -}}
{{- $volumes := dict "shared" true "tmp" true "dshm" $gpus "workdir" $tf "model-config" (eq $role "serving") -}}
{{- $mounts := dict "/tmp" "tmp" -}}
{{- if eq $role "serving" }}{{ $_ := set $mounts "/etc/tf-serving" "the model config" }}{{ end -}}
{{- if $tf }}{{ $_ := set $mounts $c.workingDir "the working directory" }}{{ end -}}
{{- if $gpus }}{{ $_ := set $mounts "/dev/shm" "dshm" }}{{ end -}}
{{- $_ := set $mounts $mountPath "the shared volume" -}}
{{- range $index, $volume := $c.extraVolumes -}}
{{- if index $volumes $volume.name -}}
{{- $problems = append $problems (printf "%s.extraVolumes.%d.name: the chart already adds a volume named %s to the %s pods (Kubernetes rejects duplicates). Fix: --set %s.extraVolumes[%d].name=extra-%s (and the extraVolumeMounts that use it)" $role $index $volume.name $role $role $index $volume.name) -}}
{{- end -}}
{{- end -}}
{{- range $index, $mount := $c.extraVolumeMounts -}}
{{- if hasKey $mounts $mount.mountPath -}}
{{- $problems = append $problems (printf "%s.extraVolumeMounts.%d.mountPath: the chart already mounts %s at %s in the %s container (Kubernetes rejects two mounts at one path). Fix: --set %s.extraVolumeMounts[%d].mountPath=/mnt/%s" $role $index (index $mounts $mount.mountPath) $mount.mountPath $role $role $index $mount.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* requests <= limits, compared as the API server parses quantities (tf-distributed.quantityKey). */ -}}
{{- range $role := list "ps" "worker" "chief" "evaluator" "tensorboard" "serving" -}}
{{- $c := index $v $role -}}
{{- $requests := ($c.resources | default dict).requests | default dict -}}
{{- $limits := ($c.resources | default dict).limits | default dict -}}
{{- range $resource := keys $requests | sortAlpha -}}
{{- if and (hasKey $limits $resource) (ne $resource $c.gpu.resourceName) -}}
{{- $requestKey := include "tf-distributed.quantityKey" (index $requests $resource) -}}
{{- $limitKey := include "tf-distributed.quantityKey" (index $limits $resource) -}}
{{- $requested := include "tf-distributed.quantityText" (index $requests $resource) -}}
{{- $limit := include "tf-distributed.quantityText" (index $limits $resource) -}}
{{- $overcommitable := or (hasPrefix "kubernetes.io/" $resource) (and (not (contains "/" $resource)) (not (hasPrefix "hugepages-" $resource))) -}}
{{- if gt $requestKey $limitKey -}}
{{- $problems = append $problems (printf "%s.resources.requests.%s: %v is more than the limit %v (%s.resources.limits.%s); Kubernetes rejects a request above its limit. Fix: --set %s.resources.requests.%s=%v (or raise the limit)" $role $resource $requested $limit $role $resource $role ($resource | replace "." "\\.") $limit) -}}
{{- else if and (ne $requestKey $limitKey) (not $overcommitable) -}}
{{- $problems = append $problems (printf "%s.resources.requests.%s: %v differs from the limit %v; Kubernetes requires the request of %s to equal its limit. Fix: --set %s.resources.requests.%s=%v" $role $resource $requested $limit $resource $role ($resource | replace "." "\\.") $limit) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- if $problems -}}
{{- printf "\n\ntf-distributed: %d problem(s) in values:\n  - %s\n" (len $problems) (join "\n  - " $problems) | fail -}}
{{- end -}}
{{- end -}}
{{- end -}}
