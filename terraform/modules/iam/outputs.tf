output "role_arns" {
  description = "IRSA role ARN per service account (retrieval, cluster-autoscaler, external-secrets, ebs-csi)."
  value       = { for k, r in aws_iam_role.this : k => r.arn }
}
