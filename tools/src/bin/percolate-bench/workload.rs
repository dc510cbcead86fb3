//! What the runner asks of every system: the workloads, the key choice, the
//! values, and the operations they are made of.

use rand::Rng;
use rand::distr::{Distribution, Uniform};
use rand_distr::Zipf;

/// A workload: how reads, updates, scans and transactions are mixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// YCSB A: 50% reads, 50% updates.
    A,
    /// YCSB B: 95% reads, 5% updates.
    B,
    /// YCSB C: reads only.
    C,
    /// YCSB E: 95% short scans (1 to `--max-scan` records from a chosen
    /// key), 5% inserts of new records.
    E,
    /// YCSB F: 50% reads, 50% read-modify-writes of one record.
    F,
    /// Updates only: one blind single-key write per transaction.
    Update,
    /// Transfers: read `--txn-keys` distinct records and move value between
    /// them (the sum of their counters stays the same), in one transaction.
    Transfer,
    /// Multi-key updates: overwrite `--txn-keys` distinct records without
    /// reading them, in one transaction (commit latency on its own).
    MultiUpdate,
    /// Point reads: YCSB C with `--read latest` whatever `--read` says, a
    /// plain read of the latest data per operation (shown as `C-latest`).
    Get,
}

impl Workload {
    /// A short description for headers.
    pub fn describe(self, txn_keys: usize) -> String {
        match self {
            Workload::A => "YCSB-A 50% read / 50% update".into(),
            Workload::B => "YCSB-B 95% read / 5% update".into(),
            Workload::C => "YCSB-C 100% read".into(),
            Workload::E => "YCSB-E 95% scan / 5% insert".into(),
            Workload::F => "YCSB-F 50% read / 50% read-modify-write".into(),
            Workload::Update => "update-only (1-key blind writes)".into(),
            Workload::Transfer => format!("transfer ({txn_keys} keys read and written)"),
            Workload::MultiUpdate => format!("multi-update ({txn_keys} keys written blind)"),
            Workload::Get => "point reads (YCSB-C, latest data)".into(),
        }
    }

    /// Whether the workload makes single-record reads, which `--read`
    /// decides how to make.
    pub fn has_reads(self) -> bool {
        matches!(
            self,
            Workload::A | Workload::B | Workload::C | Workload::F | Workload::Get
        )
    }

    /// The short name used in tables.
    pub fn name(self, txn_keys: usize) -> String {
        match self {
            Workload::A => "A".into(),
            Workload::B => "B".into(),
            Workload::C => "C".into(),
            Workload::E => "E".into(),
            Workload::F => "F".into(),
            Workload::Update => "update".into(),
            Workload::Transfer => format!("transfer{txn_keys}"),
            Workload::MultiUpdate => format!("update{txn_keys}"),
            Workload::Get => "get".into(),
        }
    }
}

/// How the single-record reads of workloads A, B, C and F are made (F's
/// read-modify-writes and the transfers are transactions whatever it says;
/// E's scans are unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ReadMode {
    /// A plain read of the latest data: no transaction, no snapshot.
    Latest,
    /// A read at an explicit snapshot, without a transaction.
    Snapshot,
    /// A read inside a full transaction (begin, get, commit).
    Txn,
}

impl ReadMode {
    /// The name in scenario names (`C-latest`) and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ReadMode::Latest => "latest",
            ReadMode::Snapshot => "snapshot",
            ReadMode::Txn => "txn",
        }
    }

    /// What the mode means, in general.
    pub fn describe(self) -> &'static str {
        match self {
            ReadMode::Latest => "a plain read of the latest data, no transaction, no snapshot",
            ReadMode::Snapshot => "a read at an explicit snapshot, no transaction",
            ReadMode::Txn => "a read in a transaction (begin, get, commit)",
        }
    }
}

/// How records are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyDistribution {
    /// Every record equally likely.
    Uniform,
    /// YCSB's scrambled zipfian: zipfian ranks (θ = 0.99), each hashed to a
    /// record so that the hot records are spread over the key space (and
    /// over the regions).
    Zipfian,
}

/// One transaction (or, for raw RocksDB, one operation) of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read one record, as `mode` says.
    Read {
        /// The record.
        key: u64,
        /// Latest data, at a snapshot, or in a transaction.
        mode: ReadMode,
    },
    /// Overwrite one record without reading it.
    Update(u64),
    /// Write a new record.
    Insert(u64),
    /// Read up to `len` records in key order from a record.
    Scan { start: u64, len: usize },
    /// Read one record and write it back with its counter incremented.
    ReadModifyWrite(u64),
    /// Read the records (distinct, sorted) and move value between them.
    Transfer(Vec<u64>),
    /// Overwrite the records (distinct, sorted) without reading them.
    UpdateMany(Vec<u64>),
}

impl Op {
    /// The records a blind write (an update, an insert, a multi-key
    /// update) sets; none for any other operation.
    pub fn blind_keys(&self) -> &[u64] {
        match self {
            Op::Update(k) | Op::Insert(k) => std::slice::from_ref(k),
            Op::UpdateMany(keys) => keys,
            _ => &[],
        }
    }
}

/// The zipfian constant of YCSB's request distribution.
pub const ZIPFIAN_THETA: f64 = 0.99;

/// Chooses records.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    /// Uniform over `[0, records)`.
    Uniform(Uniform<u64>),
    /// Scrambled zipfian over `[0, records)`.
    Zipfian { zipf: Zipf<f64>, records: u64 },
}

