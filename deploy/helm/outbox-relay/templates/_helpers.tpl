{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "outbox-relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: the release name, with the chart's unless it already contains it. */}}
{{- define "outbox-relay.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "outbox-relay.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "outbox-relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outbox-relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "outbox-relay.labels" -}}
helm.sh/chart: {{ include "outbox-relay.chart" . }}
{{ include "outbox-relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "outbox-relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "outbox-relay.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image: repository with the digest, or the tag (default: appVersion). */}}
{{- define "outbox-relay.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Seconds of a Go duration made of whole h, m and s units ("30s", "1m30s"), for
terminationGracePeriodSeconds; other forms fail the render.
*/}}
{{- define "outbox-relay.seconds" -}}
{{- $d := toString . }}
{{- if not (regexMatch "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$" $d) }}
{{- fail (printf "shutdownTimeout %q: use whole h, m and s units, e.g. 30s or 1m30s" $d) }}
{{- end }}
{{- $total := 0 }}
{{- range $part := regexFindAll "[0-9]+[hms]" $d -1 }}
{{- $n := trimSuffix "h" (trimSuffix "m" (trimSuffix "s" $part)) | atoi }}
{{- if hasSuffix "h" $part }}{{ $n = mul $n 3600 }}{{ else if hasSuffix "m" $part }}{{ $n = mul $n 60 }}{{ end }}
{{- $total = add $total $n }}
{{- end }}
{{- $total }}
{{- end }}

{{/* terminationGracePeriodSeconds: the value, which must exceed shutdownTimeout, or shutdownTimeout + 15. */}}
{{- define "outbox-relay.terminationGracePeriodSeconds" -}}
{{- $shutdown := include "outbox-relay.seconds" .Values.shutdownTimeout | atoi }}
{{- /* get: helm drops a null value's key, which strict rendering refuses to read */}}
{{- $grace := get .Values "terminationGracePeriodSeconds" }}
{{- if not $grace }}
{{- add $shutdown 15 }}
{{- else if le (int $grace) $shutdown }}
{{- fail (printf "terminationGracePeriodSeconds %v must exceed shutdownTimeout %s, or the kubelet kills the leader mid-drain" $grace .Values.shutdownTimeout) }}
{{- else }}
{{- int $grace }}
{{- end }}
{{- end }}

{{/*
A config value as its flag reads it: YAML numbers arrive as float64, which
toString would print as 1.6777216e+07.
*/}}
{{- define "outbox-relay.flagValue" -}}
{{- if and (kindIs "float64" .) (eq (float64 .) (float64 (int64 .))) }}
{{- int64 . }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}

{{/* The OUTBOX_RELAY_* variable of a flag name. */}}
{{- define "outbox-relay.envName" -}}
{{- printf "OUTBOX_RELAY_%s" (. | upper | replace "-" "_") }}
{{- end }}

{{/* Flags the chart sets from its own values; config may not name them. */}}
{{- define "outbox-relay.reservedFlags" -}}
database-url database-password-file database-auth database-aws-region kafka-brokers kafka-sasl-mechanism kafka-sasl-username kafka-sasl-password kafka-sasl-oauth-token-file kafka-sasl-oauth-token-endpoint kafka-sasl-oauth-client-id kafka-sasl-oauth-client-secret kafka-sasl-oauth-scope kafka-sasl-oauth-extensions kafka-sasl-session-lifetime kafka-tls kafka-tls-ca-file kafka-tls-cert-file kafka-tls-key-file kafka-tls-server-name metrics-addr shutdown-timeout
{{- end }}

{{/* Where the Secrets are mounted. */}}
{{- define "outbox-relay.secretsDir" -}}/var/run/secrets/outbox-relay{{- end }}

{{/* Whether Kafka TLS is on. */}}
{{- define "outbox-relay.kafkaTLS" -}}
{{- if or .Values.kafka.tls.enabled .Values.kafka.tls.existingSecret }}true{{ end }}
{{- end }}

{{/*
Combinations of the database and SASL values the binary refuses at start
(exit 2), failed at render time instead, naming the values to change.
*/}}
{{- define "outbox-relay.validateAuth" -}}
{{- $db := .Values.database }}
{{- if eq $db.auth "aws-rds-iam" }}
{{- if $db.passwordSecret }}
{{- fail "database.passwordSecret with database.auth aws-rds-iam: the IAM token is the password; drop database.passwordSecret" }}
{{- end }}
{{- else if $db.awsRegion }}
{{- fail "database.awsRegion is only used with database.auth aws-rds-iam" }}
{{- end }}
{{- $sasl := .Values.kafka.sasl }}
{{- $o := $sasl.oauth }}
{{- $oauthSet := or $o.existingSecret $o.tokenEndpoint $o.clientId $o.scope $o.extensions }}
{{- if eq $sasl.mechanism "OAUTHBEARER" }}
{{- if or $sasl.username $sasl.existingSecret }}
{{- fail "kafka.sasl.username and kafka.sasl.existingSecret are for PLAIN and SCRAM: OAUTHBEARER takes no username or password (set kafka.sasl.oauth)" }}
{{- end }}
{{- if $o.tokenEndpoint }}
{{- if not $o.clientId }}
{{- fail "kafka.sasl.oauth.clientId is required with kafka.sasl.oauth.tokenEndpoint (the client-credentials grant)" }}
{{- end }}
{{- else if or $o.clientId $o.scope }}
{{- fail "kafka.sasl.oauth.clientId and .scope are only used with kafka.sasl.oauth.tokenEndpoint; without it the relay reads a token from kafka.sasl.oauth.existingSecret's tokenKey" }}
{{- end }}
{{- else if $oauthSet }}
{{- fail (printf "kafka.sasl.oauth is set but kafka.sasl.mechanism is %q: use OAUTHBEARER" $sasl.mechanism) }}
{{- end }}
{{- end }}
