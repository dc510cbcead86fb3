//! Goldenscripts: transaction scenarios written as scripts of actions, with
//! their output (each result and the records on disk, decoded) kept in a
//! golden file beside them. They read as a worked example of the protocol:
//! `tests/scripts/*.script`, each opening with a comment that says what it
//! shows, and `*.golden`, what percolate does.
//!
//! Every script runs on the memory engine and on RocksDB; both outputs
//! must equal the golden file. After a deliberate change of behaviour,
//! regenerate the golden files with `UPDATE_GOLDENFILES=1 cargo test --test
//! goldenscripts` and review the diff.
//!
//! The script language, one command per line (`#` starts a comment, copied
//! to the output):
//!
//! ```text
//! prewrite put:a=v1 delete:b lock:c insert:d=v primary=a start=10 [ttl=N]
//!          [async|one_pc max_ts=N]      # async: the primary lists the secondaries
//!          [secondaries=b,c]            # ... these, instead of the request's other keys
//! commit a b start=10 commit=11
//! rollback a start=10                   # KvBatchRollback
//! cleanup a start=10 current=N          # KvCleanup, TTL checked against current
//! check_txn_status primary=a start=10 caller=N current=N [rollback_if_not_exist]
//! check_secondary_locks a b start=10
//! get a ts=12
//! gc a safe_point=20
//! dump                                  # every record of every key seen so far
//! ```
//!
//! A command prefixed with `!` must fail: its error is printed. One that is
//! not must succeed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use percolate::engine::testing::temp_rocks_engine;
use percolate::engine::{Engine, MemoryEngine};
use percolate::mvcc::Key;
use percolate::mvcc::testing::ts;
use percolate::txn::actions::TxnStatus;
use percolate::txn::actions::check_secondary_locks::{SecondaryLockStatus, check_secondary_lock};
use percolate::txn::actions::check_txn_status::CheckTxnStatusOptions;
use percolate::txn::actions::cleanup::{CleanupKind, cleanup, rollback};
use percolate::txn::actions::commit::commit;
use percolate::txn::actions::gc::gc;
use percolate::txn::actions::mvcc_by_key::mvcc_by_key;
use percolate::txn::actions::prewrite::{Mutation, TransactionProperties};
use percolate::txn::testing::TxnFixture;

type Outcome = Result<String, String>;

/// A parsed command line: positional words, `name=value` arguments, and
/// whether it must fail.
struct Command {
    name: String,
    words: Vec<String>,
    args: BTreeMap<String, String>,
    must_fail: bool,
}

impl Command {
    fn parse(line: &str) -> Self {
        let (must_fail, line) = match line.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let mut tokens = line.split_whitespace();
        let name = tokens.next().unwrap_or_default().to_string();
        let (mut words, mut args) = (Vec::new(), BTreeMap::new());
        for token in tokens {
            match token.split_once('=') {
                // `put:a=1` is a word: the `=` belongs to the mutation.
                Some((k, v)) if !k.contains(':') => {
                    args.insert(k.to_string(), v.to_string());
                }
                _ => words.push(token.to_string()),
            }
        }
        Command {
            name,
            words,
            args,
            must_fail,
        }
    }

    fn ts(&self, name: &str) -> u64 {
        self.args
            .get(name)
            .unwrap_or_else(|| panic!("`{}` needs {name}=N", self.name))
            .parse()
            .unwrap_or_else(|e| panic!("`{}`: {name}: {e}", self.name))
    }

    fn ts_or(&self, name: &str, default: u64) -> u64 {
        if self.args.contains_key(name) {
            self.ts(name)
        } else {
            default
        }
    }

    fn has(&self, flag: &str) -> bool {
        self.words.iter().any(|w| w == flag)
    }

    /// The positional words that are keys (not flags).
    fn keys(&self, flags: &[&str]) -> Vec<Vec<u8>> {
        self.words
            .iter()
            .filter(|w| !flags.contains(&w.as_str()))
            .map(|w| w.as_bytes().to_vec())
            .collect()
    }
}

/// Runs scripts against one engine through the transaction actions.
struct Runner<E: Engine> {
    f: TxnFixture<E>,
    /// Every key a command named, for `dump`.
    keys: BTreeSet<Vec<u8>>,
}