impl KeyChooser {
    /// A chooser over `records` records.
    pub fn new(distribution: KeyDistribution, records: u64) -> Self {
        match distribution {
            KeyDistribution::Uniform => {
                KeyChooser::Uniform(Uniform::new(0, records).expect("records > 0"))
            }
            KeyDistribution::Zipfian => KeyChooser::Zipfian {
                zipf: Zipf::new(records as f64, ZIPFIAN_THETA).expect("records > 0"),
                records,
            },
        }
    }

    /// The next record.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        match self {
            KeyChooser::Uniform(uniform) => uniform.sample(rng),
            KeyChooser::Zipfian { zipf, records } => {
                // Ranks are 1-based; rank 1 is the hottest.
                let rank = zipf.sample(rng) as u64;
                fnv1a64(rank) % records
            }
        }
    }

    /// `n` distinct records, sorted (every system then locks them in the
    /// same order: no deadlocks between transfers).
    pub fn distinct(&self, rng: &mut impl Rng, n: usize) -> Vec<u64> {
        let mut keys = Vec::with_capacity(n);
        while keys.len() < n {
            let k = self.next(rng);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys.sort_unstable();
        keys
    }
}

/// FNV-1a over the 8 bytes of `n`: YCSB's scrambling hash.
fn fnv1a64(n: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in n.to_be_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Draws the operations of one workload.
#[derive(Clone, Debug)]
pub struct OpGenerator {
    workload: Workload,
    keys: KeyChooser,
    max_scan: usize,
    txn_keys: usize,
    read: ReadMode,
}

impl OpGenerator {
    /// A generator for `workload` over `records` records, its single-record
    /// reads made as `read` says (`Get`'s always of the latest data).
    pub fn new(
        workload: Workload,
        distribution: KeyDistribution,
        records: u64,
        max_scan: usize,
        txn_keys: usize,
        read: ReadMode,
    ) -> Self {
        OpGenerator {
            workload,
            keys: KeyChooser::new(distribution, records),
            max_scan: max_scan.max(1),
            txn_keys: txn_keys.clamp(1, records as usize),
            read: if workload == Workload::Get {
                ReadMode::Latest
            } else {
                read
            },
        }
    }

    /// The next operation; `insert` numbers new records (workload E).
    pub fn next(&self, rng: &mut impl Rng, insert: impl FnOnce() -> u64) -> Op {
        let p: f64 = rng.random();
        let key = self.keys.next(rng);
        let read = Op::Read {
            key,
            mode: self.read,
        };
        match self.workload {
            Workload::A if p < 0.5 => read,
            Workload::A => Op::Update(key),
            Workload::B if p < 0.95 => read,
            Workload::B => Op::Update(key),
            Workload::C | Workload::Get => read,
            Workload::E if p < 0.95 => Op::Scan {
                start: key,
                len: rng.random_range(1..=self.max_scan),
            },
            Workload::E => Op::Insert(insert()),
            Workload::F if p < 0.5 => read,
            Workload::F => Op::ReadModifyWrite(key),
            Workload::Update => Op::Update(key),
            Workload::Transfer => Op::Transfer(self.keys.distinct(rng, self.txn_keys)),
            Workload::MultiUpdate => Op::UpdateMany(self.keys.distinct(rng, self.txn_keys)),
        }
    }
}

/// The key of record `n`: YCSB's `user` prefix and a zero-padded number,
/// so that keys sort like their numbers.
pub fn record_key(n: u64) -> Vec<u8> {
    format!("user{n:012}").into_bytes()
}

/// Every record's counter at load time.
pub const INITIAL_COUNTER: u64 = 1_000_000;

/// A value of `len` bytes (at least 8) whose first 8 bytes are `counter`,
/// big-endian.
pub fn value(counter: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(8));
    v.extend_from_slice(&counter.to_be_bytes());
    v.resize(len.max(8), b'x');
    v
}

/// The counter of a value written by [`value`] (0 for a missing or short
/// value).
pub fn counter(value: Option<&[u8]>) -> u64 {
    value
        .and_then(|v| v.get(..8))
        .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
}

/// The new counters of a transfer between records holding `counters`: the
/// first gives one unit to each of the others (wrapping, so the sum mod
/// 2^64 is kept whatever the balances).
pub fn transfer(counters: &[u64]) -> Vec<u64> {
    let n = counters.len() as u64;
    counters
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            if i == 0 {
                c.wrapping_sub(n - 1)
            } else {
                c.wrapping_add(1)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_keep_the_sum() {
        let before = [5u64, 0, 7, u64::MAX];
        let after = transfer(&before);
        let sum = |v: &[u64]| v.iter().fold(0u64, |a, &b| a.wrapping_add(b));
        assert_eq!(sum(&before), sum(&after));
    }

    #[test]
    fn zipfian_keys_stay_in_range_and_are_skewed() {
        let chooser = KeyChooser::new(KeyDistribution::Zipfian, 1000);
        let mut rng = rand::rng();
        let mut hits = vec![0u32; 1000];
        for _ in 0..100_000 {
            hits[chooser.next(&mut rng) as usize] += 1;
        }
        let max = *hits.iter().max().unwrap();
        assert!(max > 5_000, "the hottest record gets {max} of 100000");
        let keys = chooser.distinct(&mut rng, 4);
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn values_carry_their_counter() {
        let v = value(42, 100);
        assert_eq!(v.len(), 100);
        assert_eq!(counter(Some(&v)), 42);
        assert_eq!(counter(None), 0);
    }
}
