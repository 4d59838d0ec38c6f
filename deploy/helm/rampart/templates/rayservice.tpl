{{/* The orchestrator as a KubeRay RayService: the Serve app from serveConfigV2, a head group that runs no
     replicas (num-cpus 0) and one autoscaled worker group; both pods are the component's pod spec. */}}
{{- define "rampart.rayService" -}}
{{- $root := .root -}}
{{- $c := .comp -}}
{{- $r := $c.ray -}}
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: {{ include "rampart.name" . }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "rampart.labels" . | nindent 4 }}
spec:
  serveConfigV2: |
    {{- tpl (toYaml $r.serveConfig) $root | nindent 4 }}
  rayClusterConfig:
    rayVersion: {{ $r.rayVersion | quote }}
    enableInTreeAutoscaling: true
    autoscalerOptions:
      upscalingMode: Default
      idleTimeoutSeconds: {{ $r.idleTimeoutSeconds }}
      resources:
        {{- toYaml $r.autoscalerResources | nindent 8 }}
      securityContext:
        {{- include "rampart.containerSecurityContext" . | nindent 8 }}
    headGroupSpec:
      rayStartParams:
        dashboard-host: "0.0.0.0"
        num-cpus: "0"
      template:
        metadata:
          labels:
            {{- include "rampart.labels" . | nindent 12 }}
          {{- with include "rampart.podAnnotations" . }}
          annotations:
            {{- . | nindent 12 }}
          {{- end }}
        spec:
          {{- include "rampart.podSpec" (merge (dict "ray" true "container" "ray-head") .) | nindent 10 }}
    workerGroupSpecs:
      - groupName: pipeline
        replicas: {{ $r.workers.min }}
        minReplicas: {{ $r.workers.min }}
        maxReplicas: {{ $r.workers.max }}
        rayStartParams: {}
        template:
          metadata:
            labels:
              {{- include "rampart.labels" . | nindent 14 }}
            {{- with include "rampart.podAnnotations" . }}
            annotations:
              {{- . | nindent 14 }}
            {{- end }}
          spec:
            {{- include "rampart.podSpec" (merge (dict "ray" true "container" "ray-worker") .) | nindent 12 }}
{{- end -}}
