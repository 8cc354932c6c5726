//! The cleaner's key → latest-offset map (Kafka's `SkimpyOffsetMap`), bounded by a byte budget.
//!
//! Keys are not stored, only a 128-bit digest (XXH3-128) next to the offset: 24 bytes a slot.
//! With 128 bits, two live keys of one partition colliding is practically impossible (about
//! n²/2¹²⁹ for n keys), and a collision is what would make the cleaner drop a live key.
//! The table is open-addressed with double hashing over a prime number of slots, so every
//! probe sequence visits every slot, and it is filled only up to the load factor (0.9 by
//! default, like `log.cleaner.io.buffer.load.factor`), which keeps probes short.
//!
//! The memory is allocated once per cleaner and reused across passes; `clear` resets it.

use twox_hash::XxHash3_128;

/// Bytes per slot: a 128-bit digest and an `i64` offset.
pub const SLOT_BYTES: usize = 24;
const EMPTY: i64 = -1;

#[derive(Debug, Clone, Copy)]
struct Slot {
    digest: [u64; 2],
    offset: i64,
}

const EMPTY_SLOT: Slot = Slot {
    digest: [0, 0],
    offset: EMPTY,
};

/// The memory budget cannot hold a single key at the given load factor.
#[derive(Debug, thiserror::Error)]
#[error("offset map of {budget_bytes} bytes at load factor {load_factor} holds no key; raise log.cleaner.dedupe.buffer.size or lower log.cleaner.threads")]
pub struct OffsetMapTooSmall {
    pub budget_bytes: usize,
    pub load_factor: f64,
}

pub struct OffsetMap {
    slots: Vec<Slot>,
    entries: usize,
    max_entries: usize,
    latest_offset: i64,
}

impl OffsetMap {
    /// A map using at most `budget_bytes` of memory, filled up to `load_factor` of its slots.
    pub fn new(budget_bytes: usize, load_factor: f64) -> Result<Self, OffsetMapTooSmall> {
        let too_small = OffsetMapTooSmall {
            budget_bytes,
            load_factor,
        };
        if !(load_factor > 0.0 && load_factor <= 1.0) {
            return Err(too_small);
        }
        let slot_count = largest_prime_at_most(budget_bytes / SLOT_BYTES).ok_or(too_small)?;
        // At least one slot stays empty so that a lookup of an absent key always terminates.
        let max_entries = ((slot_count as f64 * load_factor) as usize).min(slot_count - 1);
        if max_entries < 1 {
            return Err(OffsetMapTooSmall {
                budget_bytes,
                load_factor,
            });
        }
        Ok(OffsetMap {
            slots: vec![EMPTY_SLOT; slot_count],
            entries: 0,
            max_entries,
            latest_offset: EMPTY,
        })
    }

    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Keys the map accepts before it reports itself full.
    pub fn capacity(&self) -> usize {
        self.max_entries
    }

    /// Fraction of slots in use (Kafka's `bufferUtilization`).
    pub fn utilization(&self) -> f64 {
        self.entries as f64 / self.slots.len() as f64
    }

    pub fn clear(&mut self) {
        self.slots.fill(EMPTY_SLOT);
        self.entries = 0;
        self.latest_offset = EMPTY;
    }

