output "bootstrap_servers" {
  description = <<-EOT
    One bootstrap string per cluster: in cluster mode a single entry listing every broker (or
    the NLB's address); with independent single nodes one entry per broker, and a client must
    use exactly one of them.
  EOT
  value = var.enable_nlb ? ["${aws_lb.bootstrap[0].dns_name}:${var.kafka_port}"] : (
    local.cluster_mode ? [join(",", [for h in local.advertised_hosts : "${h}:${var.kafka_port}"])] :
    [for h in local.advertised_hosts : "${h}:${var.kafka_port}"]
  )
}

output "cluster" {
  description = "Cluster mode: cluster.id, controller.quorum.voters, the shared remote store URL and the replication settings. Null for independent single nodes."
  value = local.cluster_mode ? {
    cluster_id               = local.cluster_id
    controller_quorum_voters = local.controller_quorum_voters
    remote_store_url         = "s3://${var.bucket_name}/${var.bucket_prefix}/cluster"
    replication_factor       = local.replication_factor
    min_insync_replicas      = local.min_insync_replicas
  } : null
}

output "brokers" {
  description = "Per broker: node.id, instance, availability zone (broker.rack), advertised address, whether it is a metadata quorum voter, and remote store URL."
  value = [for b in local.brokers : {
    node_id           = b.node_id
    instance_id       = aws_instance.broker[b.index].id
    availability_zone = b.az
    advertised        = "${local.advertised_hosts[b.index]}:${var.kafka_port}"
    voter             = b.voter
    remote_store_url  = "s3://${var.bucket_name}/${b.prefix}"
  }]
}

output "nlb_dns_name" {
  description = "DNS name of the bootstrap NLB (null without enable_nlb)."
  value       = var.enable_nlb ? aws_lb.bootstrap[0].dns_name : null
}

output "security_group_id" {
  description = "The brokers' security group (add your own rules here, e.g. for SSH)."
  value       = aws_security_group.broker.id
}

output "iam_role_name" {
  description = "The brokers' IAM role."
  value       = aws_iam_role.broker.name
}

output "server_properties" {
  description = "The rendered broker configs, as cloud-init writes them to /etc/strata/server.properties."
  value       = local.server_properties
}
