{{/* Ingress of a web component (tensorboard, serving). Usage: include "tf-distributed.ingress" (list $ "serving" "http") */}}
{{- define "tf-distributed.ingress" -}}
{{- $root := index . 0 -}}
{{- $role := index . 1 -}}
{{- $c := index $root.Values $role -}}
{{- $name := include "tf-distributed.componentName" (list $root $role) -}}
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {{ $name | quote }}
  namespace: {{ include "tf-distributed.namespace" $root | quote }}
  labels:
    {{- include "tf-distributed.labels" (list $root $role) | nindent 4 }}
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
                  name: {{ index . 2 }}
{{- end -}}
