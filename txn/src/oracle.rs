//! The timestamp oracle: Percolator's TSO, TiKV's PD timestamps, in process.
//!
//! Every transaction takes its `start_ts` (and, in 2PC, its `commit_ts`)
//! from a [`TimestampOracle`]. Snapshot isolation rests on one property: a
//! timestamp is greater than every timestamp handed out before it, across
//! threads and across restarts. Timestamps are `physical_ms << 18 |
//! logical` ([`TimeStamp::compose`]).
//!
//! # [`LocalOracle`]
//!
//! * **Fast path.** One `AtomicU64` holds the last timestamp handed out;
//!   `get_ts` takes a `fetch_add(1)`, reads the coarse clock
//!   ([`Clock::coarse_now_ms`]) and loads the durable limit. Where the
//!   number it took is behind the clock (once per clock tick) it raises
//!   the counter to `now_ms << 18` (`fetch_max`) and takes again; a
//!   counter at or ahead of the clock is left as it is, so timestamps stay
//!   increasing whatever the clock does.
//!   No lock, no system call: the coarse clock is a read of the time the
//!   kernel keeps for its own tick (the vDSO's `CLOCK_REALTIME_COARSE`, 3
//!   ns on this project's machine against 20 ns for the precise clock).
//! * **Following the clock.** So the physical part tracks the wall clock,
//!   within the kernel's tick (4 ms here); lock TTLs are judged on it. A
//!   clock that goes backwards changes nothing: the counter keeps going
//!   from the last timestamp. When more than 2^18 timestamps are taken in
//!   one millisecond the logical part carries into the physical part, which
//!   then runs ahead of the clock until the clock catches up. A background
//!   ticker thread wakes every 50 ms to extend the durable limit ahead
//!   of the clock (below) and to keep an idle counter on it. It used to
//!   wake every millisecond and be the only thing that moved the counter:
//!   on two busy cores its 1,000 wake-ups a second each preempted a
//!   worker, and 4-thread single-key updates context-switched 15,300 times
//!   in a 2-second run against 9,600 with the ticker every 50 ms.
//! * **Durable high-water mark.** The file `<dir>/TIMESTAMP` holds a
//!   physical limit, [`PERSIST_WINDOW_MS`] ahead of the clock. No timestamp
//!   at or above `limit << 18` is handed out until a larger limit is on
//!   disk. On open, the counter starts above both `limit << 18` and
//!   `now << 18`, so timestamps never repeat after a crash, even if the
//!   wall clock was set back meanwhile. The ticker extends the limit before
//!   it is reached (once the clock comes within half a window of it), so
//!   `get_ts` normally never waits for an fsync; a caller that does reach
//!   the limit (a burst that carries the logical part far ahead) extends it
//!   itself, under a mutex. An oracle that is dropped (a clean close) lowers
//!   the limit on disk to just above the last timestamp it handed out, so
//!   the next open starts there: only a crash leaves the oracle up to a
//!   window ahead of the clock.
//!
//! Only one `LocalOracle` may use a directory at a time; two of them would
//! hand out the same timestamps.
//!
//! # File format
//!
//! `TIMESTAMP` is 20 bytes, replaced atomically (write `TIMESTAMP.tmp`,
//! fsync it, rename it over `TIMESTAMP`, fsync the directory):
//!
//! | offset | size | field                                        |
//! |-------:|-----:|----------------------------------------------|
//! | 0      | 4    | magic `b"PTSO"`                              |
//! | 4      | 4    | format version, big-endian u32 (1)           |
//! | 8      | 8    | limit: physical ms, big-endian u64           |
//! | 16     | 4    | crc32 (IEEE) of bytes 0..16, big-endian u32  |
//!
//! A file of another length, with another magic or version, or with a bad
//! checksum makes [`LocalOracle::open`] fail with
//! [`Error::OracleCorrupted`] and leaves the file untouched: an oracle that
//! does not know where it stopped must not start. So does anything at
//! that name but a regular file of at most 20 bytes (a symbolic link, a
//! FIFO, a device): it is refused before anything is read from it. The
//! temporary file is always created anew, so a link planted at its name is
//! replaced, never written through.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{RecvTimeoutError, Sender};
use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};
use percolate_mvcc::{TSO_PHYSICAL_SHIFT_BITS, TimeStamp};

use crate::{Error, Result};

/// Hands out timestamps.
pub trait TimestampOracle: Send + Sync + 'static {
    /// A timestamp greater than every timestamp handed out before (by this
    /// oracle, across restarts).
    fn get_ts(&self) -> Result<TimeStamp>;

    /// `count` (>= 1) consecutive timestamps; returns the first; the batch
    /// is `[first, first + count)`. A `count` of zero is
    /// [`Error::InvalidRequest`].
    fn get_ts_batch(&self, count: u32) -> Result<TimeStamp>;

    /// Makes every timestamp handed out from now on greater than `ts`:
    /// called before a read at a timestamp the oracle may not have handed
    /// out yet (a snapshot at a chosen, future timestamp). Such a read
    /// raises the regions' `max_ts`, and the async-commit and 1PC commits
    /// after it are computed above it; a transaction that begins after one
    /// of them returned must read at a start_ts above that commit, or it
    /// would miss it.
    ///
    /// The default does nothing, for an oracle that only ever serves reads
    /// at its own timestamps; [`LocalOracle`] and [`CounterOracle`] move
    /// their counter. A `ts` beyond the oracle's range is
    /// [`Error::TimestampBeyondRange`].
    fn advance_past(&self, ts: TimeStamp) -> Result<()> {
        let _ = ts;
        Ok(())
    }
}

/// Wall-clock milliseconds since the Unix epoch; injectable.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch now.
    fn now_ms(&self) -> u64;

    /// [`now_ms`](Self::now_ms) as a cheaper read that may lag it by a few
    /// milliseconds, never run ahead of it; read on every timestamp a
    /// [`LocalOracle`] hands out. Defaults to `now_ms`.
    fn coarse_now_ms(&self) -> u64 {
        self.now_ms()
    }
}

