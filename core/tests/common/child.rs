//! A test of this binary run as a child process, read line by line and
//! killed (`kill -9`) when the parent has seen enough.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs the test `name` of this test binary in a child process with the
/// environment `vars` (its stderr to `dir/child.stderr`), reads the lines it
/// prints until `stop` returns true for one (or it exits), kills it, and
/// returns every line it printed, those it printed before the kill and the
/// parent had not read yet included (skipping them would miss work the
/// child did).
pub fn run_child_until(
    dir: &Path,
    name: &str,
    vars: &[(&str, &str)],
    mut stop: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("child.stderr")).expect("child.stderr"))
        .stdin(Stdio::null());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawning the child");
    let mut lines = Vec::new();
    let mut reader = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    for line in reader.by_ref() {
        let Ok(line) = line else { break };
        let done = stop(&line);
        lines.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines.extend(reader.map_while(std::result::Result::ok));
    lines
}
