//! The `percolate` command-line tool, run as a process on a temporary data
//! directory.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `percolate --dir DIR ARGS...`.
fn percolate(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_percolate"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .output()
        .expect("the percolate binary runs")
}

/// Runs a command that must succeed; returns its stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let out = percolate(dir, args);
    assert!(
        out.status.success(),
        "percolate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

#[test]
fn put_get_scan_delete_through_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    assert!(ok(dir, &["put", "alice", "100"]).contains("committed at"));
    ok(dir, &["put", "bob", "5"]);
    assert_eq!(ok(dir, &["get", "alice"]), "100\n");
    assert_eq!(ok(dir, &["get", "carol"]), "(not found)\n");

    assert_eq!(ok(dir, &["scan"]), "alice\t100\nbob\t5\n");
    assert_eq!(ok(dir, &["scan", "--start", "b"]), "bob\t5\n");
    assert_eq!(ok(dir, &["scan", "--end", "b"]), "alice\t100\n");
    assert_eq!(ok(dir, &["scan", "--reverse", "--limit", "1"]), "bob\t5\n");

    ok(dir, &["delete", "bob"]);
    assert_eq!(ok(dir, &["get", "bob"]), "(not found)\n");
    assert_eq!(ok(dir, &["scan"]), "alice\t100\n");
}

#[test]
fn hex_keys_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok(dir, &["--hex", "put", "00ff", "cafe"]);
    assert_eq!(ok(dir, &["--hex", "get", "00ff"]), "cafe\n");
    assert_eq!(ok(dir, &["--hex", "scan"]), "00ff\tcafe\n");
    // Not UTF-8: shown escaped without --hex.
    assert_eq!(ok(dir, &["scan"]), "\\x00\\xff\t\\xca\\xfe\n");
}

#[test]
fn mvcc_shows_the_records_of_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok(dir, &["put", "k", "v1"]);
    ok(dir, &["delete", "k"]);
    let mvcc = ok(dir, &["mvcc", "k"]);
    assert!(mvcc.contains("lock: none"), "{mvcc}");
    let writes: Vec<&str> = mvcc.lines().filter(|l| l.starts_with("write @")).collect();
    assert_eq!(writes.len(), 2, "{mvcc}");
    assert!(writes[0].contains("Delete"), "{mvcc}");
    assert!(
        writes[1].contains("Put") && writes[1].contains("value=\"v1\""),
        "{mvcc}"
    );
}

#[test]
fn raw_commands_bypass_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    assert_eq!(ok(dir, &["raw", "put", "k1", "v1"]), "OK\n");
    ok(dir, &["raw", "put", "k2", "v2"]);
    assert_eq!(ok(dir, &["raw", "get", "k1"]), "v1\n");
    assert_eq!(ok(dir, &["raw", "scan"]), "k1\tv1\nk2\tv2\n");
    assert_eq!(
        ok(dir, &["raw", "scan", "--reverse", "--limit", "1"]),
        "k2\tv2\n"
    );
    // Raw data is separate from transactional data.
    assert_eq!(ok(dir, &["get", "k1"]), "(not found)\n");
    ok(dir, &["raw", "delete", "k1"]);
    assert_eq!(ok(dir, &["raw", "get", "k1"]), "(not found)\n");
}

#[test]
fn an_error_is_one_line_and_exit_status_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = percolate(dir.path(), &["--hex", "get", "not-hex"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: bad hex \"not-hex\""), "{stderr}");

    // A data directory that cannot be created.
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let out = percolate(&file, &["get", "k"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
}

#[test]
fn gc_drops_the_versions_no_read_can_see() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    for v in ["1", "2", "3"] {
        ok(dir, &["put", "k", v]);
    }
    let writes = |dir| {
        ok(dir, &["mvcc", "k"])
            .lines()
            .filter(|l| l.contains("Put"))
            .count()
    };
    assert_eq!(writes(dir), 3);
    // Ten minutes back: the versions are younger, nothing goes.
    let out = ok(dir, &["gc"]);
    assert!(out.contains(", 0 deleted"), "{out}");
    assert_eq!(writes(dir), 3);
    let out = ok(dir, &["gc", "--safe-point-age", "0"]);
    assert!(out.contains("3 versions looked at, 2 deleted"), "{out}");
    assert_eq!(writes(dir), 1);
    assert_eq!(ok(dir, &["get", "k"]), "3\n");
}

