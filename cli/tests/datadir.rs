//! The `--dir` argument: only `topic create` makes a missing data
//! directory; every other command fails on one and creates nothing, and a
//! `--dir` that is a file fails every command. Unknown groups are errors.
#![allow(clippy::unwrap_used)]

mod common;

use common::{fails, ok, run, run_bytes};

/// Every command but `topic create` and the self-contained `bench`, with
/// arguments that would be valid in a data directory holding topic `t`.
const NEEDS_A_DIRECTORY: &[&[&str]] = &[
    &["topics"],
    &["topics", "--json"],
    &["topic", "describe", "t"],
    &["topic", "describe", "t", "--json"],
    &["topic", "delete", "t"],
    &["groups"],
    &["groups", "--json"],
    &["group", "describe", "g"],
    &["group", "describe", "g", "--json"],
    &["consume", "t"],
    &["produce", "t"],
    &["tail", "t", "--max", "1"],
    &["dump", "t", "0"],
    &["verify"],
    &["verify", "t", "--json"],
    &["repair", "--yes"],
    &["bench", "--in-data-dir", "--n", "10"],
];

#[test]
fn a_missing_data_directory_is_an_error_and_is_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("mistyped");
    for args in NEEDS_A_DIRECTORY {
        let out = run_bytes(&missing, args, b"x\n");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "mqlite {args:?}: {err}");
        assert_eq!(
            err.trim_end(),
            format!("mqlite: no such data directory: {}", missing.display()),
            "mqlite {args:?}"
        );
        assert!(out.stdout.is_empty(), "mqlite {args:?} printed something");
        assert!(!missing.exists(), "mqlite {args:?} created {missing:?}");
    }
    // Nor a missing parent, or one that is a file.
    let deeper = tmp.path().join("a").join("b");
    let err = fails(&deeper, &["topics"], 1);
    assert!(err.contains("no such data directory"), "{err}");
    assert!(!tmp.path().join("a").exists());
    let file = tmp.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let err = fails(&file.join("sub"), &["groups"], 1);
    assert!(err.contains("no such data directory"), "{err}");
}

#[test]
fn a_file_is_not_a_data_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data");
    std::fs::write(&file, b"not a directory\n").unwrap();
    let create: &[&str] = &["topic", "create", "t", "--partitions", "1"];
    for args in NEEDS_A_DIRECTORY.iter().copied().chain([create]) {
        let out = run_bytes(&file, args, b"x\n");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "mqlite {args:?}: {err}");
        assert!(
            err.starts_with(&format!("mqlite: not a directory: {}", file.display())),
            "mqlite {args:?}: {err}"
        );
        assert_eq!(std::fs::read(&file).unwrap(), b"not a directory\n");
    }
}

#[test]
fn topic_create_still_makes_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("new").join("data");
    ok(&dir, &["topic", "create", "t", "--partitions", "1"], None);
    assert!(dir.is_dir());
    assert_eq!(ok(&dir, &["topics"], None), "t\n");
    // An existing empty directory is a data directory with nothing in it.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(ok(&empty, &["topics"], None), "");
    assert_eq!(ok(&empty, &["groups", "--json"], None), "[]\n");
}

#[test]
fn describing_an_unknown_group_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "t", "--partitions", "1"], None);
    ok(dir, &["produce", "t"], Some("1\n2\n"));
    ok(dir, &["consume", "t", "--group", "billing"], None);
    for args in [
        &["group", "describe", "biling"][..],
        &["group", "describe", "biling", "--json"],
    ] {
        let out = run(dir, args, None);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.starts_with("mqlite: unknown consumer group \"biling\""),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
    // The group that exists is still described.
    let text = ok(dir, &["group", "describe", "billing"], None);
    assert!(text.starts_with("group: billing\n"), "{text}");
    // A name breaking the naming rules is refused as before.
    fails(dir, &["group", "describe", "a b"], 1);
}
