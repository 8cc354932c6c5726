//! Strata: a Kafka-compatible, tiered-storage log service.
//!
//! # Architecture
//!
//! ```text
//!  Kafka clients ──TCP──▶ server (one task per connection, requests in order)
//!                            │ protocol: frames ⇄ kafka-protocol messages
//!                            ▼
//!                          api/ (one file per Kafka API; each handler takes only the
//!                            │   services it uses from `services::Services`)
//!                            ▼
//!        controller (cluster mode: metadata quorum, sync, admin through the quorum)
//!                            ▼
//!        coordinator (groups, transactions)  ·  share (share-partitions)
//!                            ▼
//!        replication (replica fetchers, ISR updater)  ·  tiering (uploads, remote reads)
//!                            ▼
//!                          broker: topic catalog, partitions, leadership and ISR state,
//!                            │     producer ids, the log cleaner (blocking pool for file I/O)
//!                            ▼
//!                          log/: segments (.log/.index/.timeindex), producer state,
//!                                leader epochs, checkpoints, recovery, retention
//! ```
//!
//! Dependencies point down the drawing. A lower layer never names a higher one: the broker
//! tells the services that follow it through [`broker::CatalogListener`] and reaches the
//! quorum through [`broker::MetadataQuorum`]; [`runtime`] builds [`services::Services`] once
//! and wires them. Leaf modules ([`config`], [`clock`], [`blocking`], [`metrics`],
//! [`security`], [`quota`], [`peer`], ...) name none of the above.
//!
//! Records stay as the producer's RecordBatch v2 bytes from socket to disk to socket: the
//! broker checks the CRC and header fields and rewrites only base offset and leader epoch.
//!
//! # Modules
//! - [`config`]: Kafka-named settings from properties/TOML files, env and flags.
//! - [`protocol`]: framing, request decoding, ApiVersions table.
//! - [`server`]: the Kafka listener and connection loop.
//! - [`api`]: request handlers.
//! - [`services`]: the broker's services, built once by the runtime.
//! - [`broker`]: catalog and partitions; [`broker::log_cleaner`]: the log cleaner service
//!   compacting `cleanup.policy=compact` topics.
//! - [`security`]: TLS, SASL (PLAIN, SCRAM) and ACLs (Kafka's StandardAuthorizer rules).
//! - [`blocking`]: the blocking pool where file I/O runs.
//! - [`clock`]: wall-clock milliseconds.
//! - [`controller`]: cluster mode: the broker's membership in the metadata quorum
//!   (registration, heartbeats, the active controller's fencing and elections, metadata sync,
//!   admin changes through the quorum).
//! - [`coordinator`]: consumer groups and their `__consumer_offsets` records, transactions and
//!   `__transaction_state`; each coordinator serves the partitions this broker leads.
//! - [`failpoint`]: named crash points (`STRATA_FAILPOINT`) between durable steps, for tests
//!   that abort the broker there and check what recovery rebuilds.
//! - [`fetch_session`]: incremental fetch sessions (KIP-227).
//! - [`share`]: share groups (KIP-932) on the partition leader: share-partitions, share
//!   sessions, and their state in `__share_group_state`.
//! - [`log`]: the storage engine.
//! - [`peer`]: connections to other brokers' inter-broker listeners.
//! - [`quota`]: client quotas (byte rates, request time) and connection limits, as Kafka.
//! - [`replication`]: partition leadership from the control plane, high watermark and ISR
//!   on the leader, replica fetchers on followers.
//! - [`tiering`]: the broker side of tiered storage.
//! - [`memory_pool`]: the broker-wide budget for request bytes (`queued.max.request.bytes`).
//! - [`metrics`], [`admin_http`]: Prometheus metrics and health.
//! - [`runtime`]: start-up, background services and the shutdown order.

pub mod admin_http;
pub mod api;
pub mod blocking;
pub mod broker;
pub mod clock;
pub mod config;
pub mod controller;
pub mod coordinator;
pub mod failpoint;
pub mod features;
pub mod fetch_session;
pub mod log;
pub mod memory_pool;
pub mod metrics;
pub mod peer;
pub mod protocol;
pub mod quota;
pub mod replication;
pub mod response_writer;
pub mod runtime;
pub mod security;
pub mod server;
pub mod services;
pub mod share;
pub mod tiering;
