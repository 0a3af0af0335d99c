//! Helpers shared by the CLI's end-to-end tests: running the built
//! `mqlite` binary on a data directory.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Runs `mqlite --dir <dir> <args>` with `stdin` (if any) as its input.
pub fn run(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    run_bytes(dir, args, stdin.map_or(&[][..], str::as_bytes))
}

/// Writes `bytes` to a child's stdin; a child that exits without reading
/// it all (it failed before reading, as it should on a bad topic) is fine.
pub fn feed(input: &mut impl Write, bytes: &[u8]) {
    if let Err(e) = input.write_all(bytes) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
}

pub fn ok(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = run(dir, args, stdin);
    assert!(
        out.status.success(),
        "mqlite {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs `mqlite --dir <dir> <args>` with `stdin` as its input.
pub fn run_bytes(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
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
    feed(&mut child.stdin.take().unwrap(), stdin);
    child.wait_with_output().expect("wait mqlite")
}

/// Runs and expects exit code `code`; returns stderr.
pub fn fails(dir: &Path, args: &[&str], code: i32) -> String {
    let out = run(dir, args, None);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "mqlite {args:?}: {err}");
    if code == 1 {
        assert!(err.starts_with("mqlite: "), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    err
}

/// A child process with its stdout read line by line on a thread.
pub struct Lines {
    pub child: std::process::Child,
    rx: std::sync::mpsc::Receiver<String>,
}

impl Lines {
    /// Starts `mqlite --dir <dir> <args>`.
    pub fn spawn(dir: &Path, args: &[&str]) -> Lines {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mqlite"))
            .arg("--dir")
            .arg(dir)
            .args(args)
            .env_remove("MQLITE_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mqlite");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines { child, rx }
    }

    /// The next line, if one comes within `timeout_ms`.
    pub fn next(&self, timeout_ms: u64) -> Option<String> {
        self.rx
            .recv_timeout(std::time::Duration::from_millis(timeout_ms))
            .ok()
    }

    /// Kills the process and returns what it wrote to stderr.
    pub fn kill(mut self) -> Output {
        let _ = self.child.kill();
        self.child.wait_with_output().unwrap()
    }
}
