//! Identifiers and epochs of the metadata model, as newtypes so they cannot be mixed up.
//!
//! The numeric widths follow Kafka's wire types (`int32` broker ids and epochs, `int64`
//! producer ids), so the broker converts without range checks.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A broker's `node.id`. Valid ids are non-negative.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BrokerId(pub i32);

impl fmt::Display for BrokerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A partition's leader epoch: bumped whenever the leader changes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct LeaderEpoch(pub i32);

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A partition's partition epoch: bumped on every change of its leader, ISR or replicas. An
/// `AlterPartition` names the epoch it was computed from, so concurrent changes cannot both
/// win.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct PartitionEpoch(pub i32);

impl fmt::Display for PartitionEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A broker's epoch: the metadata log index of its latest registration. Heartbeats and
/// requests carrying an older epoch come from a previous incarnation and are rejected.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct BrokerEpoch(pub i64);

impl fmt::Display for BrokerEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A producer id, as handed out in blocks by `AllocateProducerIds`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ProducerId(pub i64);

impl fmt::Display for ProducerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 128-bit identifier (a UUID's bytes): topic ids and broker incarnation ids.
///
/// Serialized as 32 lowercase hex digits so snapshots and logs stay readable and usable as
/// JSON map keys. The all-zero value is Kafka's reserved `ZERO_UUID`, never a valid id.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Uuid128(pub [u8; 16]);

/// A topic's id (Kafka's topic UUID).
pub type TopicId = Uuid128;

impl Uuid128 {
    /// Kafka's reserved all-zero UUID.
    pub const ZERO: Uuid128 = Uuid128([0; 16]);

    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Uuid128(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    pub fn is_zero(&self) -> bool {
        *self == Self::ZERO
    }

    /// Kafka's text for a UUID (`Uuid.toString()`): URL-safe base64 of the 16 bytes, without
    /// padding; what Kafka's tools print and take.
    pub fn to_kafka_string(&self) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::with_capacity(22);
        for chunk in self.0.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32;
            for i in 0..=chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }
}

impl fmt::Display for Uuid128 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Uuid128 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid128({self})")
    }
}

/// The text is not 32 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid 128-bit id {text:?}: expected 32 hex digits")]
pub struct ParseUuidError {
    text: String,
}

impl FromStr for Uuid128 {
    type Err = ParseUuidError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || ParseUuidError {
            text: text.chars().take(64).collect(),
        };
        if text.len() != 32 || !text.is_ascii() {
            return Err(invalid());
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| invalid())?;
        }
        Ok(Uuid128(bytes))
    }
}

impl Serialize for Uuid128 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Uuid128 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_round_trips_through_hex_text_and_json() {
        let id = Uuid128([
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ]);
        assert_eq!(id.to_string(), "00112233445566778899aabbccddeeff");
        assert_eq!(id.to_string().parse::<Uuid128>(), Ok(id));
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<Uuid128>(&json).unwrap(), id);
    }

    #[test]
    fn uuid_rejects_bad_text_without_panicking() {
        for text in [
            "",
            "00",
            "zz112233445566778899aabbccddeeff",
            "é0112233445566778899aabbccddeef",
        ] {
            assert!(text.parse::<Uuid128>().is_err(), "{text:?}");
        }
    }
}
