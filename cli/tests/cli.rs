//! End-to-end tests running the built `mqlite` binary on a temporary
//! data directory.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{fails, json_lines, ok, run, run_bytes, Lines};
use serde_json::Value;

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
    assert_eq!(v["config"]["segment_bytes"], 1_048_576);
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
    // A producer reading a pipe we never write to holds the directory in
    // exclusive mode.
    let mut holder = Command::new(env!("CARGO_BIN_EXE_mqlite"))
        .arg("--dir")
        .arg(dir)
        .args(["produce", "l"])
        .env_remove("MQLITE_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = String::new();
    for _ in 0..200 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let out = run(dir, &["topics"], None);
        if !out.status.success() {
            assert_eq!(out.status.code(), Some(1));
            err = String::from_utf8_lossy(&out.stderr).into_owned();
            break;
        }
    }
    // A writing command is refused too.
    let produce_err = fails(dir, &["topic", "create", "m", "--partitions", "1"], 1);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(err.starts_with("mqlite: "), "{err}");
    assert!(err.contains("locked"), "{err}");
    // The reading command says how to read alongside the application.
    assert!(err.contains("shared=True"), "{err}");
    assert!(produce_err.contains("locked"), "{produce_err}");
    // Free again once the holder is gone.
    assert_eq!(ok(dir, &["topics"], None), "l\n");
}

fn frame(out: &mut Vec<u8>, v: &[u8]) {
    out.extend_from_slice(&(v.len() as u32).to_be_bytes());
    out.extend_from_slice(v);
}

// ------------------------------------------------------------------ groups

#[test]
fn groups_lists_groups_with_their_lag() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    assert_eq!(ok(dir, &["groups", "--json"], None), "[]\n");
    ok(dir, &["topic", "create", "a", "--partitions", "2"], None);
    ok(
        dir,
        &["produce", "a", "--partition", "0"],
        Some("1\n2\n3\n"),
    );
    ok(dir, &["produce", "a", "--partition", "1"], Some("4\n5\n"));
    ok(
        dir,
        &["consume", "a", "--group", "billing", "--max", "1"],
        None,
    );
    ok(dir, &["consume", "a", "--group", "audit"], None);

    let v: Value = serde_json::from_str(&ok(dir, &["groups", "--json"], None)).unwrap();
    let groups = v.as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["name"], "audit");
    assert_eq!(groups[0]["lag"], 0);
    assert_eq!(groups[0]["partitions"], 2);
    assert_eq!(groups[1]["name"], "billing");
    // Only the partition it read has a committed offset.
    assert_eq!(groups[1]["lag"], 2);
    assert_eq!(groups[1]["members"], 0);
    let offs = groups[1]["offsets"].as_array().unwrap();
    assert_eq!(offs.len(), 1);
    assert_eq!(offs[0]["committed"], 1);
    assert_eq!(offs[0]["end_offset"], 3);
    assert_eq!(offs[0]["lag"], 2);

    let text = ok(dir, &["groups"], None);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[1].starts_with("audit") && lines[1].ends_with(" 0"),
        "{text}"
    );
    assert!(lines[2].starts_with("billing"), "{text}");

    fails(dir, &["groups", "--bogus"], 2);
}

// ------------------------------------------------------------------ produce

#[test]
fn produce_from_a_file_with_headers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "t", "--partitions", "1"], None);
    let input = tmp.path().join("in.txt");
    let lines = (0..500)
        .map(|i| format!("k{i}=v{i}\r\n"))
        .collect::<Vec<_>>()
        .concat();
    std::fs::write(&input, lines).unwrap();
    let out = run(
        dir,
        &[
            "produce",
            "t",
            "--file",
            input.to_str().unwrap(),
            "--key-separator",
            "=",
            "--header",
            "source=file",
            "--header",
            "n=1=2",
        ],
        None,
    );
    assert!(out.status.success());
    // Not a terminal: no progress bar, only the summary.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "500 record(s) written to t\n"
    );
    let recs = json_lines(&ok(dir, &["consume", "t", "--format", "json"], None));
    assert_eq!(recs.len(), 500);
    assert_eq!(recs[499]["key"], "k499");
    assert_eq!(recs[499]["value"], "v499");
    let headers = recs[0]["headers"].as_array().unwrap();
    assert_eq!(headers.len(), 2);
    assert_eq!(headers[0]["key"], "source");
    assert_eq!(headers[0]["value"], "file");
    assert_eq!(headers[1]["key"], "n");
    assert_eq!(headers[1]["value"], "1=2");
    // Text shows the headers before a tab.
    assert_eq!(
        ok(dir, &["consume", "t", "--max", "1"], None),
        "source=file,n=1=2\tv0\n"
    );

    fails(dir, &["produce", "t", "--file", "/nonexistent/in.txt"], 1);
    fails(dir, &["produce", "t", "--header", "novalue"], 2);
    fails(dir, &["produce", "t", "--format", "csv"], 2);
    fails(dir, &["produce", "t", "--partition", "3"], 1);
}