/// The system's wall clock ([`SystemTime::now`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    /// Milliseconds since the Unix epoch; 0 for a clock set before 1970.
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    /// The kernel's coarse wall clock (`CLOCK_REALTIME_COARSE`): the time
    /// of its last tick, read from the vDSO without a system call. 0 for a
    /// clock set before 1970.
    #[inline]
    fn coarse_now_ms(&self) -> u64 {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        u64::try_from(now.tv_sec).map_or(0, |secs| {
            secs.saturating_mul(1000) + u64::try_from(now.tv_nsec / 1_000_000).unwrap_or(0)
        })
    }
}

/// A clock that moves only when told to, forwards or backwards: for tests.
///
/// Share it as an `Arc<ManualClock>` and keep a handle to move it while an
/// oracle or a region reads it.
#[derive(Debug, Default)]
pub struct ManualClock {
    ms: AtomicU64,
}

impl ManualClock {
    /// A clock that reads `ms`.
    pub fn new(ms: u64) -> Self {
        ManualClock {
            ms: AtomicU64::new(ms),
        }
    }

    /// Sets the time to `ms`, which may be earlier than now.
    pub fn set(&self, ms: u64) {
        self.ms.store(ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.ms.load(Ordering::SeqCst)
    }
}

/// How far ahead of the clock the durable limit is set, in milliseconds.
///
/// Defaults to 3000, as PD's `tso-save-interval`: one fsync every 1.5 s of
/// wall time, and after a crash the physical part restarts at most 3 s
/// ahead of the clock.
pub const PERSIST_WINDOW_MS: u64 = 3000;

/// How often the ticker wakes: to extend the durable limit when the clock
/// nears it (every [`PERSIST_WINDOW_MS`] / 2), and to move an idle counter
/// up to the clock. `get_ts` follows the clock itself. PD, which TiKV
/// takes its timestamps from, moves its physical part every 50 ms too.
const TICK: Duration = Duration::from_millis(50);

/// The largest physical part a timestamp can carry (46 bits).
const MAX_PHYSICAL: u64 = (1 << (64 - TSO_PHYSICAL_SHIFT_BITS)) - 1;

/// The largest limit accepted from disk: one window below the top, so a
/// limit can always be extended once more.
const MAX_LIMIT: u64 = MAX_PHYSICAL - PERSIST_WINDOW_MS;

/// Whether `ts` is beyond the timestamps an oracle can be opened above:
/// its physical part at or past the largest limit (about the year 4199).
/// Such a timestamp in the data would leave a reopened oracle no room
/// above it, so no command writes one ([`Error::TimestampBeyondRange`]).
pub fn beyond_range(ts: TimeStamp) -> bool {
    ts.physical() >= MAX_LIMIT
}

/// The largest timestamp not [`beyond_range`].
pub const fn last_in_range() -> TimeStamp {
    TimeStamp::new((MAX_LIMIT << TSO_PHYSICAL_SHIFT_BITS) - 1)
}

/// The name of the state file inside the oracle's directory.
const FILE_NAME: &str = "TIMESTAMP";
/// The name of the file written before it is renamed over [`FILE_NAME`].
const TMP_FILE_NAME: &str = "TIMESTAMP.tmp";

const MAGIC: [u8; 4] = *b"PTSO";
const VERSION: u32 = 1;
const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
const LIMIT_OFFSET: usize = VERSION_OFFSET + size_of::<u32>();
const CRC_OFFSET: usize = LIMIT_OFFSET + size_of::<u64>();
const FILE_LEN: usize = CRC_OFFSET + size_of::<u32>();

/// The counter value of `physical` ms with logical part 0, the physical
/// part capped at 46 bits so the shift never drops bits.
fn ts_of_physical(physical: u64) -> u64 {
    physical.min(MAX_PHYSICAL) << TSO_PHYSICAL_SHIFT_BITS
}

/// Encodes the state file (see the module doc's table).
fn encode_state(limit: u64) -> [u8; FILE_LEN] {
    let mut buf = [0u8; FILE_LEN];
    buf[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&MAGIC);
    buf[VERSION_OFFSET..LIMIT_OFFSET].copy_from_slice(&VERSION.to_be_bytes());
    buf[LIMIT_OFFSET..CRC_OFFSET].copy_from_slice(&limit.to_be_bytes());
    let crc = crc32fast::hash(&buf[..CRC_OFFSET]);
    buf[CRC_OFFSET..].copy_from_slice(&crc.to_be_bytes());
    buf
}

/// Decodes the state file; the error is the reason it is rejected.
fn decode_state(buf: &[u8]) -> std::result::Result<u64, String> {
    if buf.len() != FILE_LEN {
        return Err(format!("length {} (expected {FILE_LEN})", buf.len()));
    }
    let field = |range: std::ops::Range<usize>| &buf[range];
    if field(MAGIC_OFFSET..VERSION_OFFSET) != MAGIC {
        return Err(format!(
            "bad magic {:02x?}",
            field(MAGIC_OFFSET..VERSION_OFFSET)
        ));
    }
    let crc = u32::from_be_bytes(field(CRC_OFFSET..FILE_LEN).try_into().unwrap_or_default());
    let actual = crc32fast::hash(field(0..CRC_OFFSET));
    if crc != actual {
        return Err(format!(
            "crc mismatch: stored {crc:08x}, computed {actual:08x}"
        ));
    }
    let version = u32::from_be_bytes(
        field(VERSION_OFFSET..LIMIT_OFFSET)
            .try_into()
            .unwrap_or_default(),
    );
    if version != VERSION {
        return Err(format!("unknown version {version}"));
    }
    let limit = u64::from_be_bytes(
        field(LIMIT_OFFSET..CRC_OFFSET)
            .try_into()
            .unwrap_or_default(),
    );
    if limit > MAX_LIMIT {
        return Err(format!(
            "limit {limit} ms is beyond the 46-bit physical range"
        ));
    }
    Ok(limit)
}

/// The state file and how to replace it atomically.
#[derive(Debug)]
struct StateFile {
    dir: PathBuf,
    path: PathBuf,
    tmp_path: PathBuf,
}

impl StateFile {
    fn new(dir: &Path) -> Self {
        StateFile {
            dir: dir.to_path_buf(),
            path: dir.join(FILE_NAME),
            tmp_path: dir.join(TMP_FILE_NAME),
        }
    }

