{{/* Names, labels, images and the rules that values.schema.json cannot say. */}}

{{- define "llmgw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-llmgw, at most 40 characters: component suffixes and pod
     names (a ReplicaSet's hash and the pod's) must stay within 63. */}}
{{- define "llmgw.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "llmgw.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of a component: (dict "ctx" $ "component" "dataplane"). */}}
{{- define "llmgw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llmgw.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "llmgw.labels" -}}
{{ include "llmgw.selectorLabels" . }}
helm.sh/chart: {{ include "llmgw.chart" .ctx }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: llmgw
{{- end -}}

{{/* An image: (dict "ctx" $ "image" .Values.dataplane.image). */}}
{{- define "llmgw.image" -}}
{{- $tag := .image.tag | default .ctx.Values.image.tag | default .ctx.Chart.AppVersion -}}
{{- $repo := .image.repository -}}
{{- with .ctx.Values.global.imageRegistry -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}
{{- end -}}
{{- printf "%s:%s" $repo (toString $tag) -}}
{{- end -}}

{{- define "llmgw.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "llmgw.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "llmgw.podSpecCommon" -}}
serviceAccountName: {{ include "llmgw.serviceAccountName" . }}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "llmgw.cp.name" -}}{{ include "llmgw.fullname" . }}-controlplane{{- end -}}
{{- define "llmgw.dp.name" -}}{{ include "llmgw.fullname" . }}-dataplane{{- end -}}
{{- define "llmgw.pg.name" -}}{{ include "llmgw.fullname" . }}-postgres{{- end -}}
{{- define "llmgw.etcd.name" -}}{{ include "llmgw.fullname" . }}-etcd{{- end -}}
{{- define "llmgw.secretName" -}}
{{- if .Values.secrets.create -}}{{ include "llmgw.fullname" . }}{{- else -}}{{ .Values.secrets.existingSecret }}{{- end -}}
{{- end -}}
{{- define "llmgw.tls.serverSecret" -}}
{{- .Values.grpcTLS.serverSecret | default (printf "%s-grpc-server-tls" (include "llmgw.fullname" .)) -}}
{{- end -}}
{{- define "llmgw.tls.clientSecret" -}}
{{- .Values.grpcTLS.clientSecret | default (printf "%s-grpc-client-tls" (include "llmgw.fullname" .)) -}}
{{- end -}}

{{/* What the data plane dials: the control plane's gRPC Service by its
     fully qualified name (no resolver search path involved; its
     certificate carries it). */}}
{{- define "llmgw.dp.controlPlaneAddress" -}}
{{- .Values.dataplane.controlPlaneAddress | default (printf "%s.%s.svc.%s:%d" (include "llmgw.cp.name" .) .Release.Namespace .Values.clusterDomain (int .Values.controlplane.grpcPort)) -}}
{{- end -}}

{{- define "llmgw.etcdEndpoints" -}}
{{- if .Values.etcd.inChart.enabled -}}
{{- printf "http://%s:2379" (include "llmgw.etcd.name" .) -}}
{{- else -}}
{{- .Values.etcd.endpoints -}}
{{- end -}}
{{- end -}}

{{/* The data plane's grace period: the preStop sleep, the drain delay, the
     drain and the ledger flush, plus 5 s for the process to exit. */}}
{{- define "llmgw.dp.minGrace" -}}
{{- $d := .Values.dataplane -}}
{{- $ms := add (int $d.drainDelayMs) (int $d.drainTimeoutMs) (int $d.ledger.flushTimeoutMs) -}}
{{- add (int $d.preStopSleepSeconds) (div (add $ms 999) 1000) 5 -}}
{{- end -}}

{{- define "llmgw.dp.grace" -}}
{{- $min := int (include "llmgw.dp.minGrace" .) -}}
{{- with .Values.dataplane.terminationGracePeriodSeconds -}}
{{- if lt (int .) $min -}}
{{- fail (printf "dataplane.terminationGracePeriodSeconds (%d) must be at least %d: preStopSleepSeconds + (drainDelayMs + drainTimeoutMs + ledger.flushTimeoutMs) / 1000 + 5, or open streams and unacknowledged ledger rows are cut at SIGKILL" (int .) $min) -}}
{{- end -}}
{{- int . -}}
{{- else -}}
{{- $min -}}
{{- end -}}
{{- end -}}

{{/* The migration hook: before install only when everything the Job needs
     exists before the release does. */}}
{{- define "llmgw.migrations.hook" -}}
{{- if or .Values.postgres.inChart.enabled .Values.secrets.create -}}
post-install,pre-upgrade
{{- else -}}
pre-install,pre-upgrade
{{- end -}}
{{- end -}}

{{/* Rules across values, refused with a message naming the values. */}}
{{- define "llmgw.validate" -}}
{{- if and (gt (int .Values.controlplane.replicas) 1) (not .Values.etcd.endpoints) (not .Values.etcd.inChart.enabled) -}}
{{- fail "controlplane.replicas > 1 needs etcd for the leader election: set etcd.endpoints (or, to evaluate, etcd.inChart.enabled=true)" -}}
{{- end -}}
{{- if and .Values.etcd.endpoints .Values.etcd.inChart.enabled -}}
{{- fail "etcd.endpoints and etcd.inChart.enabled exclude each other: one etcd" -}}
{{- end -}}
{{- if and (not .Values.secrets.create) (not .Values.secrets.existingSecret) -}}
{{- fail "secrets.existingSecret must name the Secret with database-url (and master-key, admin-token, cache-key): helm/README.md, \"Install\" (or, to evaluate, secrets.create=true with postgres.inChart.enabled=true)" -}}
{{- end -}}
{{- if and .Values.secrets.create (not .Values.postgres.inChart.enabled) -}}
{{- fail "secrets.create makes keys and tokens only: with an external Postgres, put database-url in a Secret of your own and name it in secrets.existingSecret" -}}
{{- end -}}
{{- if and .Values.grpcTLS.certManager.enabled (eq .Values.grpcTLS.mode "insecure") -}}
{{- fail "grpcTLS.certManager.enabled needs grpcTLS.mode mtls or tls" -}}
{{- end -}}
{{- if and .Values.grpcTLS.certManager.enabled (not .Values.grpcTLS.certManager.issuerRef.name) -}}
{{- fail "grpcTLS.certManager.issuerRef.name is required with grpcTLS.certManager.enabled" -}}
{{- end -}}
{{- if and .Values.dataplane.autoscaling.enabled (lt (int .Values.dataplane.autoscaling.maxReplicas) (int .Values.dataplane.autoscaling.minReplicas)) -}}
{{- fail "dataplane.autoscaling.maxReplicas must be at least minReplicas" -}}
{{- end -}}
{{- if and .Values.tracing.enabled (not .Values.tracing.endpoint) -}}
{{- fail "tracing.enabled needs tracing.endpoint: the collector's OTLP/HTTP base URL, e.g. http://otel-collector.observability:4318 (helm/README.md, \"Traces\")" -}}
{{- end -}}
{{- if and .Values.tracing.enabled (gt (int .Values.tracing.batch.maxExportBatchSize) (int .Values.tracing.batch.maxQueueSize)) -}}
{{- fail (printf "tracing.batch.maxExportBatchSize (%d) must not exceed tracing.batch.maxQueueSize (%d)" (int .Values.tracing.batch.maxExportBatchSize) (int .Values.tracing.batch.maxQueueSize)) -}}
{{- end -}}
{{- $_ := include "llmgw.dp.grace" . -}}
{{- end -}}

{{/* The control plane's database and key environment (the Deployment and
     the migration Job). */}}
{{- define "llmgw.cp.secretEnv" -}}
{{- $secret := include "llmgw.secretName" . -}}
{{- if .Values.postgres.inChart.enabled }}
- name: LLMGW_DATABASE_URL
  value: {{ printf "host=%s port=5432 user=%s dbname=%s" (include "llmgw.pg.name" .) .Values.postgres.inChart.user .Values.postgres.inChart.database | quote }}
# libpq reads the password from PGPASSWORD: it is never in the conninfo.
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "llmgw.pg.name" . }}
      key: password
{{- else }}
- name: LLMGW_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .Values.secrets.keys.databaseUrl }}
{{- end }}
- name: LLMGW_MASTER_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .Values.secrets.keys.masterKey }}
      optional: true
{{- end -}}

