{{/* Names, labels and the RBAC rules shared by the templates. */}}

{{- define "grpo-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name if it already holds the chart's name. */}}
{{- define "grpo-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* component=operator keeps the selector off the operator's own children (they carry
app.kubernetes.io/name=grpo-operator too, with the run's name as instance). */}}
{{- define "grpo-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "grpo-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "grpo-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "grpo-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "grpo-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "grpo-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret in the release namespace holding the operator's report-signing key, which the
operator reads, and creates when it is absent (GRPO_SIGNING_SECRET names it). */}}
{{- define "grpo-operator.signingSecretName" -}}
{{- printf "%s-report-signing" (include "grpo-operator.fullname" .) }}
{{- end }}

{{/* The coordination.k8s.io Lease in the release namespace that elects the acting replica. */}}
{{- define "grpo-operator.leaseName" -}}
{{- printf "%s-leader" (include "grpo-operator.fullname" .) }}
{{- end }}

{{- define "grpo-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
What the operator does in the namespaces it serves, derived from operator/grpo_operator/kube.py,
controller.py and main.py (the chart's README explains each rule). Nothing here lists or reads
Secrets: the operator only creates the per-run Secrets (Ray auth token, report key).
*/}}
{{- define "grpo-operator.runRules" -}}
# kopf lists and watches GRPORuns and patches them (its finalizer/annotations); the
# controller reads a run by name when its cache is behind, and deletes a finished one whose
# runPolicy.ttlSecondsAfterFinished has passed.
- apiGroups: ["grpo.dev"]
  resources: ["grporuns"]
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: ["grpo.dev"]
  resources: ["grporuns/status"]
  verbs: ["patch"]
# The controller's Events on GRPORuns.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Per-run children, watched (list/watch) with the label selector grpo.dev/run: passes read
# them from that cache; get is for a child's name found taken at create (to refuse one the run
# does not control: made beforehand by someone else, or left by a deleted run of the same
# name). Label selectors narrow what is sent, not what RBAC grants: list covers every object
# of these kinds in the namespaces served — hence Secrets are not watched: the run's two are
# created, and read by name only when taken (their values are derived, never read).
# configmaps: the controller also patches the run config for each new attempt, and RBAC's
# escalation check lets it create (and bind) the per-run Role, which grants get/patch on the
# report ConfigMap, only if it holds those verbs itself; it gets a python reward's ConfigMap by
# name at acceptance.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "get", "list", "watch", "patch"]
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["create", "get", "list", "watch"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create", "get"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create", "get", "list", "watch"]
# The per-run NetworkPolicy that closes the run's Ray pods to all but the run's own pods.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["create", "get", "list", "watch"]
- apiGroups: ["ray.io"]
  resources: ["rayclusters"]
  verbs: ["create", "get", "list", "watch", "delete"]
# Kueue's Workload of a queued RayCluster, read while Kueue holds it: why the run waits.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list"]
# Driver Jobs: one per attempt; a lost or stopped attempt's Job is deleted (Background, so its
# pod goes too) before the next.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["create", "get", "list", "watch", "delete"]
# The driver's and the RayCluster's pods (exit codes, pods that do not start, GPU metering).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# The input PersistentVolumeClaims, read at acceptance.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get"]
{{- end }}

{{/* kopf's cluster-scoped discovery: it watches CRDs to notice the GRPORun CRD change. */}}
{{- define "grpo-operator.crdRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- end }}