    fn io_error(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
        move |source| Error::OracleIo {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The stored limit; `None` when there is no file yet.
    ///
    /// Only a small regular file is read: a symlink (which could point
    /// anywhere, `/dev/zero` say), a FIFO, a device or a file longer than
    /// the format's 20 bytes is refused as corrupted, before anything is
    /// read from it.
    fn load(&self) -> Result<Option<u64>> {
        let corrupted = |reason: String| Error::OracleCorrupted {
            path: self.path.clone(),
            reason,
        };
        match fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(corrupted("a symbolic link, not the oracle's file".into()));
            }
            // Checked before opening too: opening a FIFO waits for a writer.
            Ok(meta) if !meta.file_type().is_file() => {
                return Err(corrupted(format!(
                    "not a regular file ({:?})",
                    meta.file_type()
                )));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::io_error(&self.path)(e)),
        }
        let file = File::open(&self.path).map_err(Self::io_error(&self.path))?;
        // What was opened, not what the name pointed to a moment before.
        let meta = file.metadata().map_err(Self::io_error(&self.path))?;
        if !meta.file_type().is_file() {
            return Err(corrupted(format!(
                "not a regular file ({:?})",
                meta.file_type()
            )));
        }
        if meta.len() > FILE_LEN as u64 {
            return Err(corrupted(format!(
                "length {} (expected {FILE_LEN})",
                meta.len()
            )));
        }
        let mut buf = Vec::with_capacity(FILE_LEN);
        io::Read::read_to_end(&mut io::Read::take(file, FILE_LEN as u64 + 1), &mut buf)
            .map_err(Self::io_error(&self.path))?;
        decode_state(&buf).map(Some).map_err(corrupted)
    }

    /// Durably replaces the stored limit with `limit`.
    ///
    /// The temporary file is created anew (`O_CREAT | O_EXCL`, which never
    /// follows a symbolic link) after removing whatever has its name: a
    /// link planted there is removed, not written through.
    fn store(&self, limit: u64) -> Result<()> {
        match fs::remove_file(&self.tmp_path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Self::io_error(&self.tmp_path)(e)),
        }
        let mut tmp = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.tmp_path)
            .map_err(Self::io_error(&self.tmp_path))?;
        tmp.write_all(&encode_state(limit))
            .and_then(|()| tmp.sync_all())
            .map_err(Self::io_error(&self.tmp_path))?;
        drop(tmp);
        fs::rename(&self.tmp_path, &self.path).map_err(Self::io_error(&self.path))?;
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(Self::io_error(&self.dir))
    }
}

/// The state shared by a [`LocalOracle`] and its ticker thread.
///
/// Invariant: every timestamp handed out is below `limit`, and `limit` is
/// only ever raised, and only after the physical limit it encodes is
/// durable in `file`. So no timestamp handed out is at or above the limit
/// on disk, and an oracle reopened above that limit never repeats one.
struct Shared {
    /// The last timestamp taken from the counter (handed out, or skipped
    /// by the ticker). Only ever increases. Alone in its cache line: every
    /// `get_ts` writes it, and the fields it only reads (the limit, the
    /// clock) then stay in every core's cache instead of moving with it.
    last: CachePadded<AtomicU64>,
    /// The durable limit as a timestamp (`limit_ms << 18`).
    limit: AtomicU64,
    /// Serializes writers of the state file and of `limit`.
    file: Mutex<StateFile>,
    clock: Arc<dyn Clock>,
    /// Whether `allocate` moves the counter up to the clock itself (off
    /// for the simulator's oracle, which follows the clock only when the
    /// simulation ticks it).
    follows_clock: bool,
}

impl Shared {
    /// Takes `count` timestamps and returns the first.
    #[inline]
    fn allocate(&self, count: u64) -> Result<TimeStamp> {
        let mut prev = self.last.fetch_add(count, Ordering::Relaxed);
        if self.follows_clock {
            let now = ts_of_physical(self.clock.coarse_now_ms().min(MAX_LIMIT));
            if prev < now {
                // Behind the clock (once per clock tick): the counter goes
                // up to it, and the timestamps are taken again above it
                // (those just taken are skipped). Taken first and checked
                // after, rather than loaded and compared first: a load
                // before the add costs threads that share the counter a
                // second transfer of its cache line.
                self.last.fetch_max(now, Ordering::Relaxed);
                prev = self.last.fetch_add(count, Ordering::Relaxed);
            }
        }
        // Saturates only at the top of the range, which `extend_limit`
        // then reports as exhausted.
        let last = prev.saturating_add(count);
        // The limit only grows, and every value it holds is durable: a
        // timestamp below the value loaded here (after it was taken) is
        // below the limit on disk.
        if last >= self.limit.load(Ordering::Acquire) {
            self.extend_limit(last)?;
        }
        Ok(TimeStamp::new(prev + 1))
    }

    /// Moves the counter up to `ts` (if below it), after making the
    /// durable limit exceed it: a crash then restarts the counter above
    /// it, as it does above every timestamp handed out.
    fn advance_past(&self, ts: TimeStamp) -> Result<()> {
        if beyond_range(ts) {
            return Err(Error::TimestampBeyondRange { ts });
        }
        let ts = ts.into_inner();
        if ts >= self.limit.load(Ordering::Acquire) {
            self.extend_limit(ts)?;
        }
        self.last.fetch_max(ts, Ordering::Relaxed);
        Ok(())
    }

