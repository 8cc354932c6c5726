//! The log offset newtype of the broker's API (leader epochs and producer ids come from
//! [`strata_metadata::ids`]). Only what the broker needs: ordering, the next offset, and
//! conversions to and from the wire's and the log's `i64`.

use std::fmt;

/// An offset in a partition's log (Kafka's `int64` offsets; -1 where Kafka means "none").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset(pub i64);

impl Offset {
    /// The offset after this one.
    pub fn next(self) -> Offset {
        Offset(self.0 + 1)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<i64> for Offset {
    fn from(offset: i64) -> Offset {
        Offset(offset)
    }
}

impl From<Offset> for i64 {
    fn from(offset: Offset) -> i64 {
        offset.0
    }
}