#[test]
fn raw_output_round_trips_through_length_prefixed_input() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "src", "--partitions", "1"], None);
    ok(dir, &["topic", "create", "dst", "--partitions", "1"], None);
    // Binary values, newlines, an empty one.
    let values: Vec<Vec<u8>> = vec![
        b"plain".to_vec(),
        b"two\nlines".to_vec(),
        vec![],
        (0..=255u8).collect(),
        vec![b'x'; 70_000],
    ];
    let mut input = Vec::new();
    for v in &values {
        frame(&mut input, v);
    }
    let out = run_bytes(
        dir,
        &["produce", "src", "--format", "length-prefixed"],
        &input,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let raw = run(dir, &["consume", "src", "--format", "raw"], None);
    assert!(raw.status.success());
    assert_eq!(raw.stdout, input, "same framing out as in");
    // Into another topic (the two commands cannot share the directory at
    // once: each takes its lock), then out again.
    let file = tmp.path().join("dump.bin");
    std::fs::write(&file, &raw.stdout).unwrap();
    ok(
        dir,
        &[
            "produce",
            "dst",
            "--format",
            "length-prefixed",
            "--file",
            file.to_str().unwrap(),
        ],
        None,
    );
    let again = run(dir, &["consume", "dst", "--format", "raw"], None);
    assert_eq!(again.stdout, input);

    // Damaged framing is one clear error.
    let out = run_bytes(
        dir,
        &["produce", "dst", "--format", "length-prefixed"],
        &[0, 0, 0, 9, b'a', b'b'],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("inside the frame at byte 0"), "{err}");
    let out = run_bytes(
        dir,
        &["produce", "dst", "--format", "length-prefixed"],
        &[0xff, 0xff, 0xff, 0xff],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_message_bytes"), "{err}");
}

// ------------------------------------------------------------------ consume --since

#[test]
fn consume_since_a_time() {
    use time::format_description::well_known::Rfc3339;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "t", "--partitions", "2"], None);
    ok(dir, &["produce", "t", "--partition", "0"], Some("old-0\n"));
    ok(dir, &["produce", "t", "--partition", "1"], Some("old-1\n"));
    std::thread::sleep(std::time::Duration::from_millis(100));
    let between = time::OffsetDateTime::now_utc().format(&Rfc3339).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    ok(dir, &["produce", "t", "--partition", "1"], Some("new-1\n"));

    assert_eq!(
        ok(dir, &["consume", "t", "--since", &between], None),
        "new-1\n"
    );
    let mut all: Vec<String> = ok(dir, &["consume", "t", "--since", "1h"], None)
        .lines()
        .map(str::to_owned)
        .collect();
    all.sort();
    assert_eq!(all, ["new-1", "old-0", "old-1"]);
    assert_eq!(
        ok(
            dir,
            &["consume", "t", "--since", "2999-01-01T00:00:00+02:00"],
            None
        ),
        ""
    );
    // With a group: starts there, then commits.
    assert_eq!(
        ok(
            dir,
            &["consume", "t", "--group", "g", "--since", &between],
            None
        ),
        "new-1\n"
    );

    let err = fails(dir, &["consume", "t", "--since", "yesterday"], 2);
    assert!(err.contains("RFC 3339"), "{err}");
    fails(dir, &["consume", "t", "--since", "10m", "--offset", "3"], 2);
    fails(
        dir,
        &["consume", "t", "--since", "10m", "--from-beginning"],
        2,
    );
}

// ------------------------------------------------------------------ tail

