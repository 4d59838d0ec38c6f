variable "env" {
  description = "Environment name."
  type        = string
  default     = "prod"
}

variable "region" {
  description = "AWS region."
  type        = string
  default     = "eu-west-1"
}

variable "vpc_cidr" {
  description = "VPC CIDR."
  type        = string
  default     = "10.50.0.0/16"
}

variable "azs" {
  description = "Availability zones, named (pinned: the subnets never move when AWS adds a zone)."
  type        = list(string)
  default     = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
}

variable "single_nat_gateway" {
  description = "One NAT gateway for the VPC."
  type        = bool
  default     = false
}

variable "kubernetes_version" {
  description = "EKS version."
  type        = string
  default     = "1.33"
}

variable "api_public_access_cidrs" {
  description = "CIDRs allowed on the public API endpoint (your office/VPN); empty: private only."
  type        = list(string)
  default     = []
}

variable "cpu_instance_types" {
  description = "CPU node types."
  type        = list(string)
  default     = ["m7i.xlarge", "m6i.xlarge"]
}

variable "cpu_min" {
  description = "Least CPU nodes."
  type        = number
  default     = 3
}

variable "cpu_max" {
  description = "Most CPU nodes."
  type        = number
  default     = 10
}

variable "gpu_spot_instance_types" {
  description = "GPU Spot node types."
  type        = list(string)
  default     = ["g6.xlarge", "g5.xlarge", "g6.2xlarge", "g5.2xlarge"]
}

variable "gpu_spot_desired" {
  description = "GPU Spot nodes at creation."
  type        = number
  default     = 2
}

variable "gpu_spot_max" {
  description = "Most GPU Spot nodes."
  type        = number
  default     = 4
}

variable "gpu_ondemand_max" {
  description = "Most on-demand GPU fallback nodes."
  type        = number
  default     = 2
}

variable "redis_node_type" {
  description = "ElastiCache node type."
  type        = string
  default     = "cache.m7g.large"
}

variable "redis_replicas" {
  description = "ElastiCache replicas."
  type        = number
  default     = 1
}

variable "opensearch_instance_type" {
  description = "OpenSearch data node type."
  type        = string
  default     = "r7g.large.search"
}

variable "opensearch_instance_count" {
  description = "OpenSearch data nodes."
  type        = number
  default     = 3
}

variable "opensearch_dedicated_master_count" {
  description = "Dedicated cluster-manager nodes (0 or 3)."
  type        = number
  default     = 3
}

variable "opensearch_volume_gb" {
  description = "EBS per OpenSearch data node."
  type        = number
  default     = 100
}

variable "monthly_budget_usd" {
  description = "Monthly cost budget of the environment."
  type        = number
  default     = 6000
}

variable "gpu_monthly_budget_usd" {
  description = "Monthly EC2 compute budget."
  type        = number
  default     = 3000
}

variable "budget_alert_emails" {
  description = "Budget alert recipients."
  type        = list(string)
}
