variable "name" {
  description = "Domain name (3-28 lower-case characters)."
  type        = string
}

variable "engine_version" {
  description = "OpenSearch version; 2.19 is the version Rampart's index is tested against (make opensearch)."
  type        = string
  default     = "OpenSearch_2.19"
}

variable "instance_type" {
  description = "Data node type; r7g/r6g memory-optimised types keep HNSW graphs in memory."
  type        = string
  default     = "r7g.large.search"
}

variable "instance_count" {
  description = "Data nodes; more than one spreads them over AZs (zone awareness)."
  type        = number
  default     = 1
}

variable "dedicated_master_count" {
  description = "Dedicated cluster-manager nodes (0 or 3)."
  type        = number
  default     = 0
  validation {
    condition     = contains([0, 3], var.dedicated_master_count)
    error_message = "dedicated_master_count must be 0 or 3 (an odd quorum of three)."
  }
}

variable "dedicated_master_type" {
  description = "Cluster-manager node type."
  type        = string
  default     = "m7g.large.search"
}

variable "volume_gb" {
  description = "EBS gp3 volume per data node."
  type        = number
  default     = 50
}

variable "vpc_id" {
  description = "VPC of the domain."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets; the first one (or one per AZ with zone awareness) is used."
  type        = list(string)
}

variable "client_security_group_id" {
  description = "Security group allowed to reach the domain on 443 (the EKS cluster security group)."
  type        = string
}

variable "client_role_arns" {
  description = "IAM roles allowed es:ESHttp* (the retrieval service's IRSA role)."
  type        = list(string)
}

variable "master_role_arn" {
  description = "IAM role mapped to the fine-grained access control master user (index and role admin)."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key encrypting the domain at rest and its log groups."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