{{/* The gRPC TLS flags of the control plane, and its mount. */}}
{{- define "llmgw.cp.tlsArgs" -}}
{{- if eq .Values.grpcTLS.mode "insecure" }}
- --grpc-insecure
{{- else }}
- --grpc-tls-cert=/etc/llmgw/grpc-tls/tls.crt
- --grpc-tls-key=/etc/llmgw/grpc-tls/tls.key
{{- if eq .Values.grpcTLS.mode "mtls" }}
- --grpc-tls-client-ca=/etc/llmgw/grpc-tls/ca.crt
{{- else }}
- --grpc-tls-no-client-auth
{{- end }}
{{- end }}
{{- end -}}

{{/* Egress to Postgres: the in-chart pod, or the external addresses. */}}
{{- define "llmgw.netpol.postgresEgress" -}}
{{- if .Values.postgres.inChart.enabled -}}
- to:
    - podSelector:
        matchLabels:
          {{- include "llmgw.selectorLabels" (dict "ctx" $ "component" "postgres") | nindent 10 }}
  ports:
    - port: 5432
      protocol: TCP
{{- else -}}
- to:
    {{- range .Values.postgres.external.cidrs }}
    - ipBlock:
        cidr: {{ . }}
    {{- end }}
  ports:
    - port: {{ .Values.postgres.external.port }}
      protocol: TCP
{{- end -}}
{{- end -}}


