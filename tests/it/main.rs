//! Integration tests: each test starts a real Strata broker in-process on ephemeral ports with
//! its own temporary data dir, drives it over raw TCP with `kafka-protocol`'s client side, and
//! shuts it down.

mod client;
mod harness;

mod acls;
mod admin;
mod cluster;
mod cluster_coordinators;
mod cluster_id;
mod cluster_security;
mod cluster_tiering;
mod compaction;
mod coordinators;
mod corrupt_records;
mod crash;
mod full_disk;
mod group_configs;
mod group_offsets;
mod groups;
mod hostile_connections;
mod hostile_requests;
mod http;
mod idempotence;
mod inter_broker;
mod lifecycle;
mod list_offsets;
mod produce_fetch;
mod protocol;
mod quotas;
mod reassign;
mod recovery;
mod rehydration;
mod replication;
mod restart;
mod security;
mod share_groups;
mod storage_errors;
mod tiering;
mod transactions;
mod versions;