#[test]
fn tail_follows_a_producer_that_holds_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(
        dir,
        &[
            "topic",
            "create",
            "t",
            "--partitions",
            "2",
            "--segment-bytes",
            "4096",
        ],
        None,
    );
    ok(dir, &["produce", "t", "--partition", "0"], Some("before\n"));

    // A producer reading from a pipe holds the lock while we feed it.
    let mut producer = Command::new(env!("CARGO_BIN_EXE_mqlite"))
        .arg("--dir")
        .arg(dir)
        .args(["produce", "t", "--key-separator", ":"])
        .env_remove("MQLITE_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut feed = producer.stdin.take().unwrap();
    // Its first record on disk (seen by `verify`, which does not open the
    // directory) shows that it holds the directory, in exclusive mode: then
    // tail cannot open it and reads the files. (A probe that opens it
    // could make the producer open it shared instead.)
    writeln!(feed, "key-0:value-0").unwrap();
    feed.flush().unwrap();
    let mut held = false;
    for _ in 0..200 {
        let text = String::from_utf8_lossy(&run(dir, &["verify", "t"], None).stdout).into_owned();
        let total: u64 = text
            .lines()
            .filter_map(|l| l.split(": ").nth(1)?.split(' ').next()?.parse::<u64>().ok())
            .sum();
        if total == 2 {
            held = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(held, "the producer never wrote its first record");
    let tail = Lines::spawn(dir, &["tail", "t", "--from-beginning", "--format", "json"]);
    let first = tail.next(10_000).expect("the record written before");
    assert_eq!(
        serde_json::from_str::<Value>(&first).unwrap()["value"],
        "before"
    );

    // Enough records for the 4 KiB segments to roll several times.
    const N: usize = 300;
    let mut seen = Vec::new();
    for i in 1..N {
        writeln!(feed, "key-{i}:value-{i}").unwrap();
        if i % 50 == 0 {
            feed.flush().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
    }
    feed.flush().unwrap();
    while seen.len() < N {
        let Some(line) = tail.next(10_000) else { break };
        seen.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    // The directory is still held by the producer.
    let err = fails(dir, &["topics"], 1);
    assert!(err.contains("locked"), "{err}");
    let out = tail.kill();
    assert_eq!(
        seen.len(),
        N,
        "tail stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Per partition, in order; all keys and values as written.
    for p in 0..2 {
        let offs: Vec<u64> = seen
            .iter()
            .filter(|v| v["partition"] == p)
            .map(|v| v["offset"].as_u64().unwrap())
            .collect();
        assert!(offs.windows(2).all(|w| w[1] == w[0] + 1), "{offs:?}");
    }
    let mut values: Vec<String> = seen
        .iter()
        .map(|v| {
            let (k, val) = (v["key"].as_str().unwrap(), v["value"].as_str().unwrap());
            assert_eq!(k.strip_prefix("key-"), val.strip_prefix("value-"));
            val.to_owned()
        })
        .collect();
    values.sort();
    let mut expected: Vec<String> = (0..N).map(|i| format!("value-{i}")).collect();
    expected.sort();
    assert_eq!(values, expected);

    drop(feed);
    let out = producer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tail_starts_at_the_end_and_stops_after_max() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "t", "--partitions", "1"], None);
    ok(dir, &["produce", "t"], Some("old-1\nold-2\n"));
    let tail = Lines::spawn(dir, &["tail", "t", "--partition", "0", "--max", "2"]);
    // tail gives no sign of being ready: write until it prints something.
    let mut got = Vec::new();
    for i in 0..100 {
        ok(dir, &["produce", "t"], Some(&format!("new-{i}\n")));
        if let Some(l) = tail.next(200) {
            got.push(l);
            break;
        }
    }
    ok(dir, &["produce", "t"], Some("last\n"));
    while got.len() < 2 {
        match tail.next(10_000) {
            Some(l) => got.push(l),
            None => break,
        }
    }
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|l| !l.starts_with("old")), "{got:?}");
    // --max 2 ends it by itself.
    let mut child = tail.child;
    let status = child.wait().unwrap();
    assert!(status.success());
}

#[test]
fn tail_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let err = fails(dir, &["tail", "missing"], 1);
    assert!(err.contains("unknown topic"), "{err}");
    let err = fails(dir, &["tail", "../escape"], 1);
    assert!(err.contains("invalid topic name"), "{err}");
    ok(dir, &["topic", "create", "t", "--partitions", "2"], None);
    let err = fails(dir, &["tail", "t", "--partition", "2"], 1);
    assert!(err.contains("unknown partition 2"), "{err}");
    fails(dir, &["tail", "t", "--format", "xml"], 2);
    fails(dir, &["tail", "t", "--partition", "-1"], 2);
}

// ------------------------------------------------------------------ dump