    /// Makes the durable limit exceed `last` (slow path).
    #[cold]
    fn extend_limit(&self, last: u64) -> Result<()> {
        let file = self.file.lock();
        if last < self.limit.load(Ordering::Acquire) {
            return Ok(()); // Another thread extended it meanwhile.
        }
        let physical = TimeStamp::new(last).physical().max(self.clock.now_ms());
        self.persist(&file, physical.saturating_add(PERSIST_WINDOW_MS))?;
        if last >= self.limit.load(Ordering::Acquire) {
            // Only when the physical part nears 2^46 ms (the year 4199).
            return Err(Error::OracleIo {
                path: file.path.clone(),
                source: io::Error::other("the 46-bit physical part of timestamps is exhausted"),
            });
        }
        Ok(())
    }

    /// Writes `limit_ms` (capped at 46 bits) to disk, then publishes it.
    fn persist(&self, file: &MutexGuard<'_, StateFile>, limit_ms: u64) -> Result<()> {
        let limit_ms = limit_ms.min(MAX_PHYSICAL);
        file.store(limit_ms)?;
        self.limit
            .fetch_max(ts_of_physical(limit_ms), Ordering::Release);
        Ok(())
    }

    /// One ticker step: moves the counter up to the clock and extends the
    /// limit once the clock is within half a window of it.
    fn tick(&self) {
        let now = self.clock.now_ms().min(MAX_LIMIT);
        self.last.fetch_max(ts_of_physical(now), Ordering::Relaxed);
        let limit_ms = self.limit.load(Ordering::Acquire) >> TSO_PHYSICAL_SHIFT_BITS;
        if now.saturating_add(PERSIST_WINDOW_MS / 2) >= limit_ms {
            let file = self.file.lock();
            let current = self.limit.load(Ordering::Acquire) >> TSO_PHYSICAL_SHIFT_BITS;
            if now.saturating_add(PERSIST_WINDOW_MS / 2) >= current {
                let last = TimeStamp::new(self.last.load(Ordering::Relaxed)).physical();
                // A failure is left for the caller that reaches the limit
                // to retry and report.
                let _ = self.persist(&file, now.max(last).saturating_add(PERSIST_WINDOW_MS));
            }
        }
    }
}

/// The background thread that keeps a [`LocalOracle`] on the clock; stopped
/// and joined on drop.
struct Ticker {
    stop: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Starts the thread; failing to start it is an I/O error on `dir`.
    fn spawn(shared: Arc<Shared>, dir: &Path) -> Result<Self> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let handle = std::thread::Builder::new()
            .name("tso-ticker".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(TICK) {
                    shared.tick();
                }
            })
            .map_err(StateFile::io_error(dir))?;
        Ok(Ticker {
            stop: Some(stop),
            handle: Some(handle),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take()); // Disconnects the channel: the thread exits.
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// A timestamp oracle for one process, persisted in a directory: see the
/// module doc for its design and file format.
///
/// Invariant: timestamps are strictly increasing across threads and
/// restarts, and none is handed out at or above the limit on disk.
pub struct LocalOracle {
    dir: PathBuf,
    shared: Arc<Shared>,
    /// `None` once stopped, in drop.
    ticker: Option<Ticker>,
}

impl Drop for LocalOracle {
    /// Stops the ticker, then lowers the limit on disk to just above the
    /// last timestamp handed out: nothing can take one any more, so the
    /// next open may start right there instead of a whole window ahead.
    /// Without it, every short-lived process would move the oracle
    /// [`PERSIST_WINDOW_MS`] ahead of the clock (200 one-shot commands in
    /// 9 s put it 10 minutes ahead), and the locks of a crashed client,
    /// whose TTL counts from its timestamps, would stay unresolvable for
    /// as long. After a crash the window stays: the limit on disk is all
    /// that is known then. A failure to write is ignored: the stored
    /// limit, still above every timestamp, remains.
    fn drop(&mut self) {
        drop(self.ticker.take());
        let file = self.shared.file.lock();
        let last = TimeStamp::new(self.shared.last.load(Ordering::SeqCst));
        let above_last = last.physical().saturating_add(1);
        let limit_ms = self.shared.limit.load(Ordering::Acquire) >> TSO_PHYSICAL_SHIFT_BITS;
        if above_last < limit_ms {
            let _ = file.store(above_last);
        }
    }
}

impl LocalOracle {
    /// Opens (creating) the oracle whose state file lives in `dir` (file
    /// name `TIMESTAMP`), on the system clock.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with_clock(dir, Arc::new(SystemClock))
    }

    /// Opens (creating) the oracle whose state file lives in `dir`, on
    /// `clock`.
    ///
    /// The first timestamp is above both the stored limit and the clock.
    /// A new limit is persisted before this returns, so an unwritable
    /// directory fails here. A damaged file is [`Error::OracleCorrupted`]
    /// and is left as it is.
    pub fn open_with_clock(dir: impl AsRef<Path>, clock: Arc<dyn Clock>) -> Result<Self> {
        Self::open_above(dir, clock, TimeStamp::zero())
    }

    /// Opens the oracle as [`open_with_clock`](Self::open_with_clock)
    /// does, its first timestamp also above `floor`: a timestamp the data
    /// it serves holds nothing above (for RocksDB,
    /// [`RocksEngine::persisted_ts_ceiling`](percolate_engine::RocksEngine::persisted_ts_ceiling)).
    /// So an oracle whose state file was lost, or a clock that runs behind
    /// the one the data was written under, never hands out a timestamp
    /// below a commit already there.
    pub fn open_above(
        dir: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        floor: TimeStamp,
    ) -> Result<Self> {
        Self::open_inner(dir.as_ref(), clock, floor, true)
    }

    /// [`open_above`](Self::open_above), with the ticker thread and a
    /// counter that follows the clock on every `get_ts` when `ticking`.
    fn open_inner(
        dir: &Path,
        clock: Arc<dyn Clock>,
        floor: TimeStamp,
        ticking: bool,
    ) -> Result<Self> {
        if beyond_range(floor) {
            return Err(Error::TimestampBeyondRange { ts: floor });
        }
        fs::create_dir_all(dir).map_err(StateFile::io_error(dir))?;
        let file = StateFile::new(dir);
        let stored = file.load()?.unwrap_or(0);
        // The first physical part above the floor's: the first timestamp
        // (logical 0 of it) is then above the floor.
        let above_floor = if floor.is_zero() {
            0
        } else {
            floor.physical().saturating_add(1)
        };
        let start_ms = stored.max(clock.now_ms()).max(above_floor).min(MAX_LIMIT);
        let shared = Arc::new(Shared {
            last: CachePadded::new(AtomicU64::new(ts_of_physical(start_ms))),
            limit: AtomicU64::new(ts_of_physical(stored)),
            file: Mutex::new(file),
            clock,
            follows_clock: ticking,
        });
        {
            let file = shared.file.lock();
            shared.persist(&file, start_ms + PERSIST_WINDOW_MS)?;
        }
        let ticker = if ticking {
            Some(Ticker::spawn(Arc::clone(&shared), dir)?)
        } else {
            None
        };
        Ok(LocalOracle {
            dir: dir.to_path_buf(),
            shared,
            ticker,
        })
    }
}

