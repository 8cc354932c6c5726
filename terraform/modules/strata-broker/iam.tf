# The brokers' role: objects under the store prefixes in the one bucket (a cluster's shared
# <bucket_prefix>/cluster, or each independent broker's <bucket_prefix>/node-N), the binary
# object (when strata_binary_url is s3://), the credentials secret (S3-compatible stores), and
# optionally Session Manager. Nothing else.

locals {
  binary_s3_match = try(regex("^s3://([^/]+)/(.+)$", var.strata_binary_url), null)
  bucket_arn      = "arn:${data.aws_partition.current.partition}:s3:::${var.bucket_name}"
  # With static credentials (MinIO) the role needs no access to the store itself.
  role_reads_bucket = var.s3_credentials == null
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "broker" {
  dynamic "statement" {
    for_each = local.role_reads_bucket ? [1] : []
    content {
      sid       = "ListOwnPrefix"
      actions   = ["s3:ListBucket"]
      resources = [local.bucket_arn]
      condition {
        test     = "StringLike"
        variable = "s3:prefix"
        values   = [for p in local.store_prefixes : "${p}/*"]
      }
    }
  }

  dynamic "statement" {
    for_each = local.role_reads_bucket ? [1] : []
    content {
      sid = "ObjectsUnderOwnPrefix"
      actions = [
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
      ]
      resources = [for p in local.store_prefixes : "${local.bucket_arn}/${p}/*"]
    }
  }

  dynamic "statement" {
    for_each = local.role_reads_bucket && var.bucket_kms_key_arn != null ? [var.bucket_kms_key_arn] : []
    content {
      sid       = "BucketKmsKey"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = local.binary_s3_match == null ? [] : [local.binary_s3_match]
    content {
      sid       = "StrataBinary"
      actions   = ["s3:GetObject"]
      resources = ["arn:${data.aws_partition.current.partition}:s3:::${statement.value[0]}/${statement.value[1]}"]
    }
  }

  dynamic "statement" {
    for_each = local.credentials_source == "secretsmanager" ? [var.s3_credentials.secretsmanager_secret_arn] : []
    content {
      sid       = "StoreCredentialsSecret"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = local.credentials_source == "ssm" ? [1] : []
    content {
      sid     = "StoreCredentialsParameters"
      actions = ["ssm:GetParameter"]
      resources = [for p in [var.s3_credentials.ssm_access_key_id_parameter, var.s3_credentials.ssm_secret_access_key_parameter] :
        startswith(p, "arn:") ? p : "arn:${data.aws_partition.current.partition}:ssm:${local.region}:${data.aws_caller_identity.current.account_id}:parameter/${trimprefix(p, "/")}"
      ]
    }
  }

  dynamic "statement" {
    for_each = try(var.s3_credentials.kms_key_arn, null) != null ? [var.s3_credentials.kms_key_arn] : []
    content {
      sid       = "StoreCredentialsKmsKey"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
    }
  }
}

data "aws_caller_identity" "current" {}

resource "aws_iam_role" "broker" {
  name_prefix        = "${var.name}-broker-"
  description        = "Strata brokers ${var.name}: bucket ${var.bucket_name}, prefix ${var.bucket_prefix}/"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "broker" {
  name   = "strata-broker"
  role   = aws_iam_role.broker.id
  policy = data.aws_iam_policy_document.broker.json
}

resource "aws_iam_role_policy_attachment" "ssm" {
  count      = var.enable_ssm_session_manager ? 1 : 0
  role       = aws_iam_role.broker.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "broker" {
  name_prefix = "${var.name}-broker-"
  role        = aws_iam_role.broker.name
  tags        = local.tags
}
