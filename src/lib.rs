//! Strata: a Kafka-compatible, tiered-storage log service.
//!
//! # Architecture
//!
//! ```text
//!  Kafka clients ──TCP──▶ server (one task per connection, requests in order)
//!                            │ protocol: frames ⇄ kafka-protocol messages
//!                            ▼
//!                          api/ (one file per Kafka API)
//!                            │
//!                            ▼
//!                          broker: topic catalog, partitions, producer ids
//!                            │  (blocking pool for all file I/O)
//!                            ▼
//!                          log/: segments (.log/.index/.timeindex), producer state,
//!                                leader epochs, checkpoints, recovery, retention
//! ```
//!
//! Records stay as the producer's RecordBatch v2 bytes from socket to disk to socket: the
//! broker checks the CRC and header fields and rewrites only base offset and leader epoch.
//!
//! # Modules
//! - [`config`]: Kafka-named settings from properties/TOML files, env and flags.
//! - [`protocol`]: framing, request decoding, ApiVersions table.
//! - [`server`]: the Kafka listener and connection loop.
//! - [`api`]: request handlers.
//! - [`broker`]: catalog and partitions.
//! - [`acl`]: ACLs and the authorizer (Kafka's StandardAuthorizer rules).
//! - [`controller`]: cluster mode: the broker's membership in the metadata quorum
//!   (registration, heartbeats, the active controller's fencing and elections, metadata sync,
//!   admin changes through the quorum).
//! - [`coordinator`]: consumer groups and their `__consumer_offsets` records, transactions and
//!   `__transaction_state`; each coordinator serves the partitions this broker leads.
//! - [`failpoint`]: named crash points (`STRATA_FAILPOINT`) between durable steps, for tests
//!   that abort the broker there and check what recovery rebuilds.
//! - [`fetch_session`]: incremental fetch sessions (KIP-227).
//! - [`log`]: the storage engine.
//! - [`log_cleaner`]: the log cleaner service compacting `cleanup.policy=compact` topics.
//! - [`quota`]: client quotas (byte rates, request time) and connection limits, as Kafka.
//! - [`replication`]: partition leadership from the control plane, high watermark and ISR
//!   on the leader, replica fetchers on followers.
//! - [`memory_pool`]: the broker-wide budget for request bytes (`queued.max.request.bytes`).
//! - [`metrics`], [`admin_http`]: Prometheus metrics and health.
//! - [`runtime`]: start-up, background services and the shutdown order.

pub mod acl;
pub mod admin_http;
pub mod api;
pub mod auth;
pub mod blocking;
pub mod broker;
pub mod clock;
pub mod config;
pub mod controller;
pub mod coordinator;
pub mod failpoint;
pub mod fetch_session;
pub mod log;
pub mod log_cleaner;
pub mod memory_pool;
pub mod metrics;
pub mod protocol;
pub mod quota;
pub mod replication;
pub mod runtime;
pub mod server;
pub mod services;
pub mod tiering;
