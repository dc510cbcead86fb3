//! Two helpers for the in-memory tables keyed by encoded keys (the write
//! epochs here; the latches, the version hints and the memory-lock table
//! above): one hash for all of them, and a cache prefetch.
//!
//! Each table is an array far larger than the CPU's caches, so the first
//! touch of a key's entry is a cache miss, and a 1PC write of one key makes
//! four of them one after another (its latch, its memory lock, its bucket's
//! ts ceiling and epoch, its version hint): on the 2-core machine these
//! were a fifth of a single-key update's CPU (perf). A command knows its
//! keys long before it reaches those tables, so it asks for every entry at
//! once, at its start, and the misses overlap each other and the work in
//! between instead of adding up.

/// A 64-bit hash of `bytes`: an FxHash step per 8-byte word (the last one
/// padded with zeros) and the length, then MurmurHash3's 64-bit finalizer,
/// so that keys differing in a few bits of one word spread over every
/// bucket. Not keyed: the tables only lose speed, never correctness, to
/// keys that collide.
#[inline]
pub fn key_hash(bytes: &[u8]) -> u64 {
    let mut hash = bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks of 8"));
        hash = fx_step(hash, word);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        hash = fx_step(hash, u64::from_le_bytes(buf));
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

#[inline]
fn fx_step(hash: u64, word: u64) -> u64 {
    (hash.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95)
}

/// Asks the CPU to bring the cache line holding `value` into its caches,
/// without waiting for it. Only a hint: it changes no memory and cannot
/// fault; a no-op on targets other than x86-64.
#[inline]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 CPU has; it
    // reads no memory (a prefetch of any address is allowed and never
    // faults), and `value` is a valid reference besides.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_hash_alike_and_a_changed_byte_or_length_does_not() {
        assert_eq!(key_hash(b"user0001"), key_hash(b"user0001"));
        assert_ne!(key_hash(b"user0001"), key_hash(b"user0002"));
        // The padding of the last word is not mistaken for bytes.
        assert_ne!(key_hash(b"k"), key_hash(b"k\0"));
        assert_ne!(key_hash(b""), key_hash(b"\0"));
    }

    #[test]
    fn keys_spread_over_small_tables() {
        // 4,096 keys differing in their last byte or two over 64 buckets:
        // none empty, none with more than twice its share.
        let mut counts = [0usize; 64];
        for i in 0..4096u32 {
            let key = format!("key{i:08}");
            counts[(key_hash(key.as_bytes()) % 64) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 0 && c <= 128), "{counts:?}");
    }

    #[test]
    fn prefetch_changes_nothing() {
        let values = [1u64, 2, 3];
        prefetch(&values[1]);
        assert_eq!(values, [1, 2, 3]);
    }
}