/// The deterministic simulator's seam (`percolate-sim`), with the `sim`
/// feature only: an oracle whose ticker is a method the simulation calls,
/// and a crash that skips the clean close. A default build has none of
/// this.
#[cfg(any(test, feature = "sim"))]
impl LocalOracle {
    /// Opens the oracle as [`open_above`](Self::open_above) does, without
    /// the ticker thread and without reading the clock in `get_ts`: the
    /// counter follows the clock only when [`tick`](Self::tick) is called,
    /// so a single-threaded simulation decides when that happens.
    pub fn open_manual(
        dir: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        floor: TimeStamp,
    ) -> Result<Self> {
        Self::open_inner(dir.as_ref(), clock, floor, false)
    }

    /// One step of the ticker: moves the counter up to the clock and
    /// extends the durable limit when the clock nears it.
    pub fn tick(&self) {
        self.shared.tick();
    }

    /// Drops the oracle as a crash would: the durable limit stays where it
    /// is on disk (a clean drop lowers it to just above the last timestamp
    /// handed out), so a reopen starts above it.
    pub fn crash(mut self) {
        drop(self.ticker.take());
        // With the counter at the top, the drop finds nothing to lower:
        // the file keeps the limit the crash found there.
        self.shared
            .last
            .store(ts_of_physical(MAX_PHYSICAL), Ordering::SeqCst);
    }
}

impl TimestampOracle for LocalOracle {
    #[inline]
    fn get_ts(&self) -> Result<TimeStamp> {
        self.shared.allocate(1)
    }

    fn get_ts_batch(&self, count: u32) -> Result<TimeStamp> {
        check_batch(count)?;
        self.shared.allocate(u64::from(count))
    }

    fn advance_past(&self, ts: TimeStamp) -> Result<()> {
        self.shared.advance_past(ts)
    }
}

impl fmt::Debug for LocalOracle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalOracle")
            .field("dir", &self.dir)
            .field(
                "last",
                &TimeStamp::new(self.shared.last.load(Ordering::Relaxed)),
            )
            .field(
                "limit",
                &TimeStamp::new(self.shared.limit.load(Ordering::Relaxed)),
            )
            .finish()
    }
}

/// Rejects an empty batch.
fn check_batch(count: u32) -> Result<()> {
    if count == 0 {
        return Err(Error::InvalidRequest {
            reason: "get_ts_batch needs a count of at least 1",
            key: None,
        });
    }
    Ok(())
}

/// A simple counter oracle for tests (no persistence): the first timestamp
/// is `start`, and each timestamp is one more than the one before.
#[derive(Debug)]
pub struct CounterOracle {
    next: AtomicU64,
}

impl CounterOracle {
    /// An oracle whose first timestamp is `start`.
    pub fn new(start: u64) -> Self {
        CounterOracle {
            next: AtomicU64::new(start),
        }
    }

    /// Takes `count` timestamps and returns the first; never wraps past
    /// `TimeStamp::max()` (which it does not hand out) back to zero.
    fn take(&self, count: u64) -> Result<TimeStamp> {
        self.next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |next| {
                next.checked_add(count)
            })
            .map(TimeStamp::new)
            .map_err(|next| Error::TimestampBeyondRange {
                ts: TimeStamp::new(next),
            })
    }
}

impl TimestampOracle for CounterOracle {
    fn get_ts(&self) -> Result<TimeStamp> {
        self.take(1)
    }

    fn get_ts_batch(&self, count: u32) -> Result<TimeStamp> {
        check_batch(count)?;
        self.take(u64::from(count))
    }

