{{/*
Object names: the chart name, <fullname> within the name budget, <fullname>-<component>, the
namespace and the ServiceAccount of the workloads.
*/}}

{{/*
Name budget. Pod hostnames must be DNS labels (<= 63 characters):
  StatefulSet pod hostname      <fullname>-worker-<ordinal>          (ordinal < 100000: 6 chars)
  controller-revision-hash      <fullname>-worker-<10-char hash>     (a label value, <= 63)
  chief pod hostname            <fullname>-chief
The longest component suffix is "-worker" (7) and the revision hash adds "-" + 10 = 11, so
  len(fullname) <= 63 - 7 - 11 = 45.
Under a JobSet (workload.kind=jobset) the pods are named by JobSet and the Job controller, and JobSet's
admission webhook (v0.12.0, pkg/webhooks/jobset_webhook.go) refuses a JobSet whose longest generated pod
name, <jobset>-<replicatedJob>-<jobIndex>-<podIndex>-<5 random characters>, is not a DNS-1035 label:
  evaluator                     <fullname>-evaluator-0-0-abcde       ("-evaluator-0-0-abcde": 20)
  worker (at most 499, index 498)  <fullname>-worker-0-498-abcde     (19; ps at most 510: 15)
so there len(fullname) <= 63 - 20 = 43. Everything else stays shorter: a pod's hostname
<fullname>-<role>-0-<index> (<= 57), its Job's name <fullname>-<role>-0 and the Job's name label (<= 55).
The budget depends on workload.kind so that no native release changes its names (its claim among them).
A longer <release>-<name> keeps its first budget - 9 characters and ends in "-" + the first 8 hex digits
of the SHA-256 of the whole name, so two long release names that share a prefix still get different
object names. Every object name is <fullname>-<component>; Service names must be DNS-1035 labels (start
with a letter), so validateValues rejects a release name that starts with a digit, and a fullnameOverride
over the budget (the schema allows 45).
*/}}
{{- define "tf-distributed.nameBudget" -}}{{ ternary 43 45 (eq .Values.workload.kind "jobset") }}{{- end -}}

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

{{/* Object name of a component: <fullname>-<component>. Usage: include "tf-distributed.componentName" (dict "context" $ "role" "worker") */}}
{{- define "tf-distributed.componentName" -}}
{{- printf "%s-%s" (include "tf-distributed.fullname" .context) .role -}}
{{- end -}}

{{- define "tf-distributed.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tf-distributed.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tf-distributed.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tf-distributed.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}
