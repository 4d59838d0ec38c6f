# `helm_values` mirrors the chart's values.yaml (deploy/helm/rampart): write it to a file and pass it
# after the profile, so the managed endpoints and roles come from here and nothing is copied by hand:
#   terraform output -json helm_values > ../../../out/deploy/tf-values-${env}.json
#   helm upgrade --install rampart deploy/helm/rampart -n rampart \
#     -f deploy/helm/rampart/values-eks.yaml -f out/deploy/tf-values-${env}.json
# tests/unit/test_deploy_terraform.py checks that every key path below exists in the chart's values.

output "helm_values" {
  description = "Values for the Rampart chart: registry, managed endpoints, IRSA roles, the VPC CIDR for NetworkPolicies."
  value = {
    global = {
      imageRegistry = module.ecr.registry
    }
    endpoints = {
      opensearch = {
        url       = module.opensearch.endpoint
        awsSigv4  = true
        awsRegion = var.region
      }
      redis = {
        host = module.redis.host
        port = module.redis.port
        tls  = true
      }
    }
    serviceAccounts = {
      retrieval = {
        annotations = {
          "eks.amazonaws.com/role-arn" = module.iam.role_arns["retrieval"]
        }
      }
    }
    networkPolicy = {
      managedCidr = module.network.vpc_cidr
    }
  }
}

output "cluster_name" {
  description = "EKS cluster name (aws eks update-kubeconfig --name ...)."
  value       = module.eks.cluster_name
}

output "redis_user_secret_arns" {
  description = "Secrets Manager secret of each Redis role's password, by role (External Secrets sources: Kubernetes Secret rampart-redis-<role>)."
  value       = module.redis.user_secret_arns
}

output "irsa_role_arns" {
  description = "IRSA role per add-on service account (cluster-autoscaler, external-secrets, ebs-csi)."
  value       = module.iam.role_arns
}
