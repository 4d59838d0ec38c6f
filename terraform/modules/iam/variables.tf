variable "name" {
  description = "Name prefix of the roles (e.g. rampart-dev)."
  type        = string
}

variable "namespace" {
  description = "Kubernetes namespace the chart is installed in."
  type        = string
  default     = "rampart"
}

variable "cluster_name" {
  description = "EKS cluster name (scopes the autoscaler's write actions)."
  type        = string
}

variable "oidc_provider_arn" {
  description = "The cluster's IAM OIDC provider."
  type        = string
}

variable "oidc_issuer" {
  description = "OIDC issuer without https://."
  type        = string
}

variable "opensearch_domain" {
  description = "OpenSearch domain name the retrieval role may call."
  type        = string
}

variable "readable_secret_arns" {
  description = "Secrets Manager secrets External Secrets may read."
  type        = list(string)
}

variable "kms_key_arn" {
  description = "KMS key of those secrets."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
