variable "bucket_name" {
  description = "Name of the bucket to create on MinIO."
  type        = string
}

variable "sse_enabled" {
  description = "Default encryption (SSE-S3) for new objects. Needs MinIO configured with a KMS (KES); MinIO refuses the setting otherwise, so it is off by default."
  type        = bool
  default     = false
}

variable "versioning_enabled" {
  description = "Keep old object versions. Off by default for the reasons given in modules/strata-bucket (versioning_enabled)."
  type        = bool
  default     = false
}

variable "force_destroy" {
  description = "Allow terraform destroy to delete a non-empty bucket (all tiered data!)."
  type        = bool
  default     = false
}
