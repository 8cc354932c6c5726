//! A global allocator that refuses, loudly, any single allocation above [`LIMIT`].
//!
//! Fuzz inputs are at most a few hundred KiB, so an allocation of more than 64 MiB can only be
//! sized by a count or length read from the input that its bytes cannot back: exactly the bug
//! class that let a 17-byte request abort the broker. Rust cannot unwind out of an allocator, so
//! the guard prints the input being decoded (set by the harness) and aborts; libFuzzer and the
//! smoke test both report an abort as a failure.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// The largest single allocation a decoder may make for a fuzz input.
pub const LIMIT: usize = 64 << 20;

static INPUT_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static INPUT_LEN: AtomicUsize = AtomicUsize::new(0);

/// Records the input being decoded, for the report if the guard trips.
pub fn set_current_input(input: &[u8]) {
    INPUT_PTR.store(input.as_ptr() as *mut u8, Ordering::Relaxed);
    INPUT_LEN.store(input.len(), Ordering::Relaxed);
}

pub struct BoundedAlloc;

impl BoundedAlloc {
    #[cold]
    fn refuse(size: usize) -> ! {
        // No allocation from here on: format into a stack buffer.
        let mut err = std::io::stderr().lock();
        let mut line = [0u8; 96];
        let mut cursor = std::io::Cursor::new(&mut line[..]);
        let _ = write!(
            cursor,
            "alloc_guard: refused an allocation of {size} bytes\n"
        );
        let n = cursor.position() as usize;
        let _ = err.write_all(&line[..n]);
        let ptr = INPUT_PTR.load(Ordering::Relaxed);
        let len = INPUT_LEN.load(Ordering::Relaxed);
        if !ptr.is_null() {
            // SAFETY: the harness keeps the input alive while it is being decoded.
            let input = unsafe { std::slice::from_raw_parts(ptr, len) };
            let _ = err.write_all(b"alloc_guard: input hex: ");
            const HEX: &[u8; 16] = b"0123456789abcdef";
            for chunk in input.chunks(256) {
                let mut out = [0u8; 512];
                for (i, b) in chunk.iter().enumerate() {
                    out[2 * i] = HEX[(b >> 4) as usize];
                    out[2 * i + 1] = HEX[(b & 15) as usize];
                }
                let _ = err.write_all(&out[..2 * chunk.len()]);
            }
            let _ = err.write_all(b"\n");
        }
        std::process::abort()
    }
}

// SAFETY: forwards to the system allocator; only refuses oversized requests (by aborting).
unsafe impl GlobalAlloc for BoundedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT {
            Self::refuse(layout.size());
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT {
            Self::refuse(layout.size());
        }
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > LIMIT {
            Self::refuse(new_size);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
