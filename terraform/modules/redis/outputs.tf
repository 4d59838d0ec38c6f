output "host" {
  description = "Primary endpoint host (TLS on port 6379)."
  value       = aws_elasticache_replication_group.this.primary_endpoint_address
}

output "port" {
  description = "Redis port."
  value       = aws_elasticache_replication_group.this.port
}

output "user_secret_arns" {
  description = "Secrets Manager secret of each role's password, by role (External Secrets reads them)."
  value       = { for role, s in aws_secretsmanager_secret.role : role => s.arn }
}
