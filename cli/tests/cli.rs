//! End-to-end tests running the built `mqlite` binary on a temporary
//! data directory.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn run(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mqlite"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env_remove("MQLITE_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mqlite");
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
    }
    child.wait_with_output().expect("wait mqlite")
}

fn ok(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = run(dir, args, stdin);
    assert!(
        out.status.success(),
        "mqlite {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn topic_create_describe_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(
        dir,
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--retention-ms",
            "60000",
            "--segment-bytes",
            "1048576",
        ],
        None,
    );
    assert_eq!(ok(dir, &["topics"], None), "orders\n");

    let v: Value =
        serde_json::from_str(&ok(dir, &["topic", "describe", "orders", "--json"], None)).unwrap();
    assert_eq!(v["name"], "orders");
    assert_eq!(v["partitions"], 3);
    assert_eq!(v["config"]["retention_ms"], 60000);
    assert_eq!(v["config"]["segment_bytes"], 1048576);
    assert_eq!(v["offsets"].as_array().unwrap().len(), 3);

    let text = ok(dir, &["topic", "describe", "orders"], None);
    assert!(text.contains("partitions: 3"), "{text}");

    let all: Value = serde_json::from_str(&ok(dir, &["topics", "--json"], None)).unwrap();
    assert_eq!(all[0]["name"], "orders");
    assert_eq!(all[0]["offsets"][0]["end_offset"], 0);

    // Creating it twice fails.
    let out = run(
        dir,
        &["topic", "create", "orders", "--partitions", "1"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));

    ok(dir, &["topic", "delete", "orders"], None);
    assert_eq!(ok(dir, &["topics"], None), "");
}

#[test]
fn produce_and_consume_text_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "t", "--partitions", "1"], None);
    let out = run(
        dir,
        &["produce", "t", "--key-separator", ":", "--acks", "all"],
        Some("k1:v1\nk2:v:2\nnokey\n"),
    );
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 record(s)"));

    assert_eq!(ok(dir, &["consume", "t"], None), "v1\nv:2\nnokey\n");

    let lines = json_lines(&ok(dir, &["consume", "t", "--format", "json"], None));
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["topic"], "t");
    assert_eq!(lines[0]["partition"], 0);
    assert_eq!(lines[0]["offset"], 0);
    assert_eq!(lines[0]["key"], "k1");
    assert_eq!(lines[0]["value"], "v1");
    assert!(lines[0]["timestamp"].as_i64().unwrap() > 0);
    assert_eq!(lines[1]["key"], "k2");
    assert_eq!(lines[1]["value"], "v:2");
    assert_eq!(lines[2]["key"], Value::Null);
    assert_eq!(lines[2]["value"], "nokey");

    // --max and --offset.
    assert_eq!(ok(dir, &["consume", "t", "--max", "2"], None), "v1\nv:2\n");
    assert_eq!(
        ok(dir, &["consume", "t", "--offset", "1"], None),
        "v:2\nnokey\n"
    );
}

#[test]
fn produce_to_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "p", "--partitions", "2"], None);
    ok(dir, &["produce", "p", "--partition", "1"], Some("a\nb\n"));
    let lines = json_lines(&ok(dir, &["consume", "p", "--format", "json"], None));
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l["partition"] == 1));
}

#[test]
fn group_consume_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "g", "--partitions", "1"], None);
    ok(dir, &["produce", "g"], Some("1\n2\n3\n4\n5\n"));

    assert_eq!(
        ok(
            dir,
            &["consume", "g", "--group", "billing", "--max", "3"],
            None
        ),
        "1\n2\n3\n"
    );
    let v: Value =
        serde_json::from_str(&ok(dir, &["group", "describe", "billing", "--json"], None)).unwrap();
    assert_eq!(v["name"], "billing");
    let offs = v["offsets"].as_array().unwrap();
    assert_eq!(offs.len(), 1);
    assert_eq!(offs[0]["topic"], "g");
    assert_eq!(offs[0]["committed"], 3);
    assert_eq!(offs[0]["end_offset"], 5);
    assert_eq!(offs[0]["lag"], 2);
    let text = ok(dir, &["group", "describe", "billing"], None);
    assert!(text.contains("group: billing"), "{text}");

    // The group resumes at its committed offset, then is caught up.
    assert_eq!(
        ok(dir, &["consume", "g", "--group", "billing"], None),
        "4\n5\n"
    );
    assert_eq!(ok(dir, &["consume", "g", "--group", "billing"], None), "");
    // --from-beginning ignores the committed offset.
    assert_eq!(
        ok(
            dir,
            &[
                "consume",
                "g",
                "--group",
                "billing",
                "--from-beginning",
                "--max",
                "1"
            ],
            None
        ),
        "1\n"
    );
}

#[test]
fn errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    let out = run(dir, &["consume", "missing"], None);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("mqlite: "), "{err}");
    assert!(err.contains("unknown topic"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let out = run(dir, &["produce", "missing"], Some("x\n"));
    assert_eq!(out.status.code(), Some(1));

    let out = run(
        dir,
        &["topic", "create", "bad name!", "--partitions", "1"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid topic name"), "{err}");

    // Usage errors exit with 2.
    let out = run(dir, &["produce", "t", "--acks", "5"], None);
    assert_eq!(out.status.code(), Some(2));
    let out = run(dir, &["topic", "create", "t"], None);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn locked_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "l", "--partitions", "1"], None);
    // A consumer waiting for records it will never get holds the lock.
    let spawn_holder = || {
        Command::new(env!("CARGO_BIN_EXE_mqlite"))
            .arg("--dir")
            .arg(dir)
            .args(["consume", "l", "--max", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut holder = spawn_holder();
    let mut err = String::new();
    for _ in 0..200 {
        // The holder may have lost the race for the lock to one of our own
        // probes (and exited): start it again.
        if holder.try_wait().unwrap().is_some() {
            holder = spawn_holder();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let out = run(dir, &["topics"], None);
        if !out.status.success() {
            assert_eq!(out.status.code(), Some(1));
            err = String::from_utf8_lossy(&out.stderr).into_owned();
            break;
        }
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(err.starts_with("mqlite: "), "{err}");
    assert!(err.contains("locked"), "{err}");
    // Free again once the holder is gone.
    assert_eq!(ok(dir, &["topics"], None), "l\n");
}

#[test]
fn verify_reports_corruption_with_its_place() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(
        dir,
        &[
            "topic",
            "create",
            "t",
            "--partitions",
            "1",
            "--segment-bytes",
            "4096",
        ],
        None,
    );
    let lines: String = (0..400)
        .map(|i| format!("value-{i:04}-padding\n"))
        .collect();
    ok(dir, &["produce", "t"], Some(&lines));
    let text = ok(dir, &["verify"], None);
    assert!(text.contains("t/0: 400 messages, ok"), "{text}");
    let v: Value = serde_json::from_str(&ok(dir, &["verify", "t", "--json"], None)).unwrap();
    assert_eq!(v[0]["messages"], 400);
    assert!(v[0]["error"].is_null());

    // Damage a byte inside the first (sealed) segment's first batch.
    let seg = dir.join("topics/t/0/00000000000000000000.log");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[70] ^= 0xff;
    std::fs::write(&seg, bytes).unwrap();
    let out = run(dir, &["verify"], None);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("CORRUPT"), "{stdout}");
    assert!(
        stdout.contains("00000000000000000000.log"),
        "names the file: {stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("mqlite: 1 partition(s) with corruption"),
        "{stderr}"
    );
}
