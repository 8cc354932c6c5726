output "bootstrap_servers" {
  description = "One bootstrap string per independent cluster (one per broker until clustering lands)."
  value       = module.brokers.bootstrap_servers
}

output "brokers" {
  description = "node.id, instance, AZ, advertised address and bucket prefix of each broker."
  value       = module.brokers.brokers
}

output "bucket" {
  description = "The MinIO bucket holding tiered data."
  value       = module.bucket.bucket_name
}
