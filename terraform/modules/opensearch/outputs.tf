output "endpoint" {
  description = "HTTPS URL of the domain (RAMPART_OPENSEARCH__URL)."
  value       = "https://${aws_opensearch_domain.this.endpoint}"
}

output "domain_arn" {
  description = "ARN of the domain."
  value       = aws_opensearch_domain.this.arn
}
