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
  description = "3 (default) is one cluster with a broker in each AZ (replication factor 3, min.insync.replicas 2); more brokers join the same cluster (the first 3 stay the metadata quorum). 1 is a single node."
  type        = number
  default     = 3
  validation {
    condition     = var.broker_count == 1 || var.broker_count >= 3
    error_message = "broker_count must be 1 (a single node) or at least 3 (one cluster): two brokers would be independent clusters behind one NLB."
  }
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
