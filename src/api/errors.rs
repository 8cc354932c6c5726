//! Where the errors of the broker's catalog and services become Kafka error codes. The log's
//! errors name their own codes (`AppendError::code`, `ReadError::code`), as Kafka's storage
//! exceptions do, so the broker's read and append paths answer with them directly.

use kafka_protocol::ResponseError;

use crate::broker::TopicError;

pub fn topic_error(e: &TopicError) -> ResponseError {
    match e {
        TopicError::AlreadyExists(_) => ResponseError::TopicAlreadyExists,
        TopicError::InvalidName(_) => ResponseError::InvalidTopicException,
        TopicError::Unknown => ResponseError::UnknownTopicOrPartition,
        TopicError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
        TopicError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
        TopicError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
        TopicError::InvalidConfig(_) => ResponseError::InvalidConfig,
        TopicError::DeletionDisabled => ResponseError::TopicDeletionDisabled,
        TopicError::Io(_) => ResponseError::KafkaStorageError,
        TopicError::Quorum { code, .. } => {
            ResponseError::try_from_code(*code).unwrap_or(ResponseError::UnknownServerError)
        }
    }
}

pub fn quota_error(e: &crate::quota::QuotaError) -> ResponseError {
    match e {
        crate::quota::QuotaError::InvalidRequest(_) => ResponseError::InvalidRequest,
        crate::quota::QuotaError::UnsupportedVersion(_) => ResponseError::UnsupportedVersion,
    }
}

/// Error code for a failed blocking task (a bug, reported rather than propagated).
pub fn internal() -> ResponseError {
    ResponseError::UnknownServerError
}

/// Kafka's default messages (`Errors.java`) for authorization refusals, where Kafka sends them.
pub const GROUP_AUTHORIZATION_FAILED: &str = "Group authorization failed.";
pub const TOPIC_AUTHORIZATION_FAILED: &str = "Topic authorization failed.";
