//! Helpers for the in-memory tables keyed by encoded keys (the write
//! epochs here; the latches, the version hints and the memory-lock table
//! above): one hash for all of them, a cache prefetch, and an allocation
//! for the largest of them that the kernel backs with huge pages.
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
    finish(fold(bytes.len() as u64, bytes))
}

/// `bytes` folded into `hash`, an FxHash step per 8-byte word (the last
/// one padded with zeros).
#[inline]
fn fold(mut hash: u64, bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks of 8"));
        hash = fx_step(hash, word);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        hash = fx_step(hash, tail_word(rest));
    }
    hash
}

/// The 1 to 7 bytes of `rest` as a little-endian word padded with zeros,
/// from two overlapping loads rather than a copy into a buffer (a call to
/// `memcpy` for a few bytes, on the path of every table lookup).
#[inline]
fn tail_word(rest: &[u8]) -> u64 {
    let n = rest.len();
    debug_assert!((1..8).contains(&n));
    if n >= 4 {
        let low = u64::from(u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")));
        let high = u64::from(u32::from_le_bytes(
            rest[n - 4..].try_into().expect("4 bytes"),
        ));
        // The bytes the two loads share land on the same bits.
        low | (high << ((n - 4) * 8))
    } else {
        u64::from(rest[0])
            | (u64::from(rest[n / 2]) << (n / 2 * 8))
            | (u64::from(rest[n - 1]) << ((n - 1) * 8))
    }
}

/// MurmurHash3's 64-bit finalizer: keys differing in a few bits of one
/// word spread over every bucket.
#[inline]
fn finish(mut hash: u64) -> u64 {
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

/// A [`Hasher`](std::hash::Hasher) for the hash maps of the in-memory
/// tables, the same steps as [`key_hash`]: a word at a time where a
/// byte-at-a-time hash (FNV) makes a dependent multiply per byte of a key.
/// Not keyed, as `key_hash` is not.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        finish(self.0)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0 = fold(self.0, bytes);
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = fx_step(self.0, n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.0 = fx_step(self.0, n as u64);
    }
}

/// Builds [`KeyHasher`]s, for `HashMap::with_hasher`.
pub type BuildKeyHasher = std::hash::BuildHasherDefault<KeyHasher>;

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

/// A type whose all-zero bytes are a valid value (integers, atomics,
/// arrays and `repr(C)` structs of them), so that a table of it can be a
/// [`ZeroedTable`].
///
/// # Safety
///
/// An implementor must be valid, and in its initial state, as all zeros.
#[allow(unsafe_code)]
pub unsafe trait Zeroable {}

// SAFETY: an atomic integer of zero bytes is zero.
#[allow(unsafe_code)]
unsafe impl Zeroable for std::sync::atomic::AtomicU64 {}

/// The bytes of a huge page, the unit in which the kernel backs memory
/// advised as a [`ZeroedTable`]'s.
const HUGE_PAGE: usize = 2 << 20;

/// A table of zeroed values in memory mapped for it alone, for the tables
/// far larger than the CPU's caches that are read at random, a few lines
/// per key (the version hints, the write epochs).
///
/// Fresh anonymous memory: zero without being written, so it costs
/// nothing until a key touches it; and on Linux the kernel is asked to
/// back it with transparent huge pages (2 MiB, where they are enabled for
/// all memory or for advised memory). A lookup in a table of 4 KiB pages
/// misses the TLB as well as the cache, and walks the page tables before
/// its load can even start; with huge pages, 64 MiB take 32 TLB entries
/// instead of 16,384. Where the kernel gives no huge pages, nothing
/// changes but the advice. (The first touch of each 2 MiB may make the
/// kernel compact memory to find a huge page, per its THP `defrag`
/// setting: a one-time cost per huge page, 48 of them for a region's two
/// tables.)
pub struct ZeroedTable<T> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
}

// SAFETY: the table owns its values, as a `Box<[T]>` would.
#[allow(unsafe_code)]
unsafe impl<T: Send> Send for ZeroedTable<T> {}
// SAFETY: as above; shared access gives out only `&T`.
#[allow(unsafe_code)]
unsafe impl<T: Sync> Sync for ZeroedTable<T> {}

