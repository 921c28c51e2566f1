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


{{/*
TensorBoard's image: tensorboard.image, its empty fields falling back to image.* while a TensorFlow role
runs the trainer (image.* then has `tensorboard`); when every role runs a program of its own, image.* is
taken to be the user's image and TensorBoard runs the project's image (tf-distributed.projectImage)
unless tensorboard.image.repository names another. Usage: include "tf-distributed.tensorboardImage" .
*/}}
{{- define "tf-distributed.tensorboardImage" -}}
{{- $own := .Values.tensorboard.image -}}
{{- if or $own.repository (include "tf-distributed.trainerRoles" . | fromJsonArray) -}}
{{- include "tf-distributed.image" (dict "context" . "image" $own) -}}
{{- else -}}
{{- $own = merge (deepCopy $own) (omit .Values.supervisor.image "pullPolicy") -}}
{{- include "tf-distributed.image" (dict "context" . "image" (merge (dict "tag" ($own.tag | default .Chart.AppVersion)) $own)) -}}
{{- end -}}
{{- end -}}

{{/*
A warning (one line, or nothing) when TensorBoard's default command would run in the image of roles that
run programs of their own and in no image of the trainer's: that image may well lack `tensorboard`.
Shown by NOTES.txt and, as a comment in the TensorBoard Deployment, by tfchart validate.
Usage: include "tf-distributed.tensorboardImageWarning" .
*/}}
{{- define "tf-distributed.tensorboardImageWarning" -}}
{{- $tensorboard := include "tf-distributed.tensorboardImage" . -}}
{{- $trainerRoles := include "tf-distributed.trainerRoles" . | fromJsonArray -}}
{{- $own := list -}}
{{- $trainer := false -}}
{{- range $role := include "tf-distributed.tfRoles" . | fromJsonArray -}}
{{- if eq $tensorboard (include "tf-distributed.image" (dict "context" $ "image" (index $.Values $role).image)) -}}
{{- if has $role $trainerRoles }}{{ $trainer = true }}{{ else }}{{ $own = append $own $role }}{{ end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.tensorboard.enabled (empty .Values.tensorboard.command) $own (not $trainer) -}}
tensorboard.image: TensorBoard runs {{ $tensorboard }}, where {{ join ", " $own }} run a program of your own; it needs the `tensorboard` command in that image (pip install tensorboard). Fix: --set tensorboard.image.repository={{ .Values.supervisor.image.repository }},tensorboard.image.tag={{ .Chart.AppVersion }} (the project's image) or --set tensorboard.enabled=false
{{- end -}}
{{- end -}}
