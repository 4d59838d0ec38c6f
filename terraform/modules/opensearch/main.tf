# Amazon OpenSearch Service in the VPC. k-NN is part of every OpenSearch Service domain (no plugin to
# install); Rampart's index uses the Lucene engine (RAMPART_OPENSEARCH__KNN_ENGINE=lucene, the
# default) and could use faiss here, which the service ships natively.
# Access: fine-grained access control with IAM as the only identity — the retrieval service signs its
# requests with SigV4 from its IRSA role (RAMPART_OPENSEARCH__AWS_SIGV4=true), so no password exists.

data "aws_caller_identity" "current" {}
data "aws_region" "current" {}

resource "aws_security_group" "this" {
  name        = "${var.name}-opensearch"
  description = "HTTPS to the OpenSearch domain from the EKS nodes only"
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_vpc_security_group_ingress_rule" "https" {
  security_group_id            = aws_security_group.this.id
  description                  = "HTTPS from the EKS cluster security group (the retrieval pods)"
  referenced_security_group_id = var.client_security_group_id
  ip_protocol                  = "tcp"
  from_port                    = 443
  to_port                      = 443
}

resource "aws_cloudwatch_log_group" "this" {
  for_each          = toset(["INDEX_SLOW_LOGS", "SEARCH_SLOW_LOGS", "ES_APPLICATION_LOGS", "AUDIT_LOGS"])
  name              = "/aws/opensearch/${var.name}/${lower(each.key)}"
  retention_in_days = 365
  kms_key_id        = var.kms_key_arn
  tags              = var.tags
}

data "aws_iam_policy_document" "logs" {
  statement {
    actions   = ["logs:PutLogEvents", "logs:CreateLogStream"]
    resources = [for g in aws_cloudwatch_log_group.this : "${g.arn}:*"]
    principals {
      type        = "Service"
      identifiers = ["es.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

resource "aws_cloudwatch_log_resource_policy" "this" {
  policy_name     = "${var.name}-opensearch-logs"
  policy_document = data.aws_iam_policy_document.logs.json
}

data "aws_iam_policy_document" "access" {
  statement {
    actions   = ["es:ESHttp*"]
    resources = ["arn:aws:es:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:domain/${var.name}/*"]
    principals {
      type        = "AWS"
      identifiers = var.client_role_arns
    }
  }
}

resource "aws_opensearch_domain" "this" {
  # dev runs one data node and no cluster managers (about a fifth of prod's cost); prod sets
  # dedicated_master_count = 3 and three data nodes over three AZs (envs/prod)
  #checkov:skip=CKV_AWS_318:dedicated cluster managers are a variable: 3 in prod, 0 in dev to save cost
  #checkov:skip=CKV2_AWS_59:dedicated cluster managers are a variable: 3 in prod, 0 in dev to save cost
  domain_name    = var.name
  engine_version = var.engine_version

  cluster_config {
    instance_type            = var.instance_type
    instance_count           = var.instance_count
    zone_awareness_enabled   = var.instance_count > 1
    dedicated_master_enabled = var.dedicated_master_count > 0
    dedicated_master_type    = var.dedicated_master_count > 0 ? var.dedicated_master_type : null
    dedicated_master_count   = var.dedicated_master_count > 0 ? var.dedicated_master_count : null
    dynamic "zone_awareness_config" {
      for_each = var.instance_count > 1 ? [1] : []
      content {
        availability_zone_count = min(var.instance_count, length(var.subnet_ids), 3)
      }
    }
  }

  ebs_options {
    ebs_enabled = true
    volume_type = "gp3"
    volume_size = var.volume_gb
  }

  vpc_options {
    subnet_ids         = slice(var.subnet_ids, 0, var.instance_count > 1 ? min(var.instance_count, length(var.subnet_ids), 3) : 1)
    security_group_ids = [aws_security_group.this.id]
  }

  encrypt_at_rest {
    enabled    = true
    kms_key_id = var.kms_key_arn
  }

  node_to_node_encryption {
    enabled = true
  }

  domain_endpoint_options {
    enforce_https       = true
    tls_security_policy = "Policy-Min-TLS-1-2-PFS-2023-10"
  }

  advanced_security_options {
    enabled                        = true
    anonymous_auth_enabled         = false
    internal_user_database_enabled = false
    master_user_options {
      master_user_arn = var.master_role_arn
    }
  }

  log_publishing_options {
    enabled                  = true
    log_type                 = "INDEX_SLOW_LOGS"
    cloudwatch_log_group_arn = aws_cloudwatch_log_group.this["INDEX_SLOW_LOGS"].arn
  }
  log_publishing_options {
    enabled                  = true
    log_type                 = "SEARCH_SLOW_LOGS"
    cloudwatch_log_group_arn = aws_cloudwatch_log_group.this["SEARCH_SLOW_LOGS"].arn
  }
  log_publishing_options {
    enabled                  = true
    log_type                 = "ES_APPLICATION_LOGS"
    cloudwatch_log_group_arn = aws_cloudwatch_log_group.this["ES_APPLICATION_LOGS"].arn
  }
  log_publishing_options {
    enabled                  = true
    log_type                 = "AUDIT_LOGS"
    cloudwatch_log_group_arn = aws_cloudwatch_log_group.this["AUDIT_LOGS"].arn
  }

  access_policies = data.aws_iam_policy_document.access.json
  tags            = var.tags
  depends_on      = [aws_cloudwatch_log_resource_policy.this]
}
