# A bucket on an existing MinIO, created with the AWS provider pointed at MinIO (the caller
# passes a provider configured with endpoints.s3 = MinIO and s3_use_path_style = true; see
# examples/onprem-minio). No MinIO-specific provider is needed.
#
# What the AWS bucket module does that this one cannot, and what covers it on MinIO:
# - public access block: no such API on MinIO; MinIO buckets are private unless an anonymous
#   policy is set (`mc anonymous`), and this module sets none.
# - TLS-only bucket policy: TLS is the endpoint's property; give the brokers an https:// endpoint.
# - aborting incomplete multipart uploads: MinIO ignores AbortIncompleteMultipartUpload
#   lifecycle rules and purges stale uploads itself (api stale_uploads_expiry, default 24h).
# - SSE-KMS: MinIO's SSE-S3 with its own KMS (KES), see var.sse_enabled.

resource "aws_s3_bucket" "this" {
  #checkov:skip=CKV2_AWS_6:MinIO has no PutPublicAccessBlock API; its buckets are private unless an anonymous policy is set, and none is.
  #checkov:skip=CKV_AWS_18:MinIO has no S3 server access logging; use MinIO's audit log (audit_webhook / audit_kafka).
  #checkov:skip=CKV_AWS_144:Cross-region replication is an AWS S3 feature; MinIO site/bucket replication is configured with mc, outside Terraform.
  #checkov:skip=CKV_AWS_145:SSE-KMS with AWS KMS does not exist on MinIO; SSE-S3 through MinIO's own KMS is var.sse_enabled.
  #checkov:skip=CKV2_AWS_62:Nothing consumes bucket events: Strata finds its data through its own manifests.
  #checkov:skip=CKV2_AWS_61:MinIO ignores AbortIncompleteMultipartUpload lifecycle rules and purges stale multipart uploads itself (stale_uploads_expiry); Strata's retention deletes objects itself.
  bucket        = var.bucket_name
  force_destroy = var.force_destroy
}

resource "aws_s3_bucket_versioning" "this" {
  count  = var.versioning_enabled ? 1 : 0
  bucket = aws_s3_bucket.this.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  count  = var.sse_enabled ? 1 : 0
  bucket = aws_s3_bucket.this.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}