impl<T: Zeroable> ZeroedTable<T> {
    /// A table of `len` values, all zeros. Fails as an allocation does
    /// (aborting) if the memory cannot be mapped; see
    /// [`try_new`](Self::try_new) for a table whose size comes from a
    /// caller.
    pub fn new(len: usize) -> Self {
        match Self::try_new(len) {
            Some(table) => table,
            None => std::alloc::handle_alloc_error(
                std::alloc::Layout::array::<T>(len)
                    .unwrap_or_else(|_| std::alloc::Layout::new::<T>()),
            ),
        }
    }

    /// A table of `len` values, all zeros, or `None` if that many do not
    /// fit in the address space or the memory cannot be mapped.
    pub fn try_new(len: usize) -> Option<Self> {
        const {
            assert!(
                std::mem::align_of::<T>() <= 4096,
                "mappings are page-aligned"
            )
        };
        let layout = std::alloc::Layout::array::<T>(len).ok()?;
        if layout.size() == 0 {
            return Some(ZeroedTable {
                ptr: std::ptr::NonNull::dangling(),
                len,
            });
        }
        // SAFETY: a new private anonymous mapping at an address of the
        // kernel's choosing overlaps nothing of this process.
        #[allow(unsafe_code)]
        let mapped = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                layout.size(),
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        };
        let ptr = mapped
            .ok()
            .and_then(|ptr| std::ptr::NonNull::new(ptr.cast::<T>()))?;
        advise_huge_pages(ptr.as_ptr().cast(), layout.size());
        Some(ZeroedTable { ptr, len })
    }
}

impl<T> std::ops::Deref for ZeroedTable<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `len` values at `ptr`, mapped (or none, at a dangling
        // aligned pointer) and valid as zeros (`Zeroable`), live as long
        // as the table; shared access only.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.len)
        }
    }
}

impl<T> Drop for ZeroedTable<T> {
    fn drop(&mut self) {
        let size = std::mem::size_of::<T>() * self.len;
        // SAFETY: the values are this table's alone and never used again;
        // the mapping (when there is one) is the one `new` made, of
        // `size` bytes.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
            if size != 0 {
                let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), size);
            }
        }
    }
}

impl<T> std::fmt::Debug for ZeroedTable<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeroedTable")
            .field("len", &self.len)
            .finish()
    }
}

/// Asks the kernel to back the whole huge pages within `len` bytes at
/// `start` with huge pages. Only advice: a kernel that refuses (or has
/// them switched off) leaves the memory as it was.
#[cfg(target_os = "linux")]
fn advise_huge_pages(start: *mut u8, len: usize) {
    let first = start.addr().next_multiple_of(HUGE_PAGE);
    let end = (start.addr() + len) & !(HUGE_PAGE - 1);
    if end <= first {
        return;
    }
    // SAFETY: the range lies within a mapping this process just made
    // (rounded inward to whole huge pages), and MADV_HUGEPAGE changes
    // neither its contents nor its validity, only how it is backed.
    #[allow(unsafe_code)]
    let _ = unsafe {
        rustix::mm::madvise(
            start.with_addr(first).cast(),
            end - first,
            rustix::mm::Advice::LinuxHugepage,
        )
    };
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(start: *mut u8, len: usize) {
    let _ = (start, len);
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
    fn a_tail_word_is_its_bytes_padded_with_zeros() {
        let bytes = [0x11u8, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77];
        for n in 1..8 {
            let mut buf = [0u8; 8];
            buf[..n].copy_from_slice(&bytes[..n]);
            assert_eq!(tail_word(&bytes[..n]), u64::from_le_bytes(buf), "{n} bytes");
        }
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
    fn a_zeroed_table_is_zero_and_writable_small_or_huge() {
        use std::sync::atomic::{AtomicU64, Ordering};
        for len in [0, 3, (4 << 20) / 8 + 5] {
            let table = ZeroedTable::<AtomicU64>::new(len);
            assert_eq!(table.len(), len);
            assert!(table.iter().all(|w| w.load(Ordering::Relaxed) == 0));
            if let Some(last) = table.last() {
                last.store(7, Ordering::Relaxed);
                assert_eq!(table[len - 1].load(Ordering::Relaxed), 7);
            }
        }
    }

    #[test]
    fn prefetch_changes_nothing() {
        let values = [1u64, 2, 3];
        prefetch(&values[1]);
        assert_eq!(values, [1, 2, 3]);
    }
}
