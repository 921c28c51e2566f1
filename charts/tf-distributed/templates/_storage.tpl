{{/*
The shared claim: its name, which pods mount it, and whether they must share a node.
*/}}

{{- define "tf-distributed.claimName" -}}
{{- default (include "tf-distributed.componentName" (dict "context" . "role" "data")) .Values.storage.existingClaim -}}
{{- end -}}

{{/*
Storage placement. Every pod of the release mounts the shared claim. Without ReadWriteMany the
pods must share the volume on one node, so each gets a required podAffinity to the release's pods
on kubernetes.io/hostname (tf-distributed.affinity).
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
The storage contract (tfdcontract, "the storage contract"): where on the claim checkpoints, TensorBoard
logs and SavedModel versions go. The one source of these paths: TensorBoard's logdir, TF Serving's base
path and every TensorFlow container's variables (tf-distributed.storageEnv) come from here, and the
trainer, given --storage-root, derives the same paths (tests/chart/test_byo_contract.py holds all four).
*/}}
{{- define "tf-distributed.checkpointDir" -}}
{{- printf "%s/checkpoints" .Values.storage.mountPath -}}
{{- end -}}

{{- define "tf-distributed.logDir" -}}
{{- printf "%s/logs" .Values.storage.mountPath -}}
{{- end -}}

{{/* TF Serving's base path: SavedModel versions in numbered subdirectories. */}}
{{- define "tf-distributed.exportDir" -}}
{{- printf "%s/export/%s" .Values.storage.mountPath .Values.training.modelName -}}
{{- end -}}

{{/* The storage variables of a TensorFlow container (env entries). */}}
{{- define "tf-distributed.storageEnv" -}}
- name: TFD_STORAGE_ROOT
  value: {{ .Values.storage.mountPath | quote }}
- name: TFD_CHECKPOINT_DIR
  value: {{ include "tf-distributed.checkpointDir" . | quote }}
- name: TFD_LOG_DIR
  value: {{ include "tf-distributed.logDir" . | quote }}
- name: TFD_EXPORT_DIR
  value: {{ include "tf-distributed.exportDir" . | quote }}
- name: TFD_MODEL_NAME
  value: {{ .Values.training.modelName | quote }}
{{- end -}}
