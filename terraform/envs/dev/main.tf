# dev: one NAT gateway, a single-node OpenSearch domain, Redis without replicas, a GPU Spot group of at
# most one node. Compose the modules only; every choice of substance lives in a module.

locals {
  name      = "rampart-${var.env}"
  namespace = "rampart"
  tags = {
    "rampart:env" = var.env
    project       = "rampart"
    managed-by    = "terraform"
  }
}

data "aws_caller_identity" "current" {}

# One customer-managed key per environment: Kubernetes Secrets, volumes, logs, OpenSearch, Redis, ECR.
data "aws_iam_policy_document" "kms" {
  # A key policy's "*" resource means this key only, and an account must administer its own key:
  #checkov:skip=CKV_AWS_111:key policy; "*" is the key itself, and the account root must keep admin rights
  #checkov:skip=CKV_AWS_356:key policy; "*" is the key itself
  #checkov:skip=CKV_AWS_109:key policy; the account root must be able to manage the key (AWS default policy)
  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"] # in a key policy, "*" is this key
    principals {
      type        = "AWS"
      identifiers = ["arn:aws:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
  statement {
    sid       = "CloudWatchLogsEncrypt"
    actions   = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
    resources = ["*"]
    principals {
      type        = "Service"
      identifiers = ["logs.${var.region}.amazonaws.com"]
    }
  }
  # EC2 Auto Scaling launches the node groups' instances with this key's encrypted volumes: without
  # these grants an instance fails to start (Client.InternalError) and the group never gets nodes.
  statement {
    sid       = "AutoScalingUsesKeyForNodeVolumes"
    actions   = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:aws:iam::${data.aws_caller_identity.current.account_id}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"]
    }
  }
  statement {
    sid       = "AutoScalingGrantsForNodeVolumes"
    actions   = ["kms:CreateGrant"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:aws:iam::${data.aws_caller_identity.current.account_id}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"]
    }
    condition {
      test     = "Bool"
      variable = "kms:GrantIsForAWSResource"
      values   = ["true"]
    }
  }
}

resource "aws_kms_key" "this" {
  description             = "${local.name}: secrets, volumes, logs, OpenSearch, Redis, ECR"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.kms.json
  tags                    = local.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${local.name}"
  target_key_id = aws_kms_key.this.key_id
}

module "network" {
  source             = "../../modules/network"
  name               = local.name
  cidr               = var.vpc_cidr
  azs                = var.azs
  single_nat_gateway = var.single_nat_gateway
  kms_key_arn        = aws_kms_key.this.arn
  tags               = local.tags
}

module "eks" {
  source                  = "../../modules/eks"
  name                    = local.name
  kubernetes_version      = var.kubernetes_version
  subnet_ids              = module.network.private_subnet_ids
  public_access_cidrs     = var.api_public_access_cidrs
  kms_key_arn             = aws_kms_key.this.arn
  cpu_instance_types      = var.cpu_instance_types
  cpu_min                 = var.cpu_min
  cpu_max                 = var.cpu_max
  gpu_spot_instance_types = var.gpu_spot_instance_types
  gpu_spot_desired        = var.gpu_spot_desired
  gpu_spot_max            = var.gpu_spot_max
  gpu_ondemand_max        = var.gpu_ondemand_max
  tags                    = local.tags
}

module "ecr" {
  source      = "../../modules/ecr"
  kms_key_arn = aws_kms_key.this.arn
  tags        = local.tags
}

module "redis" {
  source                   = "../../modules/redis"
  name                     = local.name
  node_type                = var.redis_node_type
  replicas                 = var.redis_replicas
  vpc_id                   = module.network.vpc_id
  subnet_ids               = module.network.private_subnet_ids
  client_security_group_id = module.eks.cluster_security_group_id
  kms_key_arn              = aws_kms_key.this.arn
  tags                     = local.tags
}

module "iam" {
  source               = "../../modules/iam"
  name                 = local.name
  namespace            = local.namespace
  cluster_name         = module.eks.cluster_name
  oidc_provider_arn    = module.eks.oidc_provider_arn
  oidc_issuer          = module.eks.oidc_issuer
  opensearch_domain    = local.name
  readable_secret_arns = values(module.redis.user_secret_arns)
  kms_key_arn          = aws_kms_key.this.arn
  tags                 = local.tags
}

module "opensearch" {
  source                   = "../../modules/opensearch"
  name                     = local.name
  instance_type            = var.opensearch_instance_type
  instance_count           = var.opensearch_instance_count
  dedicated_master_count   = var.opensearch_dedicated_master_count
  volume_gb                = var.opensearch_volume_gb
  vpc_id                   = module.network.vpc_id
  subnet_ids               = module.network.private_subnet_ids
  client_security_group_id = module.eks.cluster_security_group_id
  client_role_arns         = [module.iam.role_arns["retrieval"]]
  master_role_arn          = module.iam.role_arns["retrieval"]
  kms_key_arn              = aws_kms_key.this.arn
  tags                     = local.tags
}

# The EBS CSI driver (ingest journal volumes) with its IRSA role.
resource "aws_eks_addon" "ebs_csi" {
  cluster_name             = module.eks.cluster_name
  addon_name               = "aws-ebs-csi-driver"
  service_account_role_arn = module.iam.role_arns["ebs-csi"]
  tags                     = local.tags
}

module "budgets" {
  source                = "../../modules/budgets"
  name                  = local.name
  monthly_limit_usd     = var.monthly_budget_usd
  gpu_monthly_limit_usd = var.gpu_monthly_budget_usd
  cost_tag_value        = var.env
  alert_emails          = var.budget_alert_emails
  tags                  = local.tags
}
