output "host" {
  description = "Primary endpoint host (TLS on port 6379)."
  value       = aws_elasticache_replication_group.this.primary_endpoint_address
}

output "port" {
  description = "Redis port."
  value       = aws_elasticache_replication_group.this.port
}

output "auth_secret_arn" {
  description = "Secrets Manager secret holding the AUTH token (External Secrets reads it)."
  value       = aws_secretsmanager_secret.auth.arn
}
