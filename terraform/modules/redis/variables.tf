variable "name" {
  description = "Replication group id (e.g. rampart-dev)."
  type        = string
}

variable "roles" {
  description = "Roles with an ElastiCache user (the chart's redisUser of a component on EKS); the others get none."
  type        = list(string)
  default     = ["gateway", "orchestrator", "worker"]
  validation {
    condition     = alltrue([for r in var.roles : contains(["gateway", "orchestrator", "worker"], r)])
    error_message = "Each role must be one of services/common/redis_server.ROLE_RULES: gateway, orchestrator, worker."
  }
}

variable "engine_version" {
  description = "Redis OSS engine version."
  type        = string
  default     = "7.1"
}

variable "node_type" {
  description = "Cache node type; the broker and cache need little memory (tasks are small)."
  type        = string
  default     = "cache.t4g.small"
}

variable "replicas" {
  description = "Read replicas; at least one turns on automatic failover and Multi-AZ."
  type        = number
  default     = 0
}

variable "snapshot_retention_days" {
  description = "Daily snapshots kept (the broker's queue is transient; sessions expire in 30 min)."
  type        = number
  default     = 1
}

variable "vpc_id" {
  description = "VPC of the group."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the group."
  type        = list(string)
}

variable "client_security_group_id" {
  description = "Security group allowed to reach Redis (the EKS cluster security group)."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key encrypting the cache at rest and the token's secret."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
