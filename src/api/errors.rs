//! The one place where internal errors become Kafka error codes.

use kafka_protocol::ResponseError;

use crate::broker::TopicError;
use crate::log::producer_state::ProducerError;
use crate::log::{AppendError, ReadError};

pub fn append_error(e: &AppendError) -> ResponseError {
    match e {
        AppendError::Corrupt(_) => ResponseError::CorruptMessage,
        AppendError::Records(e) => match e.kafka_error() {
            strata_records::KafkaError::CorruptMessage => ResponseError::CorruptMessage,
            strata_records::KafkaError::InvalidRecord => ResponseError::InvalidRecord,
            strata_records::KafkaError::InvalidTimestamp => ResponseError::InvalidTimestamp,
        },
        AppendError::RecordErrors {
            invalid_timestamp: true,
            ..
        } => ResponseError::InvalidTimestamp,
        AppendError::InvalidRecord(_) | AppendError::RecordErrors { .. } => {
            ResponseError::InvalidRecord
        }
        AppendError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
        AppendError::InvalidTimestamp { .. } => ResponseError::InvalidTimestamp,
        AppendError::Producer(ProducerError::InvalidProducerEpoch { .. }) => {
            ResponseError::InvalidProducerEpoch
        }
        AppendError::Producer(ProducerError::OutOfOrderSequence { .. }) => {
            ResponseError::OutOfOrderSequenceNumber
        }
        AppendError::Producer(ProducerError::CoordinatorFenced { .. }) => {
            ResponseError::TransactionCoordinatorFenced
        }
        AppendError::NotLeaderOrFollower => ResponseError::NotLeaderOrFollower,
        AppendError::UnexpectedOffset { .. } => ResponseError::UnknownServerError,
        AppendError::Io(_) => ResponseError::KafkaStorageError,
    }
}

pub fn read_error(e: &ReadError) -> ResponseError {
    match e {
        ReadError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        ReadError::Io(_) => ResponseError::KafkaStorageError,
        ReadError::Remote { .. } => ResponseError::OffsetOutOfRange,
    }
}

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
