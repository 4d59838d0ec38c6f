output "budget_names" {
  description = "Names of the budgets."
  value       = [for b in aws_budgets_budget.this : b.name]
}