fn key(raw: &[u8]) -> Key {
    Key::from_raw(raw)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl<E: Engine> Runner<E> {
    fn new(engine: E) -> Self {
        Runner {
            f: TxnFixture::new(engine),
            keys: BTreeSet::new(),
        }
    }

    /// Runs a whole script; returns its output.
    fn run_script(&mut self, script: &str) -> String {
        let mut out = String::new();
        for line in script.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                out.push_str(line);
                out.push('\n');
                continue;
            }
            out.push_str(&format!("> {line}\n"));
            let command = Command::parse(line);
            match (self.run(&command), command.must_fail) {
                (Ok(output), false) => out.push_str(&output),
                (Err(e), true) => out.push_str(&format!("error: {e}\n")),
                (Ok(output), true) => panic!("`{line}` was expected to fail, gave: {output}"),
                (Err(e), false) => panic!("`{line}` failed: {e}"),
            }
        }
        out
    }

    fn run(&mut self, c: &Command) -> Outcome {
        match c.name.as_str() {
            "prewrite" => self.prewrite(c),
            "commit" => self.commit(c),
            "rollback" | "cleanup" => self.rollback(c),
            "check_txn_status" => self.check_txn_status(c),
            "check_secondary_locks" => self.check_secondary_locks(c),
            "get" => self.get(c),
            "gc" => self.gc(c),
            "dump" => Ok(self.dump()),
            other => panic!("unknown command `{other}`"),
        }
    }

    fn note_keys(&mut self, keys: &[Vec<u8>]) {
        self.keys.extend(keys.iter().cloned());
    }

    fn prewrite(&mut self, c: &Command) -> Outcome {
        let mut mutations = Vec::new();
        let mut raws = Vec::new();
        for word in c.keys(&["async", "one_pc"]) {
            let word = text(&word);
            let (kind, rest) = word
                .split_once(':')
                .expect("put:k=v, delete:k, lock:k, insert:k=v");
            let (k, v) = match rest.split_once('=') {
                Some((k, v)) => (k.as_bytes().to_vec(), v.as_bytes().to_vec()),
                None => (rest.as_bytes().to_vec(), Vec::new()),
            };
            mutations.push(match kind {
                "put" => Mutation::put(key(&k), v),
                "insert" => Mutation::insert(key(&k), v),
                "delete" => Mutation::delete(key(&k)),
                "lock" => Mutation::lock(key(&k)),
                other => panic!("unknown mutation `{other}`"),
            });
            raws.push(k);
        }
        self.note_keys(&raws);
        let primary = c.args.get("primary").expect("primary=K").as_bytes();
        let start = c.ts("start");
        let max_ts = c.ts_or("max_ts", 0);
        let props = if c.has("async") {
            TxnFixture::<E>::async_props(primary, start, max_ts, 0)
        } else if c.has("one_pc") {
            TxnFixture::<E>::one_pc_props(primary, start, max_ts, 0)
        } else {
            TxnFixture::<E>::props(primary, start)
        };
        let props = TransactionProperties {
            lock_ttl: c.ts_or("ttl", 3000),
            min_commit_ts: ts(c.ts_or("min_commit", start + 1)),
            ..props
        };
        // The secondaries an async-commit primary lists: the other keys of
        // this request, or `secondaries=k1,k2` for a request that carries
        // only part of the transaction.
        let secondaries: Vec<Vec<u8>> = match c.args.get("secondaries") {
            Some(list) => list.split(',').map(|k| k.as_bytes().to_vec()).collect(),
            None => raws
                .iter()
                .filter(|k| k.as_slice() != primary)
                .cloned()
                .collect(),
        };
        let secondaries = c.has("async").then_some(secondaries.as_slice());
        let result = self
            .f
            .prewrite(&props, mutations, secondaries)
            .map_err(|e| e.to_string())?;
        let mut out = String::new();
        for lock in &result.locks {
            // As the error a single locked key is answered with.
            let locked = percolate::mvcc::Error::KeyIsLocked(Box::new(lock.clone()));
            out.push_str(&format!("locked: {locked}\n"));
        }
        if let Some(min_commit_ts) = result.min_commit_ts {
            out.push_str(&format!("ok: min_commit_ts={min_commit_ts}\n"));
        } else if let Some(commit_ts) = result.one_pc_commit_ts {
            out.push_str(&format!("ok: committed by 1PC at {commit_ts}\n"));
        } else if result.locks.is_empty() {
            out.push_str("ok\n");
        }
        Ok(out)
    }

    fn commit(&mut self, c: &Command) -> Outcome {
        let keys = c.keys(&[]);
        self.note_keys(&keys);
        let commit_ts = ts(c.ts("commit"));
        self.f
            .run(c.ts("start"), |txn, reader| {
                keys.iter()
                    .try_for_each(|k| commit(txn, reader, key(k), commit_ts).map(drop))
            })
            .map_err(|e| e.to_string())?;
        Ok("ok\n".into())
    }

    fn rollback(&mut self, c: &Command) -> Outcome {
        let keys = c.keys(&[]);
        self.note_keys(&keys);
        let current = ts(c.ts_or("current", 0));
        let is_cleanup = c.name == "cleanup";
        self.f
            .run(c.ts("start"), |txn, reader| {
                keys.iter().try_for_each(|k| {
                    let released = if is_cleanup {
                        cleanup(txn, reader, key(k), current, CleanupKind::Cleanup)
                    } else {
                        rollback(txn, reader, key(k))
                    };
                    released.map(drop)
                })
            })
            .map_err(|e| e.to_string())?;
        Ok("ok\n".into())
    }

    fn check_txn_status(&mut self, c: &Command) -> Outcome {
        let primary = c
            .args
            .get("primary")
            .expect("primary=K")
            .as_bytes()
            .to_vec();
        self.note_keys(std::slice::from_ref(&primary));
        let options = CheckTxnStatusOptions {
            caller_start_ts: ts(c.ts_or("caller", 0)),
            current_ts: ts(c.ts_or("current", 0)),
            rollback_if_not_exist: c.has("rollback_if_not_exist"),
            ..Default::default()
        };
        let status = self
            .f
            .check_txn_status(&primary, c.ts("start"), &options)
            .map_err(|e| e.to_string())?;
        Ok(match status {
            TxnStatus::Uncommitted {
                lock,
                min_commit_ts_pushed,
            } => format!(
                "uncommitted: ttl={} min_commit_ts={} pushed={min_commit_ts_pushed}\n",
                lock.ttl, lock.min_commit_ts
            ),
            TxnStatus::Committed { commit_ts } => format!("committed at {commit_ts}\n"),
            other => format!("{other:?}\n"),
        })
    }

    fn check_secondary_locks(&mut self, c: &Command) -> Outcome {
        let keys = c.keys(&[]);
        self.note_keys(&keys);
        let statuses = self
            .f
            .run(c.ts("start"), |txn, reader| {
                keys.iter()
                    .map(|k| check_secondary_lock(txn, reader, key(k)).map(|(s, _)| s))
                    .collect::<percolate::txn::Result<Vec<_>>>()
            })
            .map_err(|e| e.to_string())?;
        let mut out = String::new();
        for (k, status) in keys.iter().zip(statuses) {
            let status = match status {
                SecondaryLockStatus::Locked(lock) => {
                    format!("locked, min_commit_ts={}", lock.min_commit_ts)
                }
                SecondaryLockStatus::Committed(commit_ts) => format!("committed at {commit_ts}"),
                SecondaryLockStatus::RolledBack => "rolled back".into(),
                other => format!("{other:?}"),
            };
            out.push_str(&format!("{}: {status}\n", text(k)));
        }
        Ok(out)
    }

    fn get(&mut self, c: &Command) -> Outcome {
        let keys = c.keys(&[]);
        self.note_keys(&keys);
        let mut out = String::new();
        for k in &keys {
            let value = self.f.get(k, c.ts("ts")).map_err(|e| e.to_string())?;
            let shown = value.map_or_else(|| "none".to_string(), |v| format!("{:?}", text(&v)));
            out.push_str(&format!("{}: {shown}\n", text(k)));
        }
        Ok(out)
    }

    fn gc(&mut self, c: &Command) -> Outcome {
        let keys = c.keys(&[]);
        self.note_keys(&keys);
        let safe_point = ts(c.ts("safe_point"));
        let infos = self
            .f
            .run(0, |txn, reader| {
                keys.iter()
                    .map(|k| gc(txn, reader, key(k), safe_point))
                    .collect::<percolate::txn::Result<Vec<_>>>()
            })
            .map_err(|e| e.to_string())?;
        let deleted: usize = infos.iter().map(|i| i.deleted_versions).sum();
        Ok(format!("ok: {deleted} versions deleted\n"))
    }

    /// Every record of every key named so far, decoded.
    fn dump(&self) -> String {
        let mut out = String::new();
        for k in &self.keys {
            let info = mvcc_by_key(&mut self.f.reader(), &key(k)).expect("readable records");
            if info.lock.is_none() && info.writes.is_empty() && info.values.is_empty() {
                continue;
            }
            out.push_str(&format!("{}:\n", text(k)));
            for line in info.to_string().lines().filter(|l| *l != "lock: none") {
                out.push_str(&format!("  {line}\n"));
            }
        }
        if out.is_empty() {
            out.push_str("(no records)\n");
        }
        out
    }
}

fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts")
}

/// Runs one script on both engines and checks the output against its
/// golden file (or writes it, with `UPDATE_GOLDENFILES=1`).
fn check_script(name: &str) {
    let path = scripts_dir().join(format!("{name}.script"));
    let script = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let memory = Runner::new(MemoryEngine::new()).run_script(&script);
    let rocks = Runner::new(temp_rocks_engine()).run_script(&script);
    assert_eq!(memory, rocks, "{name}: the engines disagree");
    let golden = scripts_dir().join(format!("{name}.golden"));
    if std::env::var_os("UPDATE_GOLDENFILES").is_some() {
        std::fs::write(&golden, &memory).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&golden)
        .unwrap_or_else(|e| panic!("{golden:?}: {e} (generate with UPDATE_GOLDENFILES=1)"));
    assert_eq!(
        memory, expected,
        "{name}: output differs from {golden:?} (UPDATE_GOLDENFILES=1 rewrites it)"
    );
}

macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check_script(stringify!($name));
            }
        )*

        /// Every script in the folder has a test.
        #[test]
        fn every_script_is_run() {
            let listed: BTreeSet<String> = [$(stringify!($name)),*]
                .iter()
                .map(|s| s.to_string())
                .collect();
            let found: BTreeSet<String> = std::fs::read_dir(scripts_dir())
                .unwrap()
                .filter_map(|e| {
                    let name = e.unwrap().file_name().into_string().unwrap();
                    name.strip_suffix(".script").map(str::to_string)
                })
                .collect();
            assert_eq!(listed, found);
        }
    };
}

scripts!(
    two_phase_commit,
    lost_update,
    rollback_protection,
    async_commit_secondaries,
    one_pc,
    gc_safe_point,
);
