{{/*
Cross-field rules the JSON schema cannot express. Every problem is collected, then the render fails
once with all of them, each with the --set that fixes it.
*/}}
{{- define "tf-distributed.validateValues" -}}
{{- $v := .Values -}}
{{- $problems := list -}}
{{- $strategy := $v.training.strategy -}}

{{- if eq $strategy "parameter_server" -}}
{{- if lt (int $v.ps.replicas) 1 -}}
{{- $problems = append $problems (printf "ps.replicas: training.strategy=parameter_server needs at least one parameter server (got %d). Fix: --set ps.replicas=1" (int $v.ps.replicas)) -}}
{{- end -}}
{{- if lt (int $v.worker.replicas) 1 -}}
{{- $problems = append $problems (printf "worker.replicas: training.strategy=parameter_server needs at least one worker (got %d). Fix: --set worker.replicas=2" (int $v.worker.replicas)) -}}
{{- end -}}
{{- end -}}

{{- if and (eq $strategy "single_device") (gt (int $v.chief.gpu.count) 1) -}}
{{- $problems = append $problems (printf "chief.gpu.count: training.strategy=single_device uses one device but chief.gpu.count=%d. Fix: --set training.strategy=mirrored (or --set chief.gpu.count=1)" (int $v.chief.gpu.count)) -}}
{{- end -}}

{{- if and (eq $strategy "multi_worker_mirrored") (gt (int $v.worker.replicas) 0) (ne (int $v.chief.gpu.count) (int $v.worker.gpu.count)) -}}
{{- $problems = append $problems (printf "chief.gpu.count: training.strategy=multi_worker_mirrored needs the same GPU count on every replica (chief %d, worker %d). Fix: --set chief.gpu.count=%d" (int $v.chief.gpu.count) (int $v.worker.gpu.count) (int $v.worker.gpu.count)) -}}
{{- end -}}

{{- if and (eq $strategy "multi_worker_mirrored") (ne $v.chief.gpu.resourceName $v.worker.gpu.resourceName) (gt (int $v.worker.replicas) 0) -}}
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

{{- if and (eq $v.training.cleanupPolicy "scaleDown") (not $v.rbac.create) (has $strategy (list "parameter_server" "multi_worker_mirrored")) -}}
{{- $problems = append $problems "training.cleanupPolicy: scaleDown needs the chief's Role to scale the StatefulSets but rbac.create=false. Fix: --set rbac.create=true (or --set training.cleanupPolicy=keep)" -}}
{{- end -}}

{{- $learningRate := float64 $v.training.learningRate -}}
{{- if or (le $learningRate 0.0) (gt $learningRate 10.0) -}}
{{- $problems = append $problems (printf "training.learningRate: %v is out of range (0, 10]. Fix: --set training.learningRate=0.01" $v.training.learningRate) -}}
{{- end -}}

{{- if gt (int $v.training.checkpointEverySteps) (int $v.training.trainSteps) -}}
{{- $problems = append $problems (printf "training.checkpointEverySteps: %d is larger than training.trainSteps=%d, so no checkpoint would be written before the end. Fix: --set training.checkpointEverySteps=%d" (int $v.training.checkpointEverySteps) (int $v.training.trainSteps) (int $v.training.trainSteps)) -}}
{{- end -}}

{{- if eq (int $v.serving.service.restPort) (int $v.serving.service.grpcPort) -}}
{{- $problems = append $problems (printf "serving.service.grpcPort: equals serving.service.restPort (%d). Fix: --set serving.service.grpcPort=8500 --set serving.service.restPort=8501" (int $v.serving.service.restPort)) -}}
{{- end -}}


{{- if and $v.tensorboard.ingress.enabled (not $v.tensorboard.enabled) -}}
{{- $problems = append $problems "tensorboard.ingress.enabled: the Ingress needs TensorBoard. Fix: --set tensorboard.enabled=true (or --set tensorboard.ingress.enabled=false)" -}}
{{- end -}}
{{- if and $v.serving.ingress.enabled (not $v.serving.enabled) -}}
{{- $problems = append $problems "serving.ingress.enabled: the Ingress needs TensorFlow Serving. Fix: --set serving.enabled=true (or --set serving.ingress.enabled=false)" -}}
{{- end -}}

{{- if $problems -}}
{{- printf "\n\ntf-distributed: %d problem(s) in values:\n  - %s\n" (len $problems) (join "\n  - " $problems) | fail -}}
{{- end -}}
{{- end -}}
