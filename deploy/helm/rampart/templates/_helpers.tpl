{{/* Names: "<release>" when it already says rampart, else "<release>-rampart"; components append "-<name>". */}}
{{- define "rampart.fullname" -}}
{{- if contains "rampart" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-rampart" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The name of one component's objects. Args: dict root name. */}}
{{- define "rampart.name" -}}
{{- printf "%s-%s" (include "rampart.fullname" .root) .name -}}
{{- end -}}

{{/* The service group a component belongs to: its Service, NetworkPolicy and peers all use it. */}}
{{- define "rampart.group" -}}
{{- .comp.serviceName | default .name -}}
{{- end -}}

{{/* Pod selector of one workload. Args: dict root name comp. */}}
{{- define "rampart.selectorLabels" -}}
app.kubernetes.io/name: rampart
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{- define "rampart.labels" -}}
{{ include "rampart.selectorLabels" . }}
rampart.io/service: {{ include "rampart.group" . }}
app.kubernetes.io/part-of: rampart
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* registry/repository:tag@digest; a component's image.registry overrides global.imageRegistry. */}}
{{- define "rampart.image" -}}
{{- $img := .comp.image -}}
{{- $registry := $img.registry | default .root.Values.global.imageRegistry -}}
{{- $tag := $img.tag | default .root.Values.global.imageTag -}}
{{- printf "%s/%s:%s" $registry $img.repository $tag -}}
{{- with $img.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* A Redis URL for database n as the component's ACL user (redisUser): $(REDIS_USERNAME) and
     $(REDIS_PASSWORD), which Kubernetes expands from the variables defined before it (the password
     from the role's Secret), so no credential is in a value. Args: list root n. */}}
{{- define "rampart.redisUrl" -}}
{{- $root := index . 0 -}}
{{- $db := index . 1 -}}
{{- $r := $root.Values.endpoints.redis -}}
{{- $host := $r.host | default (printf "%s-redis" (include "rampart.fullname" $root)) -}}
{{- if include "rampart.redisTls" $root -}}
rediss://$(REDIS_USERNAME):$(REDIS_PASSWORD)@{{ $host }}:{{ $r.port }}/{{ $db }}?ssl_cert_reqs=required&ssl_ca_certs={{ $root.Values.tls.mountPath }}/ca.crt
{{- else if $r.tls -}}
rediss://$(REDIS_USERNAME):$(REDIS_PASSWORD)@{{ $host }}:{{ $r.port }}/{{ $db }}?ssl_cert_reqs=required
{{- else -}}
redis://$(REDIS_USERNAME):$(REDIS_PASSWORD)@{{ $host }}:{{ $r.port }}/{{ $db }}
{{- end -}}
{{- end -}}

{{/* "true" when the in-cluster Redis serves TLS (redis.tls.enabled); refused without the chart's CA
     or with an external Redis, whose TLS is endpoints.redis.tls. Args: root. */}}
{{- define "rampart.redisTls" -}}
{{- $v := .Values -}}
{{- if dig "tls" "enabled" false ($v.redis | default dict) -}}
{{- if not $v.tls.enabled -}}
{{- fail "redis.tls.enabled needs the chart's CA: set tls.enabled=true (or redis.tls.enabled=false)" -}}
{{- end -}}
{{- if $v.endpoints.redis.host -}}
{{- fail (printf "redis.tls.enabled is for the in-cluster Redis, but endpoints.redis.host is %q: set endpoints.redis.tls for an external one" $v.endpoints.redis.host) -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when a component gets its certificate Secret mounted while tls.enabled: a gRPC component
     (mtls), and with redis.tls.enabled the Redis server and its clients (they need the CA).
     Args: dict root name comp. */}}
{{- define "rampart.hasCert" -}}
{{- $c := .comp -}}
{{- if and .root.Values.tls.enabled (or $c.mtls (and (include "rampart.redisTls" .root) (or $c.redisServer $c.redisUser))) -}}
true
{{- end -}}
{{- end -}}

{{- define "rampart.opensearchUrl" -}}
{{- .Values.endpoints.opensearch.url | default (printf "http://%s-opensearch:9200" (include "rampart.fullname" .)) -}}
{{- end -}}

{{- define "rampart.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
privileged: false
capabilities:
  drop: [ALL]
{{- end -}}

{{/* The pod spec every workload shares (Deployments, StatefulSets, both Ray groups).
     Args: dict root name comp container (container name) ray (bool). */}}
{{- define "rampart.podSpec" -}}
{{- $root := .root -}}
{{- $c := .comp -}}
{{- $uid := $c.runAsUser | default 10001 -}}
{{- $tls := include "rampart.hasCert" . -}}
{{- if not .ray }}
serviceAccountName: {{ include "rampart.name" . }}
automountServiceAccountToken: false
{{- end }}
enableServiceLinks: false
securityContext:
  runAsNonRoot: true
  runAsUser: {{ $uid }}
  runAsGroup: {{ $uid }}
  fsGroup: {{ $uid }}
  seccompProfile:
    type: RuntimeDefault
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
topologySpreadConstraints:
  {{- range $key := list "topology.kubernetes.io/zone" "kubernetes.io/hostname" }}
  - maxSkew: 1
    topologyKey: {{ $key }}
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "rampart.selectorLabels" $ | nindent 8 }}
  {{- end }}
terminationGracePeriodSeconds: {{ $c.terminationGracePeriodSeconds | default 30 }}
containers:
  - name: {{ .container | default .name }}
    image: {{ include "rampart.image" . }}
    imagePullPolicy: {{ $root.Values.global.imagePullPolicy }}
    {{- with $c.command }}
    command:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- if or $c.args (and $tls $c.tlsArgs) }}
    args:
      {{- with $c.args }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
      {{- if $tls }}
      {{- range $c.tlsArgs }}
      - {{ tpl . $root | quote }}
      {{- end }}
      {{- end }}
    {{- end }}
    ports:
      {{- range $c.ports }}
      - name: {{ .name }}
        containerPort: {{ .port }}
        protocol: TCP
      {{- end }}
      {{- if and $tls $c.grpcHealth }}
      - name: grpc-health
        containerPort: {{ $c.grpcHealth.port }}
        protocol: TCP
      {{- end }}
    {{- if or $c.secretEnv $c.rampart $c.env $c.redisUser (and $tls $c.tlsEnv) }}
    env:
      {{- with $c.redisUser }}
      {{- $s := index $root.Values.secrets (index $root.Values.redisUsers .).secret }}
      - name: REDIS_USERNAME
        value: {{ . | quote }}
      - name: REDIS_PASSWORD
        valueFrom:
          secretKeyRef:
            name: {{ $s.name }}
            key: {{ $s.key }}
            optional: false
      {{- end }}
      {{- range $c.secretEnv }}
      {{- $s := index $root.Values.secrets .secret }}
      - name: {{ .name }}
        valueFrom:
          secretKeyRef:
            name: {{ $s.name }}
            key: {{ $s.key }}
            optional: false
      {{- end }}
      {{- if and $tls $c.rampart }}
      {{- include "rampart.tlsEnv" . | nindent 6 }}
      {{- end }}
      {{- if $tls }}
      {{- range $k, $v := $c.tlsEnv }}
      - name: {{ $k }}
        value: {{ tpl (toString $v) $root | quote }}
      {{- end }}
      {{- end }}
      {{- if $c.rampart }}
      {{- range $k, $v := $root.Values.global.env }}
      - name: {{ $k }}
        value: {{ tpl (toString $v) $root | quote }}
      {{- end }}
      {{- if $root.Values.otel.enabled }}
      - name: OTEL_SERVICE_NAME
        value: {{ printf "rampart-%s" .name | quote }}
      - name: OTEL_TRACES_EXPORTER
        value: otlp
      - name: OTEL_EXPORTER_OTLP_PROTOCOL
        value: http/protobuf
      - name: OTEL_EXPORTER_OTLP_ENDPOINT
        value: {{ printf "http://%s-otel-collector:4318" (include "rampart.fullname" $root) | quote }}
      {{- end }}
      {{- end }}
      {{- range $k, $v := $c.env }}
      - name: {{ $k }}
        value: {{ tpl (toString $v) $root | quote }}
      {{- end }}
    {{- end }}
    resources:
      {{- toYaml $c.resources | nindent 6 }}
    securityContext:
      {{- include "rampart.containerSecurityContext" . | nindent 6 }}
    {{- range $probe := list "startupProbe" "livenessProbe" "readinessProbe" }}
    {{- with index $c.probes $probe }}
    {{- $p := . }}
    {{- if and $tls $c.grpcHealth .grpc }}
    {{- /* kubelet's gRPC probe speaks no TLS: the plaintext health-only port */}}
    {{- $p = merge (dict "grpc" (merge (dict "port" $c.grpcHealth.port) (omit .grpc "port"))) (omit . "grpc") }}
    {{- end }}
    {{ $probe }}:
      {{- toYaml $p | nindent 6 }}
    {{- end }}
    {{- end }}
    volumeMounts:
      {{- range $c.writablePaths }}
      - name: {{ .name }}
        mountPath: {{ .path }}
      {{- end }}
      {{- range $c.secretFiles }}
      - name: {{ .name }}
        mountPath: {{ .path }}
        readOnly: true
      {{- end }}
      {{- if $tls }}
      - name: tls
        mountPath: {{ $root.Values.tls.mountPath }}
        readOnly: true
      {{- end }}
      {{- if $c.config }}
      - name: config
        mountPath: {{ $c.config.path }}
        readOnly: true
      {{- end }}
      {{- if and $c.persistence (eq $c.kind "StatefulSet") }}
      - name: data
        mountPath: {{ $c.persistence.path }}
      {{- end }}
volumes:
  {{- range $c.writablePaths }}
  - name: {{ .name }}
    emptyDir:
      {{- if .medium }}
      medium: {{ .medium }}
      {{- end }}
      sizeLimit: {{ .size | default "256Mi" }}
  {{- end }}
  {{- range $c.secretFiles }}
  {{- $s := index $root.Values.secrets .secret }}
  - name: {{ .name }}
    secret:
      secretName: {{ $s.name }}
      optional: false
      defaultMode: 0400
      items:
        - key: {{ $s.key }}
          path: {{ $s.key }}
  {{- end }}
  {{- if $tls }}
  - name: tls
    secret:
      secretName: {{ include "rampart.tlsSecret" . }}
      optional: false
      defaultMode: 0400
      items:
        {{- range list "ca.crt" "tls.crt" "tls.key" }}
        - key: {{ . }}
          path: {{ . }}
        {{- end }}
  {{- end }}
  {{- if $c.config }}
  - name: config
    configMap:
      name: {{ include "rampart.name" . }}
  {{- end }}
{{- end -}}

{{/* The Secret of one component's certificate (ca.crt, tls.crt, tls.key). Args: dict root name. */}}
{{- define "rampart.tlsSecret" -}}
{{- printf "%s-%s-tls" (include "rampart.fullname" .root) .name -}}
{{- end -}}

{{/* The DNS names a component's certificate is valid for: its Service's, short to fully qualified
     (clients dial the short one, rampart-retrieval:50051, and check the certificate against it). */}}
{{- define "rampart.tlsNames" -}}
{{- $svc := printf "%s-%s" (include "rampart.fullname" .root) (include "rampart.group" .) -}}
{{- $ns := .root.Release.Namespace -}}
{{- toJson (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) -}}
{{- end -}}

{{/* remote.tls of a component with mtls: the mounted Secret's files (paths only, no secret). */}}
{{- define "rampart.tlsEnv" -}}
{{- $dir := .root.Values.tls.mountPath -}}
- name: RAMPART_REMOTE__TLS__ENABLED
  value: "true"
- name: RAMPART_REMOTE__TLS__CA_FILE
  value: {{ printf "%s/ca.crt" $dir | quote }}
- name: RAMPART_REMOTE__TLS__CERT_FILE
  value: {{ printf "%s/tls.crt" $dir | quote }}
- name: RAMPART_REMOTE__TLS__KEY_FILE
  value: {{ printf "%s/tls.key" $dir | quote }}
{{- with .comp.grpcHealth }}
- name: {{ .setting }}
  value: {{ .port | quote }}
{{- end }}
{{- with .comp.grpcCallers }}
- name: {{ .setting }}
  value: {{ include "rampart.callerIds" (dict "root" $.root "callers" .components) | quote }}
{{- range $setting, $components := .roles }}
- name: {{ $setting }}
  value: {{ include "rampart.callerIds" (dict "root" $.root "callers" $components) | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A gRPC server's allowed_callers: each caller's identity, the CN its certificate carries (the first
     of rampart.tlsNames, <release>-<component>, as generated or issued by cert-manager), as JSON.
     Args: dict root callers. */}}
{{- define "rampart.callerIds" -}}
{{- $root := .root -}}
{{- $ids := list -}}
{{- range .callers -}}
{{- $ctx := dict "root" $root "name" . "comp" (index $root.Values.components . | default dict) -}}
{{- $ids = append $ids (include "rampart.tlsNames" $ctx | fromJsonArray | first) -}}
{{- end -}}
{{- toJson $ids -}}
{{- end -}}

{{/* The pod template's annotations: a checksum of each generated file it mounts (its certificate, the
     Redis aclfile), so that `helm upgrade` rolls exactly the pods whose file changed (a renewed
     certificate, a rotated Redis password); the files are read at start. Args: dict root name comp. */}}
{{- define "rampart.podAnnotations" -}}
{{- $g := include "rampart.generated" .root | fromJson -}}
{{- $c := .comp -}}
{{- with $c.config }}
checksum/config: {{ toYaml .files | sha256sum }}
{{- end }}
{{- if and (include "rampart.hasCert" .) (hasKey $g.tls .name) }}
checksum/tls: {{ index $g.tls .name "tls.crt" | sha256sum }}
{{- end }}
{{- range $f := $c.secretFiles }}
{{- with index $g.secrets $f.secret }}
checksum/secret-{{ $f.name }}: {{ . | sha256sum }}
{{- end }}
{{- end }}
{{- end -}}
