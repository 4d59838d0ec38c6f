# ElastiCache (Redis OSS engine) for the Celery broker and result backend, the fact-check evidence cache
# and the conversation sessions. TLS in transit and authentication are both required by Rampart's
# threat model (DESIGN 8b, docs/security.md): RBAC with one user per role, as the in-cluster Redis of
# the chart has (redisUsers), the rules of services/common/redis_server.ROLE_RULES (the tests keep the
# three equal), and the `default` user off. Each role's password is generated here and stored in
# Secrets Manager (KMS-encrypted); External Secrets copies it into the Kubernetes Secret the chart
# names for that role (rampart-redis-<role>, key password; deploy/helm/README.md).

locals {
  # services/common/redis_server.ROLE_RULES, verbatim (tests/integration/test_deploy_terraform.py)
  role_rules = {
    gateway      = "~rampart:ratelimit:* ~rampart:feedback:* resetchannels +@all -@admin -@dangerous"
    orchestrator = "~* &* +@all -@admin -flushall -flushdb"
    worker       = "~* &* +@all -@admin -flushall -flushdb"
  }
}

resource "random_password" "role" {
  for_each = toset(var.roles)
  length   = 64
  special  = false # ElastiCache allows only some punctuation, and the password goes into a URL
}

# ElastiCache needs a user named default in every user group: this one is off, so a connection that
# does not log in as a role can do nothing. Its password is never handed out.
resource "random_password" "default" {
  length  = 64
  special = false
}

resource "aws_elasticache_user" "default" {
  user_id       = "${var.name}-default"
  user_name     = "default"
  engine        = "redis"
  access_string = "off -@all"
  authentication_mode {
    type      = "password"
    passwords = [random_password.default.result]
  }
  tags = var.tags
}

resource "aws_elasticache_user" "role" {
  for_each      = toset(var.roles)
  user_id       = "${var.name}-${each.key}"
  user_name     = each.key
  engine        = "redis"
  access_string = "on ${local.role_rules[each.key]}"
  authentication_mode {
    type      = "password"
    passwords = [random_password.role[each.key].result]
  }
  tags = var.tags
}

resource "aws_elasticache_user_group" "this" {
  user_group_id = var.name
  engine        = "redis"
  user_ids      = concat([aws_elasticache_user.default.user_id], [for u in aws_elasticache_user.role : u.user_id])
  tags          = var.tags
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
  user_group_ids             = [aws_elasticache_user_group.this.user_group_id]
  snapshot_retention_limit   = var.snapshot_retention_days
  auto_minor_version_upgrade = true
  apply_immediately          = false
  tags                       = var.tags
}

resource "aws_secretsmanager_secret" "role" {
  # Rotation is a Terraform change, not a Lambda: replace the role's random_password and apply, then
  # restart the role's pods once External Secrets has copied it (docs/deploy.md, "Secrets rotation")
  #checkov:skip=CKV2_AWS_57:rotated by terraform apply (replace random_password.role), no rotation Lambda
  for_each    = toset(var.roles)
  name        = "${var.name}/redis-${each.key}"
  description = "Password of the ${var.name} ElastiCache user ${each.key} (Kubernetes Secret rampart-redis-${each.key}, key password)"
  kms_key_id  = var.kms_key_arn
  tags        = var.tags
}

resource "aws_secretsmanager_secret_version" "role" {
  for_each      = toset(var.roles)
  secret_id     = aws_secretsmanager_secret.role[each.key].id
  secret_string = random_password.role[each.key].result
}
