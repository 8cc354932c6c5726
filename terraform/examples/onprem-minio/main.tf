# Strata brokers on EC2 whose tiered data lives on a MinIO you already run (on premises,
# reached over VPN/Direct Connect, or inside the VPC). The bucket is created through the AWS
# provider pointed at MinIO; credentials come from AWS Secrets Manager, both for Terraform and
# for the brokers. See README.md.

provider "aws" {
  region = var.region
  default_tags {
    tags = {
      "managed-by" = "terraform"
      "app"        = "strata"
    }
  }
}

data "aws_secretsmanager_secret_version" "minio_admin" {
  secret_id = var.minio_admin_secret_arn
}

locals {
  minio_admin = jsondecode(data.aws_secretsmanager_secret_version.minio_admin.secret_string)
  minio_port = tonumber(try(
    regex("^https?://[^/:]+:([0-9]+)$", var.minio_endpoint)[0],
    startswith(var.minio_endpoint, "https://") ? "443" : "80",
  ))
}

# The AWS provider talking to MinIO: custom S3 endpoint, path-style requests, and none of the
# AWS account/region lookups MinIO cannot answer.
provider "aws" {
  alias                       = "minio"
  region                      = var.minio_region
  access_key                  = local.minio_admin.access_key_id
  secret_key                  = local.minio_admin.secret_access_key
  s3_use_path_style           = true
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true

  endpoints {
    s3 = var.minio_endpoint
  }
}

module "bucket" {
  source      = "../../modules/minio-bucket"
  bucket_name = var.bucket_name
  providers = {
    aws = aws.minio
  }
}

module "brokers" {
  source = "../../modules/strata-broker"

  name         = var.name
  broker_count = var.broker_count
  vpc_id       = var.vpc_id
  subnet_ids   = var.subnet_ids

  strata_binary_url    = var.strata_binary_url
  strata_binary_sha256 = var.strata_binary_sha256

  client_cidr_blocks = var.client_cidr_blocks
  egress_rules = [
    {
      description = "HTTPS to AWS APIs (Secrets Manager, SSM) and the binary download"
      port        = 443
      cidr_blocks = ["0.0.0.0/0"]
    },
    {
      description = "MinIO"
      port        = local.minio_port
      cidr_blocks = var.minio_cidr_blocks
    },
  ]

  bucket_name   = module.bucket.bucket_name
  bucket_region = var.minio_region
  s3_endpoint   = var.minio_endpoint
  s3_path_style = true
  s3_credentials = {
    secretsmanager_secret_arn = var.broker_secret_arn
  }
}