    fn advance_past(&self, ts: TimeStamp) -> Result<()> {
        let next = ts
            .into_inner()
            .checked_add(1)
            .ok_or(Error::TimestampBeyondRange { ts })?;
        self.next.fetch_max(next, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// 2024-01-01T00:00:00Z.
    const T0: u64 = 1_704_067_200_000;

    fn manual(ms: u64) -> (Arc<ManualClock>, Arc<dyn Clock>) {
        let clock = Arc::new(ManualClock::new(ms));
        (Arc::clone(&clock), clock)
    }

    fn stored_limit(dir: &Path) -> u64 {
        decode_state(&fs::read(dir.join(FILE_NAME)).unwrap()).unwrap()
    }

    #[test]
    fn strictly_increasing_under_four_threads() {
        let dir = tempfile::tempdir().unwrap();
        let oracle = Arc::new(LocalOracle::open(dir.path()).unwrap());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let oracle = Arc::clone(&oracle);
                std::thread::spawn(move || {
                    (0..100_000)
                        .map(|_| oracle.get_ts().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = Vec::new();
        for handle in handles {
            let seen = handle.join().unwrap();
            assert!(seen.windows(2).all(|w| w[0] < w[1]), "per-thread decrease");
            all.extend(seen);
        }
        let total = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), total, "duplicate timestamps");
        // Happens-before across threads: a ts taken after the joins is
        // above all of them.
        assert!(oracle.get_ts().unwrap() > *all.last().unwrap());
    }

    #[test]
    fn batches_do_not_overlap_singles() {
        let dir = tempfile::tempdir().unwrap();
        let oracle = Arc::new(LocalOracle::open(dir.path()).unwrap());
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let oracle = Arc::clone(&oracle);
                std::thread::spawn(move || {
                    let mut ranges = Vec::new();
                    for i in 0..20_000u64 {
                        let count = if (i + t) % 3 == 0 {
                            1 + (i % 100) as u32
                        } else {
                            1
                        };
                        let first = if count == 1 && i % 2 == 0 {
                            oracle.get_ts().unwrap()
                        } else {
                            oracle.get_ts_batch(count).unwrap()
                        };
                        ranges.push((first.into_inner(), first.into_inner() + u64::from(count)));
                    }
                    ranges
                })
            })
            .collect();
        let mut ranges: Vec<(u64, u64)> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        ranges.sort();
        for pair in ranges.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "overlap: {pair:?}");
        }
    }

    #[test]
    fn restart_never_repeats_even_with_clock_set_back() {
        let dir = tempfile::tempdir().unwrap();
        let (clock, dyn_clock) = manual(T0);
        let oracle = LocalOracle::open_with_clock(dir.path(), Arc::clone(&dyn_clock)).unwrap();
        let mut last = TimeStamp::zero();
        for _ in 0..1000 {
            last = oracle.get_ts().unwrap();
        }
        // A burst that carries the logical part well past the first limit.
        last = last.max(oracle.get_ts_batch(u32::MAX).unwrap());
        last = last.max(oracle.get_ts().unwrap());
        drop(oracle);

        clock.set(T0 - 3_600_000);
        let reopened = LocalOracle::open_with_clock(dir.path(), Arc::clone(&dyn_clock)).unwrap();
        let first = reopened.get_ts().unwrap();
        assert!(first > last, "{first:?} <= {last:?} after restart");
        drop(reopened);

        // And again without anything handed out in between.
        let again = LocalOracle::open_with_clock(dir.path(), dyn_clock).unwrap();
        assert!(again.get_ts().unwrap() > first);
    }

    #[test]
    fn first_ts_is_above_the_clock_and_the_stored_limit() {
        let dir = tempfile::tempdir().unwrap();
        let (_clock, dyn_clock) = manual(T0);
        let oracle = LocalOracle::open_with_clock(dir.path(), Arc::clone(&dyn_clock)).unwrap();
        let ts = oracle.get_ts().unwrap();
        assert!(ts > TimeStamp::compose(T0, 0));
        assert_eq!(ts.physical(), T0);
        drop(oracle);
        let limit = stored_limit(dir.path());
        let reopened = LocalOracle::open_with_clock(dir.path(), dyn_clock).unwrap();
        assert!(reopened.get_ts().unwrap() > TimeStamp::compose(limit, 0));
    }

    #[test]
    fn physical_part_follows_the_clock_forward_not_backward() {
        let dir = tempfile::tempdir().unwrap();
        let (clock, dyn_clock) = manual(T0);
        let oracle = LocalOracle::open_with_clock(dir.path(), dyn_clock).unwrap();
        assert_eq!(oracle.get_ts().unwrap().physical(), T0);

        // The very next timestamp is on the clock: `get_ts` follows it
        // itself, without waiting for the ticker.
        let target = T0 + 10_000;
        clock.set(target);
        let ts = oracle.get_ts().unwrap();
        assert_eq!(ts, TimeStamp::compose(target, 1), "not on the clock");

        clock.set(T0);
        std::thread::sleep(Duration::from_millis(20));
        let after = oracle.get_ts().unwrap();
        assert!(after > ts);
        assert_eq!(after.physical(), target, "kept going from the last ts");
    }

    #[test]
    fn the_simulators_oracle_follows_the_clock_only_when_ticked() {
        let dir = tempfile::tempdir().unwrap();
        let (clock, dyn_clock) = manual(T0);
        let oracle = LocalOracle::open_manual(dir.path(), dyn_clock, TimeStamp::zero()).unwrap();
        clock.set(T0 + 500);
        let before = oracle.get_ts().unwrap();
        assert_eq!(before.physical(), T0, "moved without a tick");
        oracle.tick();
        let after = oracle.get_ts().unwrap();
        assert_eq!(after, TimeStamp::compose(T0 + 500, 1));
    }

    #[test]
    fn advancing_past_a_timestamp_moves_the_counter_and_the_durable_limit() {
        let dir = tempfile::tempdir().unwrap();
        let (_clock, dyn_clock) = manual(T0);
        let oracle =
            LocalOracle::open_manual(dir.path(), Arc::clone(&dyn_clock), TimeStamp::zero())
                .unwrap();
        // Ten windows ahead: past the limit on disk, which moves first.
        let ahead = TimeStamp::compose(T0 + 10 * PERSIST_WINDOW_MS, 7);
        oracle.advance_past(ahead).unwrap();
        assert!(stored_limit(dir.path()) > ahead.physical());
        let next = oracle.get_ts().unwrap();
        assert_eq!(next, ahead.next());
        // Behind the counter: nothing moves.
        oracle.advance_past(TimeStamp::compose(T0, 0)).unwrap();
        assert_eq!(oracle.get_ts().unwrap(), next.next());
        // A crash keeps the limit on disk: the reopened counter is above.
        oracle.crash();
        let reopened = LocalOracle::open_manual(dir.path(), dyn_clock, TimeStamp::zero()).unwrap();
        assert!(reopened.get_ts().unwrap() > ahead);
        // Beyond the range: refused, nothing moves.
        let before = reopened.get_ts().unwrap();
        assert!(matches!(
            reopened.advance_past(TimeStamp::max()),
            Err(Error::TimestampBeyondRange { .. })
        ));
        assert_eq!(reopened.get_ts().unwrap(), before.next());

        let counter = CounterOracle::new(10);
        counter.advance_past(TimeStamp::new(20)).unwrap();
        assert_eq!(counter.get_ts().unwrap(), TimeStamp::new(21));
        counter.advance_past(TimeStamp::new(5)).unwrap();
        assert_eq!(counter.get_ts().unwrap(), TimeStamp::new(22));
    }

    #[test]
    fn the_coarse_system_clock_lags_the_precise_one_never_leads_it() {
        for _ in 0..1000 {
            let coarse = SystemClock.coarse_now_ms();
            let precise = SystemClock.now_ms();
            assert!(coarse <= precise, "coarse {coarse} ahead of {precise}");
            assert!(
                precise - coarse < 1000,
                "coarse {coarse} far behind {precise}"
            );
        }
    }

    #[test]
    fn logical_overflow_carries_into_physical() {
        let dir = tempfile::tempdir().unwrap();
        let (_clock, dyn_clock) = manual(T0);
        let oracle = LocalOracle::open_with_clock(dir.path(), dyn_clock).unwrap();
        let first = oracle.get_ts_batch(1 << 18).unwrap();
        let next = oracle.get_ts().unwrap();
        assert_eq!(next.into_inner(), first.into_inner() + (1 << 18));
        assert_eq!(next.physical(), T0 + 1);
    }

    #[test]
    fn short_lived_oracles_do_not_drift_ahead_of_the_clock() {
        // 200 processes that each open, take a timestamp and close, the
        // clock standing still: the oracle moves by about a millisecond per
        // process, not by a window (which would be 600 s).
        let dir = tempfile::tempdir().unwrap();
        let (_clock, dyn_clock) = manual(T0);
        let mut last = TimeStamp::zero();
        for _ in 0..200 {
            let oracle = LocalOracle::open_with_clock(dir.path(), dyn_clock.clone()).unwrap();
            let ts = oracle.get_ts().unwrap();
            assert!(
                ts > last,
                "never repeats or goes back: {ts:?} after {last:?}"
            );
            last = ts;
        }
        assert!(
            last.physical() <= T0 + 2 * 200,
            "{} ms ahead of the clock",
            last.physical() - T0
        );
    }

    #[test]
    fn a_closed_oracle_stores_a_limit_just_above_what_it_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let (_clock, dyn_clock) = manual(T0);
        let oracle = LocalOracle::open_with_clock(dir.path(), dyn_clock.clone()).unwrap();
        let first = oracle.get_ts_batch(1 << 20).unwrap();
        let last = TimeStamp::new(first.into_inner() + (1 << 20) - 1);
        assert!(stored_limit(dir.path()) >= T0 + PERSIST_WINDOW_MS);
        drop(oracle);
        assert_eq!(stored_limit(dir.path()), last.physical() + 1);
        let reopened = LocalOracle::open_with_clock(dir.path(), dyn_clock).unwrap();
        assert!(reopened.get_ts().unwrap() > last);
    }

    #[test]
    fn limit_is_persisted_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let (_clock, dyn_clock) = manual(T0);
        let oracle = LocalOracle::open_with_clock(dir.path(), dyn_clock).unwrap();
        let ts = oracle.get_ts().unwrap();
        assert!(stored_limit(dir.path()) > ts.physical());
        assert!(stored_limit(dir.path()) >= T0 + PERSIST_WINDOW_MS);
        // Bursts of 2^32 timestamps (about 16 s of logical time each) cross
        // the limit every time: each must be covered on disk first.
        for _ in 0..5 {
            let first = oracle.get_ts_batch(u32::MAX).unwrap();
            let last = TimeStamp::new(first.into_inner() + u64::from(u32::MAX) - 1);
            assert!(stored_limit(dir.path()) > last.physical());
            let ts = oracle.get_ts().unwrap();
            assert!(ts > last);
            assert!(stored_limit(dir.path()) > ts.physical());
        }
    }

    #[test]
    fn ticker_extends_the_limit_before_it_is_reached() {
        let dir = tempfile::tempdir().unwrap();
        let (clock, dyn_clock) = manual(T0);
        let oracle = LocalOracle::open_with_clock(dir.path(), dyn_clock).unwrap();
        clock.set(T0 + PERSIST_WINDOW_MS - 100);
        let deadline = Instant::now() + Duration::from_secs(5);
        while stored_limit(dir.path()) < T0 + 2 * PERSIST_WINDOW_MS - 100 {
            assert!(Instant::now() < deadline, "ticker never extended the limit");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(oracle.get_ts().unwrap().physical() < stored_limit(dir.path()));
    }

    fn assert_corrupted(dir: &Path, bytes: &[u8], expect: &str) {
        let path = dir.join(FILE_NAME);
        fs::write(&path, bytes).unwrap();
        match LocalOracle::open(dir) {
            Err(Error::OracleCorrupted { path: p, reason }) => {
                assert_eq!(p, path);
                assert!(reason.contains(expect), "{reason:?} lacks {expect:?}");
            }
            other => panic!("expected OracleCorrupted, got {other:?}"),
        }
        assert_eq!(fs::read(&path).unwrap(), bytes, "file was modified");
    }

    #[test]
    fn corrupted_file_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        drop(LocalOracle::open(dir.path()).unwrap());
        let good = fs::read(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(good.len(), FILE_LEN);

        for at in 0..FILE_LEN {
            let mut flipped = good.clone();
            flipped[at] ^= 0x10;
            let expect = if at < VERSION_OFFSET { "magic" } else { "crc" };
            assert_corrupted(dir.path(), &flipped, expect);
        }
        assert_corrupted(dir.path(), &good[..FILE_LEN - 1], "length");
        assert_corrupted(dir.path(), &[], "length");
        let mut longer = good.clone();
        longer.push(0);
        assert_corrupted(dir.path(), &longer, "length");

        // Wrong magic or version with a valid checksum.
        let mut wrong_magic = good.clone();
        wrong_magic[..4].copy_from_slice(b"XTSO");
        let crc = crc32fast::hash(&wrong_magic[..CRC_OFFSET]);
        wrong_magic[CRC_OFFSET..].copy_from_slice(&crc.to_be_bytes());
        assert_corrupted(dir.path(), &wrong_magic, "magic");
        let mut wrong_version = good.clone();
        wrong_version[VERSION_OFFSET..LIMIT_OFFSET].copy_from_slice(&2u32.to_be_bytes());
        let crc = crc32fast::hash(&wrong_version[..CRC_OFFSET]);
        wrong_version[CRC_OFFSET..].copy_from_slice(&crc.to_be_bytes());
        assert_corrupted(dir.path(), &wrong_version, "version");
        assert_corrupted(dir.path(), &encode_state(MAX_LIMIT + 1), "beyond");

        fs::write(dir.path().join(FILE_NAME), &good).unwrap();
        LocalOracle::open(dir.path()).unwrap();
    }

    /// A `TIMESTAMP.tmp` planted as a symbolic link is replaced, never
    /// written through: the file it points to keeps its bytes.
    #[test]
    fn a_planted_temporary_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join(TMP_FILE_NAME)).unwrap();
        let oracle = LocalOracle::open(dir.path()).unwrap();
        oracle.get_ts().unwrap();
        drop(oracle);
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(stored_limit(dir.path()) > 0);
        assert!(
            !fs::symlink_metadata(dir.path().join(FILE_NAME))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    /// A `TIMESTAMP` that is a symbolic link (to `/dev/zero`, say), a FIFO
    /// or an oversized file is refused as corrupted at once: nothing is
    /// read from it (no endless read, no wait for a writer).
    #[test]
    fn only_a_small_regular_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let refused = |what: &str| match LocalOracle::open(dir.path()) {
            Err(Error::OracleCorrupted { reason, .. }) => reason,
            other => panic!("{what}: expected OracleCorrupted, got {other:?}"),
        };
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert!(refused("a link").contains("symbolic link"));
        fs::remove_file(&path).unwrap();
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        if made.is_ok_and(|status| status.success()) {
            assert!(refused("a FIFO").contains("not a regular file"));
            fs::remove_file(&path).unwrap();
        }
        fs::write(&path, vec![0u8; 1 << 20]).unwrap();
        assert!(refused("1 MiB").contains("length"));
    }

    #[test]
    fn unusable_directory_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("file");
        fs::write(&not_a_dir, b"x").unwrap();
        assert!(matches!(
            LocalOracle::open(&not_a_dir),
            Err(Error::OracleIo { .. })
        ));
    }

    #[test]
    fn state_file_round_trips() {
        for limit in [0, 1, T0, MAX_LIMIT] {
            assert_eq!(decode_state(&encode_state(limit)), Ok(limit));
        }
    }

    #[test]
    fn empty_batch_is_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let oracle = LocalOracle::open(dir.path()).unwrap();
        assert!(matches!(
            oracle.get_ts_batch(0),
            Err(Error::InvalidRequest { .. })
        ));
        assert!(matches!(
            CounterOracle::new(1).get_ts_batch(0),
            Err(Error::InvalidRequest { .. })
        ));
    }

    #[test]
    fn counter_oracle_counts() {
        let oracle = CounterOracle::new(10);
        assert_eq!(oracle.get_ts().unwrap(), TimeStamp::new(10));
        assert_eq!(oracle.get_ts_batch(5).unwrap(), TimeStamp::new(11));
        assert_eq!(oracle.get_ts().unwrap(), TimeStamp::new(16));
    }

    #[test]
    fn a_counter_oracle_at_the_top_fails_instead_of_wrapping_to_zero() {
        let oracle = CounterOracle::new(u64::MAX - 3);
        assert_eq!(
            oracle.get_ts_batch(2).unwrap(),
            TimeStamp::new(u64::MAX - 3)
        );
        assert_eq!(oracle.get_ts().unwrap(), TimeStamp::new(u64::MAX - 1));
        for _ in 0..2 {
            assert!(matches!(
                oracle.get_ts(),
                Err(Error::TimestampBeyondRange { ts }) if ts.is_max()
            ));
        }
        assert!(oracle.get_ts_batch(1).is_err());
    }

    #[test]
    fn an_oracle_refuses_to_open_above_a_floor_it_has_no_room_above() {
        let dir = tempfile::tempdir().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        let top = TimeStamp::compose(MAX_LIMIT, 0);
        assert!(beyond_range(top) && !beyond_range(top.prev()));
        assert!(matches!(
            LocalOracle::open_above(dir.path(), clock.clone(), top),
            Err(Error::TimestampBeyondRange { ts }) if ts == top
        ));
        // Nothing was written: the directory opens as new.
        let oracle = LocalOracle::open_above(dir.path(), clock, top.prev()).unwrap();
        assert!(oracle.get_ts().unwrap() > top.prev());
    }

    #[test]
    fn manual_clock_moves_both_ways() {
        let clock = ManualClock::new(100);
        clock.advance(50);
        assert_eq!(clock.now_ms(), 150);
        clock.set(20);
        assert_eq!(clock.now_ms(), 20);
        assert!(SystemClock.now_ms() > T0);
    }
}
