variable "region" {
  description = "AWS region."
  type        = string
  default     = "eu-west-1"
}

variable "name" {
  description = "Name prefix for the resources."
  type        = string
  default     = "strata"
}

variable "vpc_id" {
  description = "An existing VPC."
  type        = string
}

variable "subnet_ids" {
  description = "Three private subnets in three availability zones, with a route to S3 (an S3 gateway endpoint or a NAT gateway) and to the Secrets Manager/SSM APIs if used."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) == 3
    error_message = "This example wants exactly three subnets, one per availability zone."
  }
}

variable "client_cidr_blocks" {
  description = "CIDRs of the Kafka clients (e.g. the VPC's CIDR)."
  type        = list(string)
}

variable "admin_cidr_blocks" {
  description = "CIDRs allowed to scrape /metrics (e.g. your Prometheus). Empty: admin port closed."
  type        = list(string)
  default     = []
}

variable "broker_count" {
  description = "1 (default) is one cluster behind the NLB. 3 puts one broker in each AZ, but until clustering lands (issue 8) that is three independent single-node clusters and the NLB is left out."
  type        = number
  default     = 1
}

variable "instance_type" {
  description = "An instance type with NVMe instance storage."
  type        = string
  default     = "i4i.large"
}

variable "bucket_name" {
  description = "Name of the new bucket for tiered data (globally unique)."
  type        = string
}

variable "strata_binary_url" {
  description = "s3://bucket/key or https:// URL of a Linux strata binary for the instance type's architecture."
  type        = string
}

variable "strata_binary_sha256" {
  description = "sha256sum of that binary."
  type        = string
}