/// Runs `percolate --dir DIR ARGS...` with `input` on stdin.
fn percolate_with_stdin(dir: &Path, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_percolate"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the percolate binary runs");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// Keys and values are printed escaped: a newline in a key cannot forge
/// a second line, an escape sequence never reaches the terminal, a TAB
/// cannot fake the separator.
#[test]
fn output_is_escaped_so_no_key_forges_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok(dir, &["put", "x\nacct/2", "evil\t\u{1b}[31mred"]);
    ok(dir, &["put", "plain", "caf\u{e9}"]);
    let scan = ok(dir, &["scan"]);
    assert_eq!(
        scan,
        "plain\tcaf\\xc3\\xa9\nx\\nacct/2\tevil\\t\\x1b[31mred\n"
    );
    assert_eq!(scan.lines().count(), 2);
    assert_eq!(ok(dir, &["get", "x\nacct/2"]), "evil\\t\\x1b[31mred\n");
    assert!(!ok(dir, &["mvcc", "x\nacct/2"]).contains('\u{1b}'));
}

/// `put KEY -` and `raw put KEY -` read the value from stdin: values far
/// larger than a command line takes.
#[test]
fn a_value_of_dash_is_read_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let big = vec![b'v'; 1 << 20];
    let out = percolate_with_stdin(dir, &["put", "big", "-"], &big);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = ok(dir, &["get", "big"]);
    assert_eq!(got.trim_end().len(), big.len());
    let out = percolate_with_stdin(dir, &["raw", "put", "rawbig", "-"], b"line1\nline2");
    assert!(out.status.success());
    assert_eq!(ok(dir, &["raw", "get", "rawbig"]), "line1\\nline2\n");
}

/// A command that only reads does not create a missing directory: it is
/// an error, and nothing appears; a command that writes creates it.
#[test]
fn reading_a_missing_directory_is_an_error_and_creates_nothing() {
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("typo");
    for args in [
        &["get", "k"][..],
        &["scan"],
        &["mvcc", "k"],
        &["raw", "get", "k"],
        &["raw", "scan"],
        &["gc"],
        &["repair"],
        &["--read-only", "get", "k"],
    ] {
        let out = percolate(&missing, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(!missing.exists(), "{args:?} created the directory");
    }
    ok(&missing, &["put", "k", "v"]);
    assert_eq!(ok(&missing, &["get", "k"]), "v\n");
}

/// `percolate-soak soak --kill-every` takes a finite number of seconds
/// above zero; any other is a usage error (status 2), not a panic.
#[test]
fn soak_kill_every_is_validated() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["inf", "NaN", "0", "-1", "soon"] {
        let out = Command::new(env!("CARGO_BIN_EXE_percolate-soak"))
            .arg("--dir")
            .arg(dir.path())
            .args(["soak", &format!("--kill-every={bad}")])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--kill-every {bad}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("--kill-every"), "{bad}: {stderr}");
        assert!(!stderr.contains("panicked"), "{bad}: {stderr}");
    }
}

/// `--read-only` reads a directory another process holds (without it, the
/// directory lock refuses the open), and refuses to write.
#[test]
fn read_only_reads_beside_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok(dir, &["put", "k", "v"]);
    let owner = percolate::Client::open(dir).unwrap();
    let out = percolate(dir, &["get", "k"]);
    assert_eq!(out.status.code(), Some(1), "the owner holds the directory");
    assert_eq!(ok(dir, &["--read-only", "get", "k"]), "v\n");
    assert_eq!(ok(dir, &["--read-only", "scan"]), "k\tv\n");
    let out = percolate(dir, &["--read-only", "put", "k", "w"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains("read-only"));
    drop(owner);
    assert_eq!(ok(dir, &["get", "k"]), "v\n");
}

