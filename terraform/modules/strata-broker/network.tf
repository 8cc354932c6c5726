# Security groups. Kafka port: client CIDRs/groups, the NLB and the other brokers only. Admin
# port (/health, /metrics): admin_cidr_blocks and the other brokers only. Controller port
# (cluster mode): the other brokers only. Nothing else inbound (no SSH rule: use Session
# Manager, or add your own rule to security_group_id).

resource "aws_security_group" "broker" {
  name        = "${var.name}-broker"
  description = "Strata brokers ${var.name}"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-broker" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "kafka_from_cidr" {
  for_each          = toset(var.client_cidr_blocks)
  security_group_id = aws_security_group.broker.id
  description       = "Kafka clients"
  ip_protocol       = "tcp"
  from_port         = var.kafka_port
  to_port           = var.kafka_port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "kafka_from_sg" {
  for_each                     = toset(var.client_security_group_ids)
  security_group_id            = aws_security_group.broker.id
  description                  = "Kafka clients (security group)"
  ip_protocol                  = "tcp"
  from_port                    = var.kafka_port
  to_port                      = var.kafka_port
  referenced_security_group_id = each.value
}

# Broker to broker: the Kafka port (followers fetch from leaders on the PLAINTEXT listener,
# the controller checks that a silent broker's listener still answers), the admin port, and in
# cluster mode the controller port (metadata RPC: Raft between voters, registration,
# heartbeats and metadata sync from every broker).
resource "aws_vpc_security_group_ingress_rule" "kafka_from_brokers" {
  security_group_id            = aws_security_group.broker.id
  description                  = "Kafka port between brokers"
  ip_protocol                  = "tcp"
  from_port                    = var.kafka_port
  to_port                      = var.kafka_port
  referenced_security_group_id = aws_security_group.broker.id
}

resource "aws_vpc_security_group_ingress_rule" "admin_from_brokers" {
  security_group_id            = aws_security_group.broker.id
  description                  = "Admin/metrics port between brokers"
  ip_protocol                  = "tcp"
  from_port                    = var.admin_port
  to_port                      = var.admin_port
  referenced_security_group_id = aws_security_group.broker.id
}

resource "aws_vpc_security_group_ingress_rule" "controller_from_brokers" {
  count                        = local.cluster_mode ? 1 : 0
  security_group_id            = aws_security_group.broker.id
  description                  = "Metadata quorum RPC between brokers"
  ip_protocol                  = "tcp"
  from_port                    = var.controller_port
  to_port                      = var.controller_port
  referenced_security_group_id = aws_security_group.broker.id
}

resource "aws_vpc_security_group_ingress_rule" "admin_from_cidr" {
  for_each          = toset(var.admin_cidr_blocks)
  security_group_id = aws_security_group.broker.id
  description       = "Admin/metrics (Prometheus, health checks)"
  ip_protocol       = "tcp"
  from_port         = var.admin_port
  to_port           = var.admin_port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "kafka_from_nlb" {
  count                        = var.enable_nlb ? 1 : 0
  security_group_id            = aws_security_group.broker.id
  description                  = "Kafka traffic and health checks from the bootstrap NLB"
  ip_protocol                  = "tcp"
  from_port                    = var.kafka_port
  to_port                      = var.kafka_port
  referenced_security_group_id = aws_security_group.nlb[0].id
}

resource "aws_vpc_security_group_egress_rule" "broker" {
  for_each = { for pair in flatten([
    for r in var.egress_rules : [for c in r.cidr_blocks : { key = "${r.port}-${c}", rule = r, cidr = c }]
  ]) : pair.key => pair }
  security_group_id = aws_security_group.broker.id
  description       = each.value.rule.description
  ip_protocol       = "tcp"
  from_port         = each.value.rule.port
  to_port           = each.value.rule.port
  cidr_ipv4         = each.value.cidr
}

resource "aws_vpc_security_group_egress_rule" "broker_to_brokers" {
  security_group_id            = aws_security_group.broker.id
  description                  = "Kafka port between brokers"
  ip_protocol                  = "tcp"
  from_port                    = var.kafka_port
  to_port                      = var.kafka_port
  referenced_security_group_id = aws_security_group.broker.id
}

resource "aws_vpc_security_group_egress_rule" "controller_to_brokers" {
  count                        = local.cluster_mode ? 1 : 0
  security_group_id            = aws_security_group.broker.id
  description                  = "Metadata quorum RPC between brokers"
  ip_protocol                  = "tcp"
  from_port                    = var.controller_port
  to_port                      = var.controller_port
  referenced_security_group_id = aws_security_group.broker.id
}

# ------------------------------------------------------------------------------ bootstrap NLB

resource "aws_security_group" "nlb" {
  count       = var.enable_nlb ? 1 : 0
  name        = "${var.name}-nlb"
  description = "Strata bootstrap NLB ${var.name}"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-nlb" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "nlb_from_cidr" {
  for_each          = var.enable_nlb ? toset(var.client_cidr_blocks) : toset([])
  security_group_id = aws_security_group.nlb[0].id
  description       = "Kafka clients"
  ip_protocol       = "tcp"
  from_port         = var.kafka_port
  to_port           = var.kafka_port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "nlb_from_sg" {
  for_each                     = var.enable_nlb ? toset(var.client_security_group_ids) : toset([])
  security_group_id            = aws_security_group.nlb[0].id
  description                  = "Kafka clients (security group)"
  ip_protocol                  = "tcp"
  from_port                    = var.kafka_port
  to_port                      = var.kafka_port
  referenced_security_group_id = each.value
}

resource "aws_vpc_security_group_egress_rule" "nlb_to_brokers" {
  count                        = var.enable_nlb ? 1 : 0
  security_group_id            = aws_security_group.nlb[0].id
  description                  = "Kafka traffic and health checks to the brokers"
  ip_protocol                  = "tcp"
  from_port                    = var.kafka_port
  to_port                      = var.kafka_port
  referenced_security_group_id = aws_security_group.broker.id
}

resource "aws_lb" "bootstrap" {
  #checkov:skip=CKV_AWS_91:NLB access logs exist only for TLS listeners; Strata's listener is plain TCP (no TLS yet, issue 10).
  #checkov:skip=CKV_AWS_150:The NLB holds no state (a bootstrap address only); deletion protection would just block terraform destroy.
  count                            = var.enable_nlb ? 1 : 0
  name                             = "${var.name}-bootstrap"
  load_balancer_type               = "network"
  internal                         = var.nlb_internal
  subnets                          = coalesce(var.nlb_subnet_ids, var.subnet_ids)
  security_groups                  = [aws_security_group.nlb[0].id]
  enable_cross_zone_load_balancing = true
  tags                             = local.tags
}

resource "aws_lb_target_group" "kafka" {
  count                = var.enable_nlb ? 1 : 0
  name                 = "${var.name}-kafka"
  port                 = var.kafka_port
  protocol             = "TCP"
  target_type          = "instance"
  vpc_id               = var.vpc_id
  deregistration_delay = 30
  tags                 = local.tags

  health_check {
    protocol            = "TCP"
    port                = "traffic-port"
    interval            = 10
    healthy_threshold   = 3
    unhealthy_threshold = 3
  }
}

resource "aws_lb_target_group_attachment" "kafka" {
  count            = var.enable_nlb ? var.broker_count : 0
  target_group_arn = aws_lb_target_group.kafka[0].arn
  target_id        = aws_instance.broker[count.index].id
  port             = var.kafka_port
}

resource "aws_lb_listener" "kafka" {
  count             = var.enable_nlb ? 1 : 0
  load_balancer_arn = aws_lb.bootstrap[0].arn
  port              = var.kafka_port
  protocol          = "TCP"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.kafka[0].arn
  }
}
