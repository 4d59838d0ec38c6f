output "registry" {
  description = "Registry host and prefix the chart pulls from (global.imageRegistry)."
  value       = split("/${var.prefix}/", values(aws_ecr_repository.this)[0].repository_url)[0]
}

output "repository_urls" {
  description = "URL per image."
  value       = { for k, r in aws_ecr_repository.this : k => r.repository_url }
}