/// `repair` removes a record that does not decode (it failed every scan)
/// and prints it; the scan works again.
#[test]
fn repair_removes_what_does_not_decode() {
    use percolate_engine::{Cf, Engine, WriteBatch, WriteOptions};
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok(dir, &["put", "a", "1"]);
    {
        let client = percolate::Client::open(dir).unwrap();
        let mut batch = WriteBatch::new();
        batch.put(
            Cf::Lock,
            percolate_mvcc::Key::from_raw(b"b").into_encoded(),
            b"\xffjunk".to_vec(),
        );
        client.cluster().regions()[0]
            .storage()
            .engine()
            .write(&batch, WriteOptions::default())
            .unwrap();
    }
    assert_eq!(percolate(dir, &["scan"]).status.code(), Some(1));
    let report = ok(dir, &["repair"]);
    assert!(report.starts_with("lock\t"), "{report}");
    assert!(report.ends_with("1 damaged records removed\n"), "{report}");
    assert_eq!(ok(dir, &["scan"]), "a\t1\n");
}

#[test]
fn backup_then_open_the_backup_as_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let backup = dir.path().join("backup");
    ok(&data, &["put", "alice", "100"]);
    let printed = ok(&data, &["backup", backup.to_str().unwrap()]);
    assert!(printed.starts_with("backup in "), "{printed}");
    ok(&data, &["put", "bob", "5"]);
    assert_eq!(ok(&backup, &["get", "alice"]), "100\n");
    assert_eq!(ok(&backup, &["get", "bob"]), "(not found)\n");
    // A second backup into the same, now non-empty, directory fails.
    let out = percolate(&data, &["backup", backup.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
}

#[test]
fn export_then_import_into_another_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let export = dir.path().join("export");
    let other = dir.path().join("other");
    ok(&data, &["put", "a", "1"]);
    ok(&data, &["put", "b", "2"]);
    ok(&data, &["put", "c", "3"]);
    let printed = ok(
        &data,
        &[
            "export",
            "--start",
            "b",
            "--end",
            "c",
            "--out",
            export.to_str().unwrap(),
        ],
    );
    assert!(printed.starts_with("write\t"), "{printed}");
    assert!(export.join("EXPORT_MANIFEST").exists());
    let printed = ok(&other, &["import", "--from", export.to_str().unwrap()]);
    assert!(printed.contains("imported at ts"), "{printed}");
    assert_eq!(ok(&other, &["scan"]), "b\t2\n");
    // Importing again: the range now holds data.
    let out = percolate(&other, &["import", "--from", export.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds data"));
}

#[test]
fn stats_prints_prometheus_text_with_rocksdbs_sizes() {
    let dir = tempfile::tempdir().unwrap();
    ok(dir.path(), &["put", "alice", "100"]);
    let text = ok(dir.path(), &["stats"]);
    assert!(
        text.contains("# TYPE percolate_commands_total counter"),
        "{text}"
    );
    // The scan of each region ran a Scan command in this process.
    assert!(
        text.contains("percolate_commands_total{command=\"scan\",outcome=\"ok\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE percolate_rocksdb_live_sst_bytes gauge"),
        "{text}"
    );
    let memtable: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("percolate_rocksdb_memtable_bytes "))
        .expect("a memtable size")
        .parse()
        .unwrap();
    assert!(memtable > 0, "{text}");
    // Beside a read-only open too.
    assert!(ok(dir.path(), &["--read-only", "stats"]).contains("percolate_rocksdb_"));
    // A directory without a database is an error, not a new database.
    let missing = dir.path().join("missing");
    assert_eq!(percolate(&missing, &["stats"]).status.code(), Some(1));
    assert!(!missing.exists());
}
