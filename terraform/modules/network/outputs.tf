output "vpc_id" {
  description = "The VPC's id."
  value       = aws_vpc.this.id
}

output "vpc_cidr" {
  description = "The VPC's CIDR: the NetworkPolicies' ipBlock for managed endpoints inside it."
  value       = aws_vpc.this.cidr_block
}

output "private_subnet_ids" {
  description = "Private subnets (nodes, OpenSearch, ElastiCache)."
  value       = aws_subnet.private[*].id
}

output "private_subnet_cidrs" {
  description = "CIDRs of the private subnets."
  value       = aws_subnet.private[*].cidr_block
}

output "public_subnet_ids" {
  description = "Public subnets (NAT gateways, internet-facing load balancers)."
  value       = aws_subnet.public[*].id
}
