{{/*
Image references and pull policies of the components.
*/}}

{{/*
Image reference of a component: fields left empty fall back to the trainer image (.Values.image);
global.imageRegistry overrides every registry. Usage: include "tf-distributed.image" (dict "context" $ "image" .Values.worker.image)
*/}}
{{- define "tf-distributed.image" -}}
{{- $root := .context -}}
{{- $own := .image -}}
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

{{/* Pull policy of a component's image (empty = image.pullPolicy). Usage: include "tf-distributed.imagePullPolicy" (dict "context" $ "image" .Values.worker.image) */}}
{{- define "tf-distributed.imagePullPolicy" -}}
{{- $own := .image -}}
{{- $own.pullPolicy | default .context.Values.image.pullPolicy -}}
{{- end -}}

{{/*
The project's own (CPU) trainer image, whatever image the TensorFlow tasks run: supervisor.image, tagged
with the chart's appVersion unless it sets a tag (never image.tag, which may name a GPU build). It runs
python -m trainer.supervisor and python -m trainer.endpoint_probe (the helm test pod), which a
bring-your-own image lacks. Usage: include "tf-distributed.projectImage" .
*/}}
{{- define "tf-distributed.projectImage" -}}
{{- $own := .Values.supervisor.image -}}
{{- include "tf-distributed.image" (dict "context" . "image" (merge (dict "tag" ($own.tag | default .Chart.AppVersion)) $own)) -}}
{{- end -}}
