variable "name" {
  description = "Name prefix for every resource (instances, security groups, IAM role, NLB)."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,22}$", var.name))
    error_message = "name must be 2-23 characters of lower-case letters, digits and '-', starting with a letter (it prefixes the NLB name, which AWS limits to 32 characters)."
  }
}

variable "broker_count" {
  description = <<-EOT
    How many brokers to launch. From 3 (with cluster_mode left at null) they form one Strata
    cluster with replicated partitions; 1 is a single node; with cluster_mode = false every
    broker is an independent single-node cluster with its own data and bucket prefix.
  EOT
  type        = number
  default     = 1
  validation {
    condition     = var.broker_count >= 1 && var.broker_count <= 32 && floor(var.broker_count) == var.broker_count
    error_message = "broker_count must be an integer between 1 and 32."
  }
}

variable "cluster_mode" {
  description = <<-EOT
    Whether the brokers form one Strata cluster (controller.quorum.voters over their fixed
    private IPs, replicated partitions, one shared bucket prefix). Null (default): true from 3
    brokers, false below. Two brokers can be a cluster (set true), but a quorum of two voters
    stops on the loss of either; one broker cannot (restore from the bucket after losing the
    instance store is single-node only). False: independent single nodes, as before clustering.
  EOT
  type        = bool
  default     = null
}

variable "controller_count" {
  description = "Cluster mode: how many brokers (the first ones, by node.id) are voters of the metadata quorum; the others follow it as learners. Strata cannot change the voters at runtime, so a fixed set lets brokers be added later. 3 survives one failure, 5 two."
  type        = number
  default     = 3
  validation {
    condition     = contains([1, 3, 5, 7], var.controller_count)
    error_message = "controller_count must be odd: 3, 5 or 7 (1 survives no failure)."
  }
}

variable "controller_port" {
  description = "Cluster mode: port of the metadata RPC listener (CONTROLLER), reachable from the other brokers only."
  type        = number
  default     = 9093
}

variable "default_replication_factor" {
  description = "Replicas of new topics and of __consumer_offsets / __transaction_state (default.replication.factor, offsets.topic.replication.factor, transaction.state.log.replication.factor). Null: min(3, broker_count) in cluster mode, 1 otherwise."
  type        = number
  default     = null
}

variable "min_insync_replicas" {
  description = "min.insync.replicas (and transaction.state.log.min.isr). Null: 2 with 3 or more replicas, else 1."
  type        = number
  default     = null
}

variable "node_id_base" {
  description = "node.id of the first broker; broker i gets node_id_base + i."
  type        = number
  default     = 1
}

variable "vpc_id" {
  description = "VPC the brokers run in."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets, ideally one per availability zone. Broker i goes to subnet_ids[i % length(subnet_ids)] and gets broker.rack = that subnet's AZ."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "Give at least one subnet."
  }
}

variable "instance_type" {
  description = "An EC2 type with NVMe instance storage (i4i, i4g, im4gn, is4gen, i3en, m6id, c6id, r6id, m7gd, ...). The instance store holds the local log; it is lost on stop/terminate, see README."
  type        = string
  default     = "i4i.large"
}

variable "ami_id" {
  description = "AMI to boot. Default: the latest Amazon Linux 2023 for the instance type's architecture (from the public SSM parameter). The AMI needs systemd, cloud-init, the AWS CLI v2, curl, python3, lsblk and mkfs.xfs, as Amazon Linux 2023 has."
  type        = string
  default     = null
}

variable "root_volume_size_gib" {
  description = "Size of the encrypted gp3 root volume (OS, binary, logs; no broker data)."
  type        = number
  default     = 20
}

variable "strata_binary_url" {
  description = "Where cloud-init downloads the strata binary from: https://... or s3://bucket/key. It must be built for the instance's architecture (x86_64 or aarch64 Linux, glibc of the AMI)."
  type        = string
  validation {
    condition     = can(regex("^(https://|s3://[^/]+/.+)", var.strata_binary_url))
    error_message = "strata_binary_url must start with https:// or be s3://bucket/key."
  }
}

variable "strata_binary_sha256" {
  description = "SHA-256 of the binary at strata_binary_url (hex). The instance refuses a binary that does not match."
  type        = string
  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.strata_binary_sha256))
    error_message = "strata_binary_sha256 must be 64 lower-case hex digits (sha256sum output)."
  }
}

variable "kafka_port" {
  description = "Port of the PLAINTEXT Kafka listener (Strata has no TLS/SASL yet, issue 10)."
  type        = number
  default     = 9092
}

variable "admin_port" {
  description = "Port of Strata's admin HTTP listener (/health, /metrics)."
  type        = number
  default     = 9644
}

variable "client_cidr_blocks" {
  description = "CIDRs of Kafka clients: the only sources allowed to reach the Kafka port (besides client_security_group_ids, the other brokers and the NLB)."
  type        = list(string)
  default     = []
}

variable "client_security_group_ids" {
  description = "Security groups of Kafka clients allowed to reach the Kafka port."
  type        = list(string)
  default     = []
}

variable "admin_cidr_blocks" {
  description = "CIDRs allowed to reach the admin/metrics port (e.g. Prometheus). Empty: the admin listener binds 127.0.0.1 only."
  type        = list(string)
  default     = []
}

