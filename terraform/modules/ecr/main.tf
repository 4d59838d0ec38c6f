# One private repository per image of docker/ (issue 37): immutable tags, scan on push, KMS encryption,
# and a lifecycle that keeps the last N tagged images and drops untagged ones after a week.

resource "aws_ecr_repository" "this" {
  for_each             = toset(var.images)
  name                 = "${var.prefix}/${each.value}"
  image_tag_mutability = "IMMUTABLE"
  force_delete         = false

  image_scanning_configuration {
    scan_on_push = true
  }

  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = var.kms_key_arn
  }

  tags = var.tags
}

resource "aws_ecr_lifecycle_policy" "this" {
  for_each   = aws_ecr_repository.this
  repository = each.value.name
  policy = jsonencode({
    rules = [
      {
        rulePriority = 1
        description  = "drop untagged images after 7 days"
        selection    = { tagStatus = "untagged", countType = "sinceImagePushed", countUnit = "days", countNumber = 7 }
        action       = { type = "expire" }
      },
      {
        rulePriority = 2
        description  = "keep the last ${var.keep_tagged} images"
        selection    = { tagStatus = "any", countType = "imageCountMoreThan", countNumber = var.keep_tagged }
        action       = { type = "expire" }
      },
    ]
  })
}
