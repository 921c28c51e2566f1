{{/* Ingress of a web component (tensorboard, serving). Usage: include "tf-distributed.ingress" (dict "context" $ "role" "serving" "port" "http") */}}
{{- define "tf-distributed.ingress" -}}
{{- $root := .context -}}
{{- $role := .role -}}
{{- $port := .port -}}
{{- $c := index $root.Values $role -}}
{{- $name := include "tf-distributed.componentName" (dict "context" $root "role" $role) -}}
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {{ $name | quote }}
  namespace: {{ include "tf-distributed.namespace" $root | quote }}
  labels:
    {{- include "tf-distributed.labels" (dict "context" $root "role" $role) | nindent 4 }}
  {{- with (merge (dict) ($c.ingress.annotations | default dict) ($root.Values.commonAnnotations | default dict)) }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- with $c.ingress.className }}
  ingressClassName: {{ . | quote }}
  {{- end }}
  {{- with $c.ingress.tlsSecretName }}
  tls:
    - hosts:
        - {{ $c.ingress.host | quote }}
      secretName: {{ . | quote }}
  {{- end }}
  rules:
    - host: {{ $c.ingress.host | quote }}
      http:
        paths:
          - path: {{ $c.ingress.path | quote }}
            pathType: Prefix
            backend:
              service:
                name: {{ $name | quote }}
                port:
                  name: {{ $port }}
{{- end -}}