variable "egress_rules" {
  description = "Outbound traffic the brokers may send. The default allows HTTPS (S3, STS, Secrets Manager/SSM, package and binary downloads). Add your S3-compatible endpoint's port here (see the MinIO example)."
  type = list(object({
    description = string
    port        = number
    cidr_blocks = list(string)
  }))
  default = [{
    description = "HTTPS to AWS APIs, S3 and the binary download"
    port        = 443
    cidr_blocks = ["0.0.0.0/0"]
  }]
}

variable "assign_public_ip" {
  description = "Give each broker an Elastic IP and advertise it to clients (the subnets then need a route to an internet gateway). Off by default: brokers are private."
  type        = bool
  default     = false
}

variable "enable_nlb" {
  description = "Create a Network Load Balancer as a stable bootstrap address. Clients still connect to each broker's advertised address after bootstrapping. Needs one cluster (cluster mode, or broker_count = 1): an NLB in front of independent brokers would mix clusters."
  type        = bool
  default     = false
}

variable "nlb_internal" {
  description = "Whether the NLB is internal (default) or internet-facing."
  type        = bool
  default     = true
}

variable "nlb_subnet_ids" {
  description = "Subnets for the NLB (default: subnet_ids)."
  type        = list(string)
  default     = null
}

variable "bucket_name" {
  description = "Bucket for tiered data (from the strata-bucket or minio-bucket module)."
  type        = string
}

variable "bucket_prefix" {
  description = "Key prefix inside the bucket. A cluster uses <bucket_prefix>/cluster, shared by all its brokers; an independent broker with node.id N uses <bucket_prefix>/node-N (independent brokers must never share a catalog)."
  type        = string
  default     = "strata"
  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", var.bucket_prefix))
    error_message = "bucket_prefix must be non-empty, without leading/trailing '/'."
  }
}

variable "bucket_region" {
  description = "Region of the bucket (default: the provider's region). For MinIO, the region MinIO is configured with (usually us-east-1)."
  type        = string
  default     = null
}

variable "bucket_kms_key_arn" {
  description = "Customer-managed KMS key that encrypts the bucket, if any: the brokers get kms:Decrypt/GenerateDataKey on it. Not needed for SSE-S3 or the AWS-managed aws/s3 key."
  type        = string
  default     = null
}

variable "s3_endpoint" {
  description = "S3-compatible endpoint (e.g. https://minio.example.internal:9000). Null: AWS S3."
  type        = string
  default     = null
}

variable "s3_path_style" {
  description = "Use path-style requests (MinIO and most S3-compatible servers)."
  type        = bool
  default     = false
}

variable "s3_credentials" {
  description = <<-EOT
    Static credentials for an S3-compatible store, read at every broker start from a secret
    store and handed to Strata as environment variables (never in user data or the config file).
    Either secretsmanager_secret_arn (a JSON secret {"access_key_id": ..., "secret_access_key": ...})
    or both ssm_*_parameter names (SecureString). Null: the instance profile's role (AWS S3).
  EOT
  type = object({
    secretsmanager_secret_arn       = optional(string)
    ssm_access_key_id_parameter     = optional(string)
    ssm_secret_access_key_parameter = optional(string)
    kms_key_arn                     = optional(string)
  })
  default = null
  validation {
    condition = var.s3_credentials == null ? true : (
      (try(var.s3_credentials.secretsmanager_secret_arn, null) != null) !=
      (try(var.s3_credentials.ssm_access_key_id_parameter, null) != null && try(var.s3_credentials.ssm_secret_access_key_parameter, null) != null)
    )
    error_message = "s3_credentials needs exactly one of: secretsmanager_secret_arn, or both ssm_access_key_id_parameter and ssm_secret_access_key_parameter."
  }
}

variable "remote_storage_default" {
  description = "Broker-wide default of remote.storage.enable (log.remote.storage.enable). True by default here because the instance store is ephemeral: only tiered data survives a stop or replacement."
  type        = bool
  default     = true
}

variable "remote_cache_disk_bytes" {
  description = "Size of the on-disk read cache for remote data (strata.remote.cache.disk.bytes), on the first instance-store disk."
  type        = string
  default     = "20GiB"
}

variable "extra_config" {
  description = "More broker settings (Kafka names), e.g. { \"log.retention.hours\" = \"72\" }. Keys the module sets itself are refused."
  type        = map(string)
  default     = {}
  validation {
    condition = length(setintersection(keys(var.extra_config), [
      "node.id", "broker.id", "broker.rack", "listeners", "advertised.listeners", "log.dirs", "log.dir",
      "strata.admin.listener", "remote.log.storage.system.enable", "log.remote.storage.enable",
      "strata.remote.store.url", "strata.remote.store.region", "strata.remote.store.endpoint",
      "strata.remote.store.path.style", "strata.remote.store.access.key.id",
      "strata.remote.store.secret.access.key", "strata.remote.cache.dir", "strata.remote.cache.disk.bytes",
      "process.roles", "cluster.id", "controller.quorum.voters", "controller.listener.names",
      "inter.broker.listener.name", "metadata.log.dir", "default.replication.factor", "min.insync.replicas",
      "offsets.topic.replication.factor", "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
    ])) == 0
    error_message = "extra_config must not set keys the module manages (use the module's variables) or credentials (use s3_credentials)."
  }
}

variable "key_name" {
  description = "EC2 key pair for SSH. Null (default): no SSH key; use SSM Session Manager."
  type        = string
  default     = null
}

variable "enable_ssm_session_manager" {
  description = "Attach AmazonSSMManagedInstanceCore so operators can open shells through Session Manager without SSH or public IPs."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
