variable "name" {
  description = "Cluster name (e.g. rampart-dev)."
  type        = string
}

variable "kubernetes_version" {
  description = "EKS Kubernetes version; pin it and upgrade on purpose (docs/deploy.md, upgrades)."
  type        = string
  default     = "1.33"
}

variable "subnet_ids" {
  description = "Private subnets of the nodes and the control plane's network interfaces."
  type        = list(string)
}

variable "public_access_cidrs" {
  description = "CIDRs allowed to reach the public API endpoint; empty: private endpoint only."
  type        = list(string)
  default     = []
}

variable "kms_key_arn" {
  description = "KMS key for Kubernetes Secrets envelope encryption, node volumes and the log group."
  type        = string
}

variable "node_disk_gb" {
  description = "Root volume per node; GPU nodes pull the Triton image (several GB)."
  type        = number
  default     = 100
}

variable "cpu_instance_types" {
  description = "On-demand CPU node types (gateway, orchestrator, retrieval, ingest, workers)."
  type        = list(string)
  default     = ["m7i.xlarge", "m6i.xlarge"]
}

variable "cpu_min" {
  description = "Least CPU nodes."
  type        = number
  default     = 2
}

variable "cpu_max" {
  description = "Most CPU nodes."
  type        = number
  default     = 6
}

variable "gpu_spot_instance_types" {
  description = "Spot GPU types for Triton; several families and sizes widen the Spot pools EKS can draw from."
  type        = list(string)
  default     = ["g6.xlarge", "g5.xlarge", "g6.2xlarge", "g5.2xlarge"]
}

variable "gpu_spot_desired" {
  description = "GPU Spot nodes at creation (the autoscaler owns the count afterwards)."
  type        = number
  default     = 1
}

variable "gpu_spot_max" {
  description = "Most GPU Spot nodes."
  type        = number
  default     = 2
}

variable "gpu_ondemand_instance_types" {
  description = "On-demand GPU types of the fallback group (0 nodes unless Spot is gone)."
  type        = list(string)
  default     = ["g6.xlarge", "g5.xlarge"]
}

variable "gpu_ondemand_max" {
  description = "Most on-demand GPU nodes."
  type        = number
  default     = 1
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
