output "bucket_name" {
  description = "The bucket's name."
  value       = aws_s3_bucket.this.id
}
