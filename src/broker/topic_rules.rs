//! What a topic may be called and how many partitions it may have: Kafka's name rules, and
//! the partition limit CreateTopics, CreatePartitions and a restore from the bucket share.

use super::TopicError;

/// Kafka's topic name rules.
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    if name.is_empty() {
        return Err(TopicError::InvalidName(
            "Topic name is illegal, it can't be empty".into(),
        ));
    }
    if name == "." || name == ".." {
        return Err(TopicError::InvalidName(
            "Topic name cannot be \".\" or \"..\"".into(),
        ));
    }
    if name.len() > 249 {
        return Err(TopicError::InvalidName(format!(
            "Topic name is illegal, it can't be longer than 249 characters, topic name: {name}"
        )));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return Err(TopicError::InvalidName(format!(
            "Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )));
    }
    Ok(())
}

/// The most partitions a topic may have, through CreateTopics or CreatePartitions: each
/// costs directories, file descriptors and metadata on every replica, and no request may size
/// that work by a count alone.
pub const MAX_TOPIC_PARTITIONS: i32 = 100_000;

/// Refuses a partition count above [`MAX_TOPIC_PARTITIONS`].
pub fn check_partition_count(count: i32) -> Result<(), TopicError> {
    if count > MAX_TOPIC_PARTITIONS {
        return Err(TopicError::InvalidPartitions(format!(
            "Number of partitions {count} is too large (at most {MAX_TOPIC_PARTITIONS})."
        )));
    }
    Ok(())
}

// A restore from the bucket refuses a catalog topic past the same limit.
const _: () = assert!(MAX_TOPIC_PARTITIONS == strata_tiering::catalog::MAX_TOPIC_PARTITIONS);
