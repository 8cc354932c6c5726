output "bootstrap_servers" {
  description = <<-EOT
    One bootstrap string per independent cluster. Strata has no clustering yet (issue 8), so
    today that is one entry per broker, and a client must use exactly one of them; with the NLB
    (broker_count = 1) the single entry is the NLB's address.
  EOT
  value = var.enable_nlb ? ["${aws_lb.bootstrap[0].dns_name}:${var.kafka_port}"] : [
    for h in local.advertised_hosts : "${h}:${var.kafka_port}"
  ]
}

output "brokers" {
  description = "Per broker: node.id, instance, availability zone (broker.rack), advertised address and remote store URL."
  value = [for b in local.brokers : {
    node_id           = b.node_id
    instance_id       = aws_instance.broker[b.index].id
    availability_zone = b.az
    advertised        = "${local.advertised_hosts[b.index]}:${var.kafka_port}"
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