#[test]
fn dump_shows_batch_headers_and_damage() {
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
    // Three separate produce runs: three batches in the first segment.
    for chunk in ["a\nb\n", "c\n", "d\ne\nf\n"] {
        ok(dir, &["produce", "t"], Some(chunk));
    }
    let rows = json_lines(&ok(dir, &["dump", "t", "0", "--json"], None));
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["file"], "00000000000000000000.log");
    assert_eq!(rows[0]["position"], 0);
    assert_eq!(rows[0]["base_offset"], 0);
    assert_eq!(rows[0]["record_count"], 2);
    assert_eq!(rows[0]["last_offset"], 1);
    assert_eq!(rows[1]["base_offset"], 2);
    assert_eq!(rows[1]["position"], rows[0]["size"]);
    assert_eq!(rows[2]["record_count"], 3);
    assert_eq!(rows[2]["codec"], "none");
    for r in &rows {
        assert_eq!(r["crc_ok"], true);
        assert!(r["error"].is_null());
        assert!(
            r["producer_id"].as_i64().unwrap() >= 0,
            "idempotent by default"
        );
        assert!(r["first_timestamp"].as_i64().unwrap() > 0);
    }
    let text = ok(dir, &["dump", "t", "0"], None);
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(text.lines().skip(1).all(|l| l.ends_with("ok")), "{text}");

    // It reads the files without the lock: works while a process holds it.
    let holder = Lines::spawn(dir, &["consume", "t", "--max", "100"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        json_lines(&ok(dir, &["dump", "t", "0", "--json"], None)).len(),
        3
    );
    holder.kill();

    // Damage the second batch: reported with its place, the rest still shown.
    let seg = dir.join("topics/t/0/00000000000000000000.log");
    let at = rows[1]["position"].as_u64().unwrap() as usize;
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[at + 30] ^= 0x10;
    std::fs::write(&seg, bytes).unwrap();
    let out = run(dir, &["dump", "t", "0", "--json"], None);
    assert_eq!(out.status.code(), Some(1));
    let rows = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[1]["position"], at as u64);
    assert_eq!(rows[1]["crc_ok"], false);
    assert!(rows[1]["error"].as_str().unwrap().contains("CRC"));
    assert_eq!(rows[2]["crc_ok"], true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err, "mqlite: 1 of 3 batch(es) in t/0 are damaged\n");
    let out = run(dir, &["dump", "t", "0"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("BAD: CRC32C mismatch"));

    let err = fails(dir, &["dump", "t", "0", "--segment", "7"], 1);
    assert!(err.contains("no segment starting at offset 7"), "{err}");
    assert!(fails(dir, &["dump", "t", "1"], 1).contains("unknown partition"));
    assert!(fails(dir, &["dump", "nope", "0"], 1).contains("unknown topic"));
    fails(dir, &["dump", "t"], 2);
    fails(dir, &["dump", "t", "x"], 2);
}

// ------------------------------------------------------------------ bench

#[test]
fn bench_measures_in_a_scratch_place() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let v: Value = serde_json::from_str(&ok(
        dir,
        &[
            "bench",
            "--n",
            "3000",
            "--size",
            "64",
            "--partitions",
            "2",
            "--json",
        ],
        None,
    ))
    .unwrap();
    assert_eq!(v["messages"], 3000);
    assert_eq!(v["size"], 64);
    assert_eq!(v["acks"], "1");
    for phase in ["produce", "consume"] {
        assert!(v[phase]["seconds"].as_f64().unwrap() > 0.0);
        let rate = v[phase]["messages_per_sec"].as_f64().unwrap();
        let mb = v[phase]["mb_per_sec"].as_f64().unwrap();
        assert!(rate > 0.0);
        assert!((mb - rate * 64.0 / 1e6).abs() < 1e-6 * rate.max(1.0), "{v}");
    }
    // A temporary directory: nothing left in --dir.
    assert!(!dir.join("topics").exists());

    // In the data directory: a temporary topic, deleted afterwards.
    ok(dir, &["topic", "create", "keep", "--partitions", "1"], None);
    let text = ok(
        dir,
        &[
            "bench",
            "--n",
            "500",
            "--batch",
            "100",
            "--acks",
            "all",
            "--in-data-dir",
        ],
        None,
    );
    assert!(text.contains("500 messages of 100 bytes"), "{text}");
    assert!(
        text.contains("produce:") && text.contains("msg/s"),
        "{text}"
    );
    assert_eq!(ok(dir, &["topics"], None), "keep\n");

    fails(dir, &["bench", "--n", "0"], 2);
    fails(dir, &["bench", "--acks", "2"], 2);
    fails(dir, &["bench", "--size", "lots"], 2);
}

#[test]
fn verify_and_produce_stay_quiet_when_piped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["topic", "create", "t", "--partitions", "1"], None);
    ok(dir, &["produce", "t"], Some("x\ny\n"));
    let out = run(dir, &["verify"], None);
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
