# Strata on AWS across three availability zones: an S3 bucket for tiered data and one Strata
# cluster of brokers on NVMe instance-store instances in three private subnets (one per AZ,
# broker.rack = AZ, so replicas are spread over the zones), with an internal NLB as the
# bootstrap address. See README.md for the commands and the cost.

provider "aws" {
  region = var.region
  default_tags {
    tags = {
      "managed-by" = "terraform"
      "app"        = "strata"
    }
  }
}

module "bucket" {
  source      = "../../modules/strata-bucket"
  bucket_name = var.bucket_name
}

module "brokers" {
  source = "../../modules/strata-broker"

  name         = var.name
  broker_count = var.broker_count
  vpc_id       = var.vpc_id
  subnet_ids   = var.subnet_ids

  instance_type        = var.instance_type
  strata_binary_url    = var.strata_binary_url
  strata_binary_sha256 = var.strata_binary_sha256

  client_cidr_blocks = var.client_cidr_blocks
  admin_cidr_blocks  = var.admin_cidr_blocks
  enable_nlb         = true

  bucket_name   = module.bucket.bucket_name
  bucket_region = module.bucket.bucket_region
  bucket_prefix = "strata"

  extra_config = {
    "log.retention.hours" = "168"
    "num.partitions"      = "6"
  }
}
