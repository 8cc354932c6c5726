variable "region" {
  description = "AWS region of the brokers and of the secrets."
  type        = string
  default     = "eu-west-1"
}

variable "name" {
  description = "Name prefix for the resources."
  type        = string
  default     = "strata-minio"
}

variable "vpc_id" {
  description = "VPC whose subnets reach MinIO (VPN, Direct Connect, or MinIO running in the VPC)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets for the brokers (one per AZ)."
  type        = list(string)
}

variable "broker_count" {
  description = "1 (default): a single node. 3 or more: one Strata cluster whose brokers share the bucket prefix strata/cluster (cluster mode is the module's default from 3 brokers)."
  type        = number
  default     = 1
  validation {
    condition     = var.broker_count == 1 || var.broker_count >= 3
    error_message = "broker_count must be 1 (a single node) or at least 3 (one cluster)."
  }
}

variable "client_cidr_blocks" {
  description = "CIDRs of the Kafka clients."
  type        = list(string)
}

variable "minio_endpoint" {
  description = "MinIO's S3 endpoint, e.g. https://minio.example.internal:9000. Use https: the credentials and data cross your network."
  type        = string
  validation {
    condition     = can(regex("^https?://[^/]+$", var.minio_endpoint))
    error_message = "minio_endpoint must be scheme://host[:port] without a path."
  }
}

variable "minio_cidr_blocks" {
  description = "Addresses of the MinIO endpoint, for the brokers' egress rule."
  type        = list(string)
}

variable "minio_region" {
  description = "The region MinIO is configured with (MINIO_REGION; us-east-1 when unset)."
  type        = string
  default     = "us-east-1"
}

variable "minio_admin_secret_arn" {
  description = "Secrets Manager secret {\"access_key_id\": ..., \"secret_access_key\": ...} of a MinIO user that may create buckets; used by Terraform only."
  type        = string
}

variable "broker_secret_arn" {
  description = "Secrets Manager secret of the same shape for the MinIO user the brokers use (limited to the bucket by a MinIO policy). Read by each broker at start."
  type        = string
}

variable "bucket_name" {
  description = "Name of the bucket to create on MinIO."
  type        = string
  default     = "strata"
}

variable "strata_binary_url" {
  description = "s3://bucket/key (on AWS S3) or https:// URL of a Linux strata binary."
  type        = string
}

variable "strata_binary_sha256" {
  description = "sha256sum of that binary."
  type        = string
}
