# ElastiCache (Redis OSS engine) for the Celery broker and result backend, the fact-check evidence cache
# and the conversation sessions. TLS in transit and an AUTH token are both required by Rampart's
# threat model (DESIGN 8b): clients use rediss:// URLs with the token from the Secret.
# The token is generated here and stored in Secrets Manager (KMS-encrypted); the cluster reads it
# through External Secrets into the Kubernetes Secret the chart references (deploy/helm/README.md).


resource "random_password" "auth" {
  length  = 64
  special = false # ElastiCache allows only some punctuation, and the token goes into a URL
}

resource "aws_security_group" "this" {
  name        = "${var.name}-redis"
  description = "Redis TLS port from the EKS nodes only"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_vpc_security_group_ingress_rule" "redis" {
  security_group_id            = aws_security_group.this.id
  description                  = "Redis over TLS from the EKS cluster security group (orchestrator, workers, KEDA)"
  referenced_security_group_id = var.client_security_group_id
  ip_protocol                  = "tcp"
  from_port                    = 6379
  to_port                      = 6379
}

resource "aws_elasticache_subnet_group" "this" {
  name       = var.name
  subnet_ids = var.subnet_ids
  tags       = var.tags
}

resource "aws_elasticache_parameter_group" "this" {
  name   = "${var.name}-redis7"
  family = "redis7"
  # Celery's broker keys must never be evicted: refuse writes when full instead
  parameter {
    name  = "maxmemory-policy"
    value = "noeviction"
  }
  tags = var.tags
}

resource "aws_elasticache_replication_group" "this" {
  #checkov:skip=CKV2_AWS_50:failover needs a replica: variable, 1 in prod, 0 in dev (the broker's queue is transient)
  replication_group_id       = var.name
  description                = "Rampart broker, evidence cache and sessions"
  engine                     = "redis"
  engine_version             = var.engine_version
  node_type                  = var.node_type
  num_cache_clusters         = var.replicas + 1
  port                       = 6379
  parameter_group_name       = aws_elasticache_parameter_group.this.name
  subnet_group_name          = aws_elasticache_subnet_group.this.name
  security_group_ids         = [aws_security_group.this.id]
  automatic_failover_enabled = var.replicas > 0
  multi_az_enabled           = var.replicas > 0
  at_rest_encryption_enabled = true
  kms_key_id                 = var.kms_key_arn
  transit_encryption_enabled = true
  transit_encryption_mode    = "required"
  auth_token                 = random_password.auth.result
  auth_token_update_strategy = "ROTATE"
  snapshot_retention_limit   = var.snapshot_retention_days
  auto_minor_version_upgrade = true
  apply_immediately          = false
  tags                       = var.tags
}

resource "aws_secretsmanager_secret" "auth" {
  # Rotation is a Terraform change, not a Lambda: taint random_password.auth and apply; ElastiCache's
  # ROTATE strategy accepts old and new token until the pods restart with the new Secret (docs/deploy.md)
  #checkov:skip=CKV2_AWS_57:rotated by terraform apply with auth_token_update_strategy=ROTATE, no rotation Lambda
  name        = "${var.name}/redis-auth-token"
  description = "AUTH token of the ${var.name} ElastiCache group (Kubernetes Secret rampart-redis, key password)"
  kms_key_id  = var.kms_key_arn
  tags        = var.tags
}

resource "aws_secretsmanager_secret_version" "auth" {
  secret_id     = aws_secretsmanager_secret.auth.id
  secret_string = random_password.auth.result
}