    /// Records `offset` as the latest offset of `key`. Returns `false`, changing nothing, when
    /// the key is new and the map is already at capacity.
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let digest = digest(key);
        let index = self.find(digest);
        let slot = &mut self.slots[index];
        if slot.offset == EMPTY {
            if self.entries >= self.max_entries {
                return false;
            }
            self.entries += 1;
            slot.digest = digest;
        }
        slot.offset = offset;
        true
    }

    /// The latest offset recorded for `key`.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        let slot = &self.slots[self.find(digest(key))];
        (slot.offset != EMPTY).then_some(slot.offset)
    }

    /// The last offset of the section the map covers; records past it were not mapped.
    /// `None` when nothing has been mapped yet.
    pub fn latest_offset(&self) -> Option<i64> {
        (self.latest_offset != EMPTY).then_some(self.latest_offset)
    }

    pub fn update_latest_offset(&mut self, offset: i64) {
        self.latest_offset = self.latest_offset.max(offset);
    }

    /// Index of the slot holding `digest`, or of the empty slot where it belongs. Terminates
    /// because one slot always stays empty (`max_entries < slots`) and the probe step is coprime
    /// with the prime slot count, so the sequence visits every slot.
    fn find(&self, digest: [u64; 2]) -> usize {
        let n = self.slots.len() as u64;
        let mut index = digest[0] % n;
        let step = if n > 1 { 1 + digest[1] % (n - 1) } else { 1 };
        loop {
            let slot = &self.slots[index as usize];
            if slot.offset == EMPTY || slot.digest == digest {
                return index as usize;
            }
            index = (index + step) % n;
        }
    }
}

fn digest(key: &[u8]) -> [u64; 2] {
    let hash = XxHash3_128::oneshot(key);
    [hash as u64, (hash >> 64) as u64]
}

fn largest_prime_at_most(n: usize) -> Option<usize> {
    (2..=n).rev().find(|&candidate| is_prime(candidate))
}

fn is_prime(n: usize) -> bool {
    if n < 4 {
        return n >= 2;
    }
    if n % 2 == 0 {
        return false;
    }
    let mut divisor = 3;
    while divisor * divisor <= n {
        if n % divisor == 0 {
            return false;
        }
        divisor += 2;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_offset_per_key() {
        let mut map = OffsetMap::new(24 * 1000, 0.9).unwrap();
        assert!(map.put(b"a", 1));
        assert!(map.put(b"b", 2));
        assert!(map.put(b"a", 7));
        assert_eq!(map.get(b"a"), Some(7));
        assert_eq!(map.get(b"b"), Some(2));
        assert_eq!(map.get(b"c"), None);
        assert_eq!(map.len(), 2);
        map.clear();
        assert_eq!(map.get(b"a"), None);
        assert!(map.is_empty());
        assert_eq!(map.latest_offset(), None);
    }

    #[test]
    fn stays_within_its_byte_budget_and_reports_full() {
        let budget = 24 * 100;
        let mut map = OffsetMap::new(budget, 0.9).unwrap();
        assert_eq!(map.slot_count(), 97, "largest prime <= 100 slots");
        assert!(map.slot_count() * SLOT_BYTES <= budget);
        assert_eq!(map.capacity(), 87);
        for i in 0..87u32 {
            assert!(map.put(&i.to_be_bytes(), i64::from(i)));
        }
        assert!(
            !map.put(b"one too many", 1),
            "a new key is refused when full"
        );
        assert!(
            map.put(&5u32.to_be_bytes(), 500),
            "an existing key can still move forward"
        );
        for i in 0..87u32 {
            let expected = if i == 5 { 500 } else { i64::from(i) };
            assert_eq!(map.get(&i.to_be_bytes()), Some(expected));
        }
    }

    #[test]
    fn a_budget_below_one_key_is_an_error() {
        assert!(OffsetMap::new(24, 0.9).is_err());
        assert!(OffsetMap::new(0, 0.9).is_err());
        assert!(OffsetMap::new(24 * 100, 0.0).is_err());
        assert!(OffsetMap::new(24 * 2, 0.9).is_ok());
    }

    #[test]
    fn a_full_map_still_answers_lookups_of_absent_keys() {
        let mut map = OffsetMap::new(24 * 5, 1.0).unwrap();
        assert_eq!(map.capacity(), 4, "one of the 5 slots always stays empty");
        for i in 0..4u8 {
            assert!(map.put(&[i], i64::from(i)));
        }
        assert_eq!(map.get(b"absent"), None);
    }

    #[test]
    fn latest_offset_only_moves_forward() {
        let mut map = OffsetMap::new(24 * 10, 0.9).unwrap();
        map.update_latest_offset(10);
        map.update_latest_offset(4);
        assert_eq!(map.latest_offset(), Some(10));
    }
}
