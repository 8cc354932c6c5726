# Strata brokers on EC2 instances with NVMe instance storage.
#
# Per broker: a network interface (its private IP is the advertised address and survives an
# instance replacement), a launch template whose cloud-init writes the broker's config, and an
# instance launched from it. All brokers share one security group, one IAM role and, if asked,
# an NLB. In cluster mode (the default from three brokers) they form one Strata cluster whose
# metadata quorum runs on the first controller_count brokers' fixed private IPs; otherwise
# every broker is an independent single node. See ../../README.md for what happens on stop,
# replacement and upgrade.

data "aws_region" "current" {}

data "aws_partition" "current" {}

data "aws_subnet" "broker" {
  for_each = toset(var.subnet_ids)
  id       = each.value
}

data "aws_ec2_instance_type" "broker" {
  instance_type = var.instance_type
}

data "aws_ssm_parameter" "al2023" {
  count = var.ami_id == null ? 1 : 0
  name  = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-${local.arch}"
}

locals {
  region        = data.aws_region.current.id # the region name, in AWS provider 5.x and 6.x
  bucket_region = coalesce(var.bucket_region, local.region)
  arch          = contains(data.aws_ec2_instance_type.broker.supported_architectures, "arm64") ? "arm64" : "x86_64"
  ami_id        = var.ami_id != null ? var.ami_id : data.aws_ssm_parameter.al2023[0].insecure_value

  # One mount point per instance-store disk; Strata spreads partitions over log.dirs.
  disk_count = sum(concat([0], [for d in data.aws_ec2_instance_type.broker.instance_disks : d.count]))
  data_dir   = "/var/lib/strata"
  log_dirs   = [for i in range(local.disk_count) : "${local.data_dir}/disk${i}"]

  admin_listener = length(var.admin_cidr_blocks) > 0 ? "0.0.0.0:${var.admin_port}" : "127.0.0.1:${var.admin_port}"

  credentials_source = (
    var.s3_credentials == null ? "none" :
    try(var.s3_credentials.secretsmanager_secret_arn, null) != null ? "secretsmanager" : "ssm"
  )

  # Cluster mode: one Strata cluster over all brokers. Default from three brokers: a metadata
  # quorum of two survives no failure, and a one-broker cluster would only lose what a single
  # node has (its restore from the bucket after losing the instance store).
  cluster_mode = var.cluster_mode != null ? var.cluster_mode : var.broker_count >= 3
  # Voters: the first controller_count brokers. Strata cannot change the voters at runtime, so
  # they stay fixed when brokers are added; the others follow the quorum as learners.
  voter_count = local.cluster_mode ? min(var.controller_count, var.broker_count) : 0
  # Kafka-shaped (22 characters of base64url), stable for this bucket location.
  cluster_id = replace(replace(substr(base64sha256("strata:${var.bucket_name}/${var.bucket_prefix}/cluster"), 0, 22), "+", "-"), "/", "_")
  # On the root EBS volume: it survives a stop/start or host failure, which blank the instance
  # store, so a voter keeps its Raft log and vote (see README).
  metadata_log_dir = "${local.data_dir}/metadata"

  # Replicas sized to the cluster: 3 (or every broker, if fewer); min ISR 2 with 3 replicas, else
  # 1 (with 2 replicas a min ISR of 2 would stop acks=all producers whenever one broker is down).
  replication_factor  = coalesce(var.default_replication_factor, local.cluster_mode ? min(3, var.broker_count) : 1)
  min_insync_replicas = coalesce(var.min_insync_replicas, local.replication_factor >= 3 ? 2 : 1)

  brokers = [for i in range(var.broker_count) : {
    index     = i
    node_id   = var.node_id_base + i
    voter     = i < local.voter_count
    subnet_id = var.subnet_ids[i % length(var.subnet_ids)]
    az        = data.aws_subnet.broker[var.subnet_ids[i % length(var.subnet_ids)]].availability_zone
    # A cluster shares one prefix; independent single nodes must never share a catalog.
    prefix = local.cluster_mode ? "${var.bucket_prefix}/cluster" : "${var.bucket_prefix}/node-${var.node_id_base + i}"
  }]
  store_prefixes = distinct([for b in local.brokers : b.prefix])

  controller_quorum_voters = join(",", [for b in local.brokers :
    "${b.node_id}@${aws_network_interface.broker[b.index].private_ip}:${var.controller_port}" if b.voter
  ])

  advertised_hosts = [for i in range(var.broker_count) :
    var.assign_public_ip ? aws_eip.broker[i].public_ip : aws_network_interface.broker[i].private_ip
  ]

  # The broker config: rendered from the one template that scripts/check-terraform.sh checks
  # with `strata config check`. Keep this variable set in step with terraform/tests/*.json.
  server_properties = [for b in local.brokers : templatefile("${path.module}/templates/server.properties.tftpl", {
    node_id                  = b.node_id
    rack                     = b.az
    cluster_mode             = local.cluster_mode
    cluster_id               = local.cluster_mode ? local.cluster_id : ""
    controller_quorum_voters = local.controller_quorum_voters
    private_ip               = aws_network_interface.broker[b.index].private_ip
    controller_port          = var.controller_port
    metadata_log_dir         = local.metadata_log_dir
    kafka_port               = var.kafka_port
    advertised_host          = local.advertised_hosts[b.index]
    admin_listener           = local.admin_listener
    log_dirs                 = join(",", local.log_dirs)
    remote_storage_default   = var.remote_storage_default
    remote_store_url         = "s3://${var.bucket_name}/${b.prefix}"
    remote_store_region      = local.bucket_region
    remote_store_endpoint    = var.s3_endpoint == null ? "" : var.s3_endpoint
    remote_store_path_style  = var.s3_path_style
    remote_cache_dir         = "${local.log_dirs[0]}/remote-cache"
    remote_cache_disk_bytes  = var.remote_cache_disk_bytes
    replication_factor       = local.replication_factor
    min_insync_replicas      = local.min_insync_replicas
    extra_config             = var.extra_config
  })]

  # Settings of /usr/local/sbin/strata-prepare (files/strata-prepare.sh).
  prepare_env = join("\n", [
    "AWS_REGION=${local.region}",
    "BINARY_URL=${var.strata_binary_url}",
    "BINARY_SHA256=${var.strata_binary_sha256}",
    "DATA_DIR=${local.data_dir}",
    "DISK_COUNT=${local.disk_count}",
    "METADATA_DIR=${local.cluster_mode ? local.metadata_log_dir : ""}",
    "CREDENTIALS_SOURCE=${local.credentials_source}",
    "SECRET_ID=${try(coalesce(var.s3_credentials.secretsmanager_secret_arn, ""), "")}",
    "SSM_ACCESS_KEY_ID_PARAMETER=${try(coalesce(var.s3_credentials.ssm_access_key_id_parameter, ""), "")}",
    "SSM_SECRET_ACCESS_KEY_PARAMETER=${try(coalesce(var.s3_credentials.ssm_secret_access_key_parameter, ""), "")}",
    "",
  ])

  user_data = [for b in local.brokers : templatefile("${path.module}/templates/cloud-init.yaml.tftpl", {
    node_id           = b.node_id
    server_properties = local.server_properties[b.index]
    prepare_env       = local.prepare_env
    prepare_script    = file("${path.module}/files/strata-prepare.sh")
    prepare_unit      = file("${path.module}/files/strata-prepare.service")
    strata_unit       = file("${path.module}/files/strata.service")
  })]

  tags = merge({ "strata:cluster" = var.name }, var.tags)
}

