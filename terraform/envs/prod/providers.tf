terraform {
  required_version = ">= 1.11.0"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.7"
    }
  }
  # State in S3 with S3-native locking; bucket, key and region come from `terraform init
  # -backend-config=backend.hcl` (terraform/README.md), so no account detail is committed.
  backend "s3" {
    use_lockfile = true
    encrypt      = true
  }
}

provider "aws" {
  region = var.region
  default_tags {
    tags = {
      project = "rampart"
      env     = var.env
    }
  }
}
