# IRSA roles: each one trusts exactly one Kubernetes service account of the cluster's OIDC issuer.
#   retrieval          es:ESHttp* on the domain (SigV4; also the domain's fine-grained master user,
#                      because it creates Rampart's indexes and aliases)
#   cluster-autoscaler scales the managed node groups (GPU groups from zero)
#   external-secrets   reads the Redis users' passwords from Secrets Manager into the chart's Secrets
#   ebs-csi            volumes for the ingest journal (StatefulSet)

data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}
data "aws_region" "current" {}

locals {
  partition  = data.aws_partition.current.partition
  account_id = data.aws_caller_identity.current.account_id
  region     = data.aws_region.current.region
  service_accounts = {
    retrieval          = { namespace = var.namespace, name = "rampart-retrieval" }
    cluster-autoscaler = { namespace = "kube-system", name = "cluster-autoscaler" }
    external-secrets   = { namespace = "external-secrets", name = "external-secrets" }
    ebs-csi            = { namespace = "kube-system", name = "ebs-csi-controller-sa" }
  }
}

data "aws_iam_policy_document" "trust" {
  for_each = local.service_accounts
  statement {
    actions = ["sts:AssumeRoleWithWebIdentity"]
    principals {
      type        = "Federated"
      identifiers = [var.oidc_provider_arn]
    }
    condition {
      test     = "StringEquals"
      variable = "${var.oidc_issuer}:sub"
      values   = ["system:serviceaccount:${each.value.namespace}:${each.value.name}"]
    }
    condition {
      test     = "StringEquals"
      variable = "${var.oidc_issuer}:aud"
      values   = ["sts.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "this" {
  for_each           = local.service_accounts
  name               = "${var.name}-${each.key}"
  assume_role_policy = data.aws_iam_policy_document.trust[each.key].json
  tags               = var.tags
}

data "aws_iam_policy_document" "retrieval" {
  statement {
    actions   = ["es:ESHttpGet", "es:ESHttpHead", "es:ESHttpPost", "es:ESHttpPut", "es:ESHttpDelete"]
    resources = ["arn:${local.partition}:es:${local.region}:${local.account_id}:domain/${var.opensearch_domain}/*"]
  }
}

data "aws_iam_policy_document" "cluster_autoscaler" {
  statement {
    actions = [
      "autoscaling:DescribeAutoScalingGroups",
      "autoscaling:DescribeAutoScalingInstances",
      "autoscaling:DescribeLaunchConfigurations",
      "autoscaling:DescribeScalingActivities",
      "autoscaling:DescribeTags",
      "ec2:DescribeImages",
      "ec2:DescribeInstanceTypes",
      "ec2:DescribeLaunchTemplateVersions",
      "ec2:GetInstanceTypesFromInstanceRequirements",
    ]
    resources = ["*"] # these Describe/Get calls support no resource-level permissions
  }
  statement {
    actions   = ["eks:DescribeNodegroup"]
    resources = ["arn:${local.partition}:eks:${local.region}:${local.account_id}:nodegroup/${var.cluster_name}/*/*"]
  }
  statement {
    actions   = ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"]
    resources = ["*"]
    # only the ASGs of this cluster's node groups (EKS tags them with the cluster name)
    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/eks:cluster-name"
      values   = [var.cluster_name]
    }
  }
}

data "aws_iam_policy_document" "external_secrets" {
  statement {
    actions   = ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
    resources = var.readable_secret_arns
  }
  statement {
    actions   = ["kms:Decrypt"]
    resources = [var.kms_key_arn]
  }
}

resource "aws_iam_role_policy" "retrieval" {
  name   = "opensearch-http"
  role   = aws_iam_role.this["retrieval"].id
  policy = data.aws_iam_policy_document.retrieval.json
}

resource "aws_iam_role_policy" "cluster_autoscaler" {
  name   = "scale-node-groups"
  role   = aws_iam_role.this["cluster-autoscaler"].id
  policy = data.aws_iam_policy_document.cluster_autoscaler.json
}

resource "aws_iam_role_policy" "external_secrets" {
  name   = "read-rampart-secrets"
  role   = aws_iam_role.this["external-secrets"].id
  policy = data.aws_iam_policy_document.external_secrets.json
}

resource "aws_iam_role_policy_attachment" "ebs_csi" {
  role       = aws_iam_role.this["ebs-csi"].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
}
