output "bootstrap_servers" {
  description = "The bootstrap address for Kafka clients (the NLB), as a one-entry list."
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
  description = "The bucket holding tiered data."
  value       = module.bucket.bucket_name
}
