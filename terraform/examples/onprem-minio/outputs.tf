output "bootstrap_servers" {
  description = "The bootstrap string for Kafka clients, as a one-entry list (every broker of the cluster, comma-separated)."
  value       = module.brokers.bootstrap_servers
}

output "cluster" {
  description = "cluster.id, controller.quorum.voters, the shared remote store URL and the replication settings (null for a single node)."
  value       = module.brokers.cluster
}

output "brokers" {
  description = "node.id, instance, AZ, advertised address and bucket prefix of each broker."
  value       = module.brokers.brokers
}

output "bucket" {
  description = "The MinIO bucket holding tiered data."
  value       = module.bucket.bucket_name
}