resource "aws_network_interface" "broker" {
  count           = var.broker_count
  subnet_id       = local.brokers[count.index].subnet_id
  security_groups = [aws_security_group.broker.id]
  description     = "${var.name} broker node.id ${local.brokers[count.index].node_id}"
  tags            = merge(local.tags, { Name = "${var.name}-${local.brokers[count.index].node_id}" })
}

resource "aws_eip" "broker" {
  #checkov:skip=CKV2_AWS_19:Attached to the broker's network interface by aws_eip_association.broker once the instance runs.
  count  = var.assign_public_ip ? var.broker_count : 0
  domain = "vpc"
  tags   = merge(local.tags, { Name = "${var.name}-${local.brokers[count.index].node_id}" })
}

resource "aws_eip_association" "broker" {
  count                = var.assign_public_ip ? var.broker_count : 0
  allocation_id        = aws_eip.broker[count.index].id
  network_interface_id = aws_network_interface.broker[count.index].id
  depends_on           = [aws_instance.broker]
}

resource "aws_launch_template" "broker" {
  count                  = var.broker_count
  name                   = "${var.name}-${local.brokers[count.index].node_id}"
  description            = "Strata broker node.id ${local.brokers[count.index].node_id} in ${local.brokers[count.index].az}"
  image_id               = local.ami_id
  instance_type          = var.instance_type
  key_name               = var.key_name
  ebs_optimized          = true
  user_data              = base64encode(local.user_data[count.index])
  update_default_version = true

  iam_instance_profile {
    arn = aws_iam_instance_profile.broker.arn
  }

  # The interface carries the security group and the stable private IP.
  network_interfaces {
    device_index         = 0
    network_interface_id = aws_network_interface.broker[count.index].id
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required" # IMDSv2 only
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "disabled"
  }

  monitoring {
    enabled = true
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_type           = "gp3"
      volume_size           = var.root_volume_size_gib
      encrypted             = true
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = "${var.name}-${local.brokers[count.index].node_id}" })
  }

  tag_specifications {
    resource_type = "volume"
    tags          = merge(local.tags, { Name = "${var.name}-${local.brokers[count.index].node_id}-root" })
  }

  tags = local.tags

  lifecycle {
    precondition {
      condition     = data.aws_ec2_instance_type.broker.instance_storage_supported && local.disk_count > 0
      error_message = "instance_type ${var.instance_type} has no instance storage; pick one with NVMe instance store (e.g. i4i.large, m6id.large)."
    }
    precondition {
      condition     = length(local.user_data[count.index]) <= 16384
      error_message = "The rendered cloud-init user data exceeds EC2's 16 KiB limit."
    }
    precondition {
      condition     = !var.enable_nlb || var.broker_count == 1 || local.cluster_mode
      error_message = "enable_nlb needs one cluster: broker_count = 1 or cluster_mode. An NLB over independent brokers would send clients to unrelated clusters."
    }
    precondition {
      condition     = !local.cluster_mode || var.broker_count >= 2
      error_message = "cluster_mode needs at least two brokers: a one-broker cluster gains nothing and loses the single node's restore from the bucket after its instance store is lost."
    }
    precondition {
      condition     = local.min_insync_replicas <= local.replication_factor && local.replication_factor <= var.broker_count
      error_message = "Need min_insync_replicas <= default_replication_factor <= broker_count."
    }
    precondition {
      condition     = !local.cluster_mode || !var.assign_public_ip
      error_message = "cluster_mode does not work with assign_public_ip: followers fetch from the leader's advertised address, and traffic to an Elastic IP does not match the broker-to-broker security group rules."
    }
  }
}

resource "aws_instance" "broker" {
  count = var.broker_count

  launch_template {
    id      = aws_launch_template.broker[count.index].id
    version = aws_launch_template.broker[count.index].latest_version
  }

  # Repeated from the launch template so that the instance resource states them too.
  iam_instance_profile = aws_iam_instance_profile.broker.name
  ebs_optimized        = true
  monitoring           = true
  root_block_device {
    volume_type = "gp3"
    volume_size = var.root_volume_size_gib
    encrypted   = true
  }
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  tags = merge(local.tags, { Name = "${var.name}-${local.brokers[count.index].node_id}" })

  lifecycle {
    # A new launch template version (new binary, config or AMI) must not silently replace a
    # broker: the instance store is lost with the instance and only tiered data comes back.
    # Roll brokers one at a time with `terraform apply -replace=...` (see README).
    ignore_changes = [launch_template, ami, user_data]
  }
}
