//! `mqlite mirror` against the Kafka-compatible broker of
//! `core/tests/kafka_cluster/`: a directory's topic copied to the cluster
//! and from there into a second directory, whole and once, and the
//! argument errors.
#![allow(clippy::unwrap_used, clippy::format_collect)]

mod common;
#[path = "../../core/tests/kafka_cluster/mod.rs"]
mod kafka_cluster;

use common::{fails, ok};
use kafka_cluster::{cluster, topic};

#[test]
fn a_topic_goes_to_the_cluster_and_back() {
    let Some(url) = cluster() else { return };
    let t = topic("cli-mirror");
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    ok(
        a.path(),
        &["topic", "create", &t, "--partitions", "1"],
        None,
    );
    let lines: String = (0..50).map(|i| format!("line {i}\n")).collect();
    ok(a.path(), &["produce", &t], Some(&lines));

    let out = ok(a.path(), &["mirror", "--to", url, "--topic", &t], None);
    assert_eq!(
        out,
        format!("{t}: copied 50 records in 1 writes, 0 left to copy\n")
    );
    // Again: nothing new to copy.
    let out = ok(a.path(), &["mirror", "--to", url, "--topic", &t], None);
    assert_eq!(
        out,
        format!("{t}: copied 0 records in 0 writes, 0 left to copy\n")
    );

    let out = ok(b.path(), &["mirror", "--from", url, "--topic", &t], None);
    assert!(out.starts_with(&format!("{t}: copied 50 records")), "{out}");
    // Each copy of a copy carries both copies' offset headers.
    let want: String = (0..50)
        .map(|i| format!("mqlite.mirror.offset={i},mqlite.mirror.offset={i}\tline {i}\n"))
        .collect();
    assert_eq!(ok(b.path(), &["consume", &t], None), want);
}

#[test]
fn bad_arguments_are_refused() {
    let Some(url) = cluster() else { return };
    let a = tempfile::tempdir().unwrap();
    ok(
        a.path(),
        &["topic", "create", "t", "--partitions", "1"],
        None,
    );
    let err = fails(a.path(), &["mirror", "--to", "/not/a/cluster"], 1);
    assert!(err.contains("not a cluster address"), "{err}");
    let err = fails(a.path(), &["mirror", "--from", url], 1);
    assert!(err.contains("--from needs at least one --topic"), "{err}");
    let err = fails(
        a.path(),
        &["mirror", "--to", url, "--property", "novalue"],
        1,
    );
    assert!(err.contains("expected key=value"), "{err}");
}

#[test]
fn status_shows_the_lag_and_a_running_copy() {
    let Some(url) = cluster() else { return };
    let t = topic("cli-status");
    let a = tempfile::tempdir().unwrap();
    ok(
        a.path(),
        &["topic", "create", &t, "--partitions", "2"],
        None,
    );
    let lines: String = (0..30).map(|i| format!("line {i}\n")).collect();
    ok(a.path(), &["produce", &t], Some(&lines));
    let status = |dir: &std::path::Path| {
        ok(
            dir,
            &["mirror", "--to", url, "--topic", &t, "--status"],
            None,
        )
    };
    let out = status(a.path());
    assert!(
        out.starts_with(&format!("{t}: 30 left to copy (partition: next/end 0: 0/"))
            && out.contains("no copy has run from this directory"),
        "{out}"
    );

    let mut follow = std::process::Command::new(env!("CARGO_BIN_EXE_mqlite"))
        .args(["--dir", a.path().to_str().unwrap(), "mirror", "--to", url])
        .args(["--topic", &t, "--follow"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let out = loop {
        let out = status(a.path());
        if out.contains("0 left to copy")
            && out.contains("copy running (pid")
            && out.contains("copied 30 records")
        {
            break out;
        }
        assert!(std::time::Instant::now() < deadline, "{out}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(out.contains("0 errors"), "{out}");
    follow.kill().unwrap();
    follow.wait().unwrap();
    ok(a.path(), &["produce", &t], Some("one more\n"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let out = status(a.path());
        if out.contains("not heard from for") {
            assert!(out.starts_with(&format!("{t}: 1 left to copy")), "{out}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{out}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // A copy that ends says so.
    ok(a.path(), &["mirror", "--to", url, "--topic", &t], None);
    let out = status(a.path());
    assert!(
        out.contains("0 left to copy") && out.contains("copy ended"),
        "{out}"
    );
}
