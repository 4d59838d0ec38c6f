variable "prefix" {
  description = "Repository name prefix (registry/<prefix>/<image>)."
  type        = string
  default     = "rampart"
}

variable "images" {
  description = "Images of docker/: one repository each."
  type        = list(string)
  default     = ["gateway", "orchestrator", "retrieval", "ingest", "worker", "triton"]
}

variable "keep_tagged" {
  description = "Tagged images kept per repository (rollback depth)."
  type        = number
  default     = 30
}

variable "kms_key_arn" {
  description = "KMS key encrypting the images."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
