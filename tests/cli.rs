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