{{/* OpenTelemetry traces: the OTEL_* environment of a daemon, (dict "ctx" $
     "component" "dataplane"), after LLMGW_REPLICA_ID (k8s.pod.name expands
     it) and before extraEnv (which may override any of it). Nothing when
     tracing is off. */}}
{{- define "llmgw.tracing.env" -}}
{{- $t := .ctx.Values.tracing -}}
{{- if $t.enabled }}
- name: OTEL_SERVICE_NAME
  value: {{ printf "llmgw-%s" .component | quote }}
{{- $attrs := list "k8s.pod.name=$(LLMGW_REPLICA_ID)" (printf "k8s.namespace.name=%s" .ctx.Release.Namespace) (printf "service.namespace=%s" .ctx.Release.Name) }}
{{- with $t.resourceAttributes }}
{{- $attrs = append $attrs . }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attrs | quote }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $t.endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $t.protocol | quote }}
- name: OTEL_EXPORTER_OTLP_COMPRESSION
  value: {{ $t.compression | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ $t.sampler | quote }}
{{- if and (hasSuffix "traceidratio" $t.sampler) (ne (toString $t.samplerArg) "") }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ toString $t.samplerArg | quote }}
{{- end }}
- name: OTEL_BSP_MAX_QUEUE_SIZE
  value: {{ int $t.batch.maxQueueSize | quote }}
- name: OTEL_BSP_SCHEDULE_DELAY
  value: {{ int $t.batch.scheduleDelayMs | quote }}
- name: OTEL_BSP_MAX_EXPORT_BATCH_SIZE
  value: {{ int $t.batch.maxExportBatchSize | quote }}
{{- with $t.headersSecret }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: headers
{{- end }}
{{- if $t.caSecret }}
- name: OTEL_EXPORTER_OTLP_CERTIFICATE
  value: /etc/llmgw/otel-ca/ca.crt
{{- end }}
{{- if $t.clientTLSSecret }}
- name: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE
  value: /etc/llmgw/otel-client-tls/tls.crt
- name: OTEL_EXPORTER_OTLP_CLIENT_KEY
  value: /etc/llmgw/otel-client-tls/tls.key
{{- end }}
{{- end }}
{{- end -}}

{{/* The collector's CA and client certificate: a daemon's volumeMounts and
     its pod's volumes (list items; nothing when not used). */}}
{{- define "llmgw.tracing.volumeMounts" -}}
{{- $t := .Values.tracing -}}
{{- if $t.enabled }}
{{- if $t.caSecret }}
- name: otel-ca
  mountPath: /etc/llmgw/otel-ca
  readOnly: true
{{- end }}
{{- if $t.clientTLSSecret }}
- name: otel-client-tls
  mountPath: /etc/llmgw/otel-client-tls
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{- define "llmgw.tracing.volumes" -}}
{{- $t := .Values.tracing -}}
{{- if $t.enabled }}
{{- if $t.caSecret }}
- name: otel-ca
  secret:
    secretName: {{ $t.caSecret }}
    defaultMode: 0440
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- if $t.clientTLSSecret }}
- name: otel-client-tls
  secret:
    secretName: {{ $t.clientTLSSecret }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- end }}
{{- end -}}

{{/* Egress from a daemon to the collector (a rule, or nothing). */}}
{{- define "llmgw.netpol.tracingEgress" -}}
{{- $t := .Values.tracing -}}
{{- if $t.enabled }}
# The OpenTelemetry collector (tracing.networkPolicy{{ if not $t.networkPolicy.egressTo }}: no peers, any destination{{ end }}).
- ports:
    - port: {{ $t.networkPolicy.port }}
      protocol: TCP
  {{- with $t.networkPolicy.egressTo }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}
