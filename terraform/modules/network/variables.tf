variable "name" {
  description = "Name prefix of every resource (e.g. rampart-dev)."
  type        = string
}

variable "cidr" {
  description = "VPC CIDR; a /16 leaves room for three /20 public and three /20 private subnets."
  type        = string
  default     = "10.40.0.0/16"
}

variable "azs" {
  description = "Availability zones by name (2 or 3), pinned so the subnets never move when AWS adds one."
  type        = list(string)
  validation {
    condition     = length(var.azs) >= 2 && length(var.azs) <= 3
    error_message = "azs must name 2 or 3 zones (EKS needs subnets in at least two AZs)."
  }
}

variable "single_nat_gateway" {
  description = "One NAT gateway for all AZs (dev: saves ~$65/month per gateway; one AZ outage cuts egress)."
  type        = bool
  default     = false
}

variable "kms_key_arn" {
  description = "KMS key encrypting the flow-log group."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
