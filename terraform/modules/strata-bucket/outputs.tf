output "bucket_name" {
  description = "The bucket's name."
  value       = aws_s3_bucket.this.id
}

output "bucket_arn" {
  description = "The bucket's ARN."
  value       = aws_s3_bucket.this.arn
}

output "bucket_region" {
  description = "The bucket's region."
  value       = aws_s3_bucket.this.region
}

output "kms_key_arn" {
  description = "The customer-managed key that encrypts the bucket, or null for aws/s3."
  value       = var.kms_key_arn
}
