variable "bucket_name" {
  description = "Name of the bucket for Strata's tiered data (globally unique)."
  type        = string
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key for default encryption. Null: SSE-KMS with the AWS-managed aws/s3 key. Either way S3 Bucket Keys keep KMS request costs low."
  type        = string
  default     = null
}

variable "versioning_enabled" {
  description = <<-EOT
    Keep old object versions. Off by default: Strata never overwrites a data object (every key is
    unique), and its manifests are protected by conditional PUTs, so versions mostly keep data
    that retention deleted on purpose, and you pay for it. Turn it on to guard against
    accidental or malicious deletes; noncurrent versions then expire after
    noncurrent_version_expiration_days.
  EOT
  type        = bool
  default     = false
}

variable "noncurrent_version_expiration_days" {
  description = "With versioning: days a deleted or overwritten version is kept."
  type        = number
  default     = 7
}

variable "abort_incomplete_multipart_upload_days" {
  description = "Days after which S3 aborts multipart uploads that never completed (Strata uploads segments above strata.remote.upload.multipart.threshold.bytes in parts; a crash mid-upload leaves parts that are billed until aborted)."
  type        = number
  default     = 1
}

variable "force_destroy" {
  description = "Allow terraform destroy to delete a non-empty bucket (all tiered data!). For throwaway examples only."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for the bucket."
  type        = map(string)
  default     = {}
}
