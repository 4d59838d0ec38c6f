# EKS with three managed node groups (terraform/README.md says why not Karpenter):
#   cpu          on-demand, every Rampart service but Triton;
#   gpu-spot     Spot g5/g6, tainted nvidia.com/gpu: only Triton tolerates it;
#   gpu-ondemand on-demand GPU at 0 nodes, tainted the same: the fallback Triton scales onto it only
#                while no Spot Triton is available (the chart's triton-ondemand ScaledObject).
# The Spot groups get Capacity Rebalancing from EKS itself: a node with a rebalance recommendation or
# a two-minute interruption notice is cordoned and drained (PDBs respected) before it goes.

data "aws_partition" "current" {}

data "aws_iam_policy_document" "cluster_assume" {
  statement {
    actions = ["sts:AssumeRole", "sts:TagSession"]
    principals {
      type        = "Service"
      identifiers = ["eks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "cluster" {
  name               = "${var.name}-eks-cluster"
  assume_role_policy = data.aws_iam_policy_document.cluster_assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "cluster" {
  role       = aws_iam_role.cluster.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AmazonEKSClusterPolicy"
}

resource "aws_cloudwatch_log_group" "cluster" {
  # EKS writes control-plane logs here; created first so retention and encryption are ours
  name              = "/aws/eks/${var.name}/cluster"
  retention_in_days = 365
  kms_key_id        = var.kms_key_arn
  tags              = var.tags
}

resource "aws_eks_cluster" "this" {
  name     = var.name
  version  = var.kubernetes_version
  role_arn = aws_iam_role.cluster.arn

  access_config {
    authentication_mode                         = "API"
    bootstrap_cluster_creator_admin_permissions = true
  }

  vpc_config {
    subnet_ids              = var.subnet_ids
    endpoint_private_access = true
    endpoint_public_access  = length(var.public_access_cidrs) > 0
    public_access_cidrs     = length(var.public_access_cidrs) > 0 ? var.public_access_cidrs : null
  }

  encryption_config {
    resources = ["secrets"]
    provider {
      key_arn = var.kms_key_arn
    }
  }

  enabled_cluster_log_types = ["api", "audit", "authenticator", "controllerManager", "scheduler"]

  tags       = var.tags
  depends_on = [aws_iam_role_policy_attachment.cluster, aws_cloudwatch_log_group.cluster]
}

# IRSA: the cluster's OIDC issuer as an IAM identity provider (the iam module's roles trust it).
resource "aws_iam_openid_connect_provider" "this" {
  url            = aws_eks_cluster.this.identity[0].oidc[0].issuer
  client_id_list = ["sts.amazonaws.com"]
  tags           = var.tags
}

# The VPC CNI enforces NetworkPolicies only when asked: the chart's default-deny policies need it.
resource "aws_eks_addon" "vpc_cni" {
  cluster_name                = aws_eks_cluster.this.name
  addon_name                  = "vpc-cni"
  resolve_conflicts_on_update = "OVERWRITE"
  configuration_values        = jsonencode({ enableNetworkPolicy = "true" })
  tags                        = var.tags
}

resource "aws_eks_addon" "coredns" {
  cluster_name                = aws_eks_cluster.this.name
  addon_name                  = "coredns"
  resolve_conflicts_on_update = "OVERWRITE"
  tags                        = var.tags
  depends_on                  = [aws_eks_node_group.cpu]
}

resource "aws_eks_addon" "kube_proxy" {
  cluster_name                = aws_eks_cluster.this.name
  addon_name                  = "kube-proxy"
  resolve_conflicts_on_update = "OVERWRITE"
  tags                        = var.tags
}

data "aws_iam_policy_document" "node_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "node" {
  name               = "${var.name}-eks-node"
  assume_role_policy = data.aws_iam_policy_document.node_assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "node" {
  for_each = toset([
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
  ])
  role       = aws_iam_role.node.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/${each.value}"
}

# One launch template for every group: IMDSv2 only with hop limit 1 (pods cannot borrow the node's
# role; they get IRSA roles instead) and encrypted root volumes.
resource "aws_launch_template" "node" {
  name_prefix = "${var.name}-node-"

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = var.node_disk_gb
      volume_type           = "gp3"
      encrypted             = true
      kms_key_id            = var.kms_key_arn
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(var.tags, { Name = "${var.name}-node" })
  }

  tags = var.tags
}

resource "aws_eks_node_group" "cpu" {
  cluster_name    = aws_eks_cluster.this.name
  node_group_name = "cpu-ondemand"
  node_role_arn   = aws_iam_role.node.arn
  subnet_ids      = var.subnet_ids
  capacity_type   = "ON_DEMAND"
  ami_type        = "AL2023_x86_64_STANDARD"
  instance_types  = var.cpu_instance_types

  scaling_config {
    min_size     = var.cpu_min
    desired_size = var.cpu_min
    max_size     = var.cpu_max
  }

  launch_template {
    id      = aws_launch_template.node.id
    version = aws_launch_template.node.latest_version
  }

  labels = { "rampart.io/pool" = "cpu" }

  update_config {
    max_unavailable = 1
  }

  lifecycle {
    ignore_changes = [scaling_config[0].desired_size] # the cluster autoscaler owns it
  }

  tags       = var.tags
  depends_on = [aws_iam_role_policy_attachment.node]
}

resource "aws_eks_node_group" "gpu" {
  for_each = {
    spot     = { capacity = "SPOT", types = var.gpu_spot_instance_types, max = var.gpu_spot_max }
    ondemand = { capacity = "ON_DEMAND", types = var.gpu_ondemand_instance_types, max = var.gpu_ondemand_max }
  }

  cluster_name    = aws_eks_cluster.this.name
  node_group_name = "gpu-${each.key}"
  node_role_arn   = aws_iam_role.node.arn
  subnet_ids      = var.subnet_ids
  capacity_type   = each.value.capacity
  ami_type        = "AL2023_x86_64_NVIDIA"
  instance_types  = each.value.types

  scaling_config {
    min_size     = 0
    desired_size = each.key == "spot" ? var.gpu_spot_desired : 0
    max_size     = each.value.max
  }

  launch_template {
    id      = aws_launch_template.node.id
    version = aws_launch_template.node.latest_version
  }

  labels = { "rampart.io/pool" = "gpu" }

  taint {
    key    = "nvidia.com/gpu"
    value  = "true"
    effect = "NO_SCHEDULE"
  }

  update_config {
    max_unavailable = 1
  }

  lifecycle {
    ignore_changes = [scaling_config[0].desired_size]
  }

  tags       = var.tags
  depends_on = [aws_iam_role_policy_attachment.node]
}

# The cluster autoscaler scales the GPU groups from zero only if the ASG says which labels and taints
# its future nodes carry (it cannot read them from a node that does not exist yet).
locals {
  gpu_asg_tags = merge([
    for key, group in aws_eks_node_group.gpu : {
      for tag_key, tag_value in {
        "k8s.io/cluster-autoscaler/node-template/label/rampart.io/pool"                = "gpu"
        "k8s.io/cluster-autoscaler/node-template/label/eks.amazonaws.com/capacityType" = group.capacity_type
        "k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu"                 = "true:NoSchedule"
        "k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"             = "1"
      } : "${key}/${tag_key}" => { asg = group.resources[0].autoscaling_groups[0].name, key = tag_key, value = tag_value }
    }
  ]...)
}

resource "aws_autoscaling_group_tag" "gpu_template" {
  for_each               = local.gpu_asg_tags
  autoscaling_group_name = each.value.asg
  tag {
    key                 = each.value.key
    value               = each.value.value
    propagate_at_launch = false
  }
}
