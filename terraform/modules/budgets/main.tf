# A monthly cost budget for the environment (filtered by its cost-allocation tag) and a separate one
# for EC2 Spot+on-demand GPU usage, each alerting by e-mail at 80% actual and 100% forecast.

resource "aws_budgets_budget" "this" {
  for_each = {
    total = { limit = var.monthly_limit_usd, filters = [] }
    gpu   = { limit = var.gpu_monthly_limit_usd, filters = ["Amazon Elastic Compute Cloud - Compute"] }
  }

  name         = "${var.name}-${each.key}"
  budget_type  = "COST"
  limit_amount = tostring(each.value.limit)
  limit_unit   = "USD"
  time_unit    = "MONTHLY"

  cost_filter {
    name   = "TagKeyValue"
    values = [format("user:%s$%s", var.cost_tag_key, var.cost_tag_value)]
  }

  dynamic "cost_filter" {
    for_each = length(each.value.filters) > 0 ? [1] : []
    content {
      name   = "Service"
      values = each.value.filters
    }
  }

  notification {
    comparison_operator        = "GREATER_THAN"
    threshold                  = 80
    threshold_type             = "PERCENTAGE"
    notification_type          = "ACTUAL"
    subscriber_email_addresses = var.alert_emails
  }

  notification {
    comparison_operator        = "GREATER_THAN"
    threshold                  = 100
    threshold_type             = "PERCENTAGE"
    notification_type          = "FORECASTED"
    subscriber_email_addresses = var.alert_emails
  }

  tags = var.tags
}
