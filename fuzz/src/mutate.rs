//! A small seeded mutation engine for protocol bytes: bit flips, Kafka's boundary values for
//! INT16/INT32 counts and varints, insertions, deletions, duplications and splices of another
//! seed. Deterministic for a seed, so a failure reproduces from the printed seed.

/// xorshift64* generator and the mutations built on it.
pub struct Mutator {
    state: u64,
}

/// Values that sit on a decoder's edges: empty, null (-1), sign boundaries, 2^31-1.
const INTERESTING_32: [i32; 10] = [
    0,
    1,
    -1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0xffff,
    i32::MAX,
    i32::MIN,
];
const INTERESTING_16: [i16; 6] = [0, 1, -1, 0x7f, i16::MAX, i16::MIN];
/// Varints: 2^31 (a compact array of 2^31-1), 2^32-1, and a continuation on every byte.
const VARINTS: [&[u8]; 4] = [
    &[0xff, 0xff, 0xff, 0xff, 0x07],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    &[
        0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
    ],
];

impl Mutator {
    pub fn new(seed: u64) -> Mutator {
        Mutator { state: seed.max(1) }
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// One to four mutations of `base`, sometimes spliced with `other`, at most `max_len` bytes.
    pub fn mutate(&mut self, base: &[u8], other: &[u8], max_len: usize) -> Vec<u8> {
        let mut out = base.to_vec();
        let rounds = 1 + self.below(4);
        for _ in 0..rounds {
            self.mutate_once(&mut out, other);
        }
        out.truncate(max_len);
        out
    }

    fn mutate_once(&mut self, out: &mut Vec<u8>, other: &[u8]) {
        let len = out.len();
        let at = if len == 0 { 0 } else { self.below(len) };
        match self.below(10) {
            0 if len > 0 => out[at] ^= 1 << self.below(8),
            1 if len > 0 => out[at] = self.next_u64() as u8,
            2 if len >= 4 => {
                let v = INTERESTING_32[self.below(INTERESTING_32.len())];
                let at = self.below(len - 3);
                out[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
            3 if len >= 2 => {
                let v = INTERESTING_16[self.below(INTERESTING_16.len())];
                let at = self.below(len - 1);
                out[at..at + 2].copy_from_slice(&v.to_be_bytes());
            }
            4 => {
                let v = VARINTS[self.below(VARINTS.len())];
                if self.below(2) == 0 || len < v.len() {
                    splice_in(out, at, v);
                } else {
                    let at = self.below(len - v.len() + 1);
                    out[at..at + v.len()].copy_from_slice(v);
                }
            }
            5 if len > 0 => {
                let n = 1 + self.below((len - at).min(16));
                out.drain(at..at + n);
            }
            6 if len > 0 => {
                let n = 1 + self.below((len - at).min(32));
                let chunk = out[at..at + n].to_vec();
                splice_in(out, at, &chunk);
            }
            7 if !other.is_empty() => {
                let from = self.below(other.len());
                let n = 1 + self.below((other.len() - from).min(64));
                splice_in(out, at, &other[from..from + n]);
            }
            8 if len > 0 => out.truncate(at),
            _ => {
                let n = 1 + self.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| self.next_u64() as u8).collect();
                splice_in(out, at, &bytes);
            }
        }
    }
}

fn splice_in(out: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    let at = at.min(out.len());
    out.splice(at..at, bytes.iter().copied());
}
