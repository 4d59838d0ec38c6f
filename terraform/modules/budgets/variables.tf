variable "name" {
  description = "Budget name prefix."
  type        = string
}

variable "monthly_limit_usd" {
  description = "Monthly cost limit of everything tagged with the environment."
  type        = number
}

variable "gpu_monthly_limit_usd" {
  description = "Monthly EC2 compute limit (where the GPU nodes' cost lands)."
  type        = number
}

variable "cost_tag_key" {
  description = "Cost-allocation tag key (activate it in the Billing console)."
  type        = string
  default     = "rampart:env"
}

variable "cost_tag_value" {
  description = "Value of the tag for this environment."
  type        = string
}

variable "alert_emails" {
  description = "Addresses alerted at 80% actual and 100% forecast."
  type        = list(string)
}

variable "tags" {
  description = "Tags added to the budgets."
  type        = map(string)
  default     = {}
}
