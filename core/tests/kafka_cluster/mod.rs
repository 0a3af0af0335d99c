//! The Kafka-compatible broker of a test binary: `tansu`
//! (`cargo install tansu --version 0.6.0 --locked --features dynostore`,
//! which `make test` does when it is missing), started on 127.0.0.1 on
//! first use with its storage in memory, killed when the binary exits.
//!
//! Without a `tansu` binary (`MQLITE_TANSU`, then `PATH`, then
//! `~/.cargo/bin`) [`cluster`] says so and returns `None` (the test
//! passes), unless `MQLITE_KAFKA_REQUIRED=1` (set by `make test`) makes
//! that a failure.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use mqlite::kafka::KafkaBroker;

/// The broker of this test binary, started on first use; a shell watches
/// this process and stops the broker when it exits, however it exits.
struct Cluster {
    url: String,
    /// The watching shell.
    _watch: Mutex<Child>,
}

fn tansu_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MQLITE_TANSU") {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join("tansu"))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process of a test uses its parent's broker, named here.
pub const URL_VAR: &str = "MQLITE_KAFKA_URL";

static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();

/// The cluster's `kafka://` address, or `None` (test skipped) without a
/// broker binary.
pub fn cluster() -> Option<&'static str> {
    if let Ok(url) = std::env::var(URL_VAR) {
        return Some(Box::leak(url.into_boxed_str()));
    }
    CLUSTER
        .get_or_init(|| {
            let Some(bin) = tansu_binary() else {
                assert!(
                    std::env::var("MQLITE_KAFKA_REQUIRED").as_deref() != Ok("1"),
                    "MQLITE_KAFKA_REQUIRED=1 but no tansu binary was found \
                     (cargo install tansu --version 0.6.0 --locked --features dynostore)"
                );
                eprintln!("skipped: no tansu binary (see core/tests/kafka_cluster/mod.rs)");
                return None;
            };
            let port = free_port();
            let listen = format!("tcp://127.0.0.1:{port}");
            let script = format!(
                "\"$0\" broker --listener-url {listen} --advertised-listener-url {listen} \
                 --storage-engine memory://tansu/ >/dev/null 2>&1 & b=$!; \
                 while kill -0 {me} 2>/dev/null && kill -0 $b 2>/dev/null; do sleep 0.2; done; \
                 kill $b 2>/dev/null",
                me = std::process::id()
            );
            let watch = Command::new("sh")
                .args(["-c", &script])
                .arg(&bin)
                .stdin(Stdio::null())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "tansu did not listen on {port}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Some(Cluster {
                url: format!("kafka://127.0.0.1:{port}"),
                _watch: Mutex::new(watch),
            })
        })
        .as_ref()
        .map(|c| c.url.as_str())
}

pub fn broker() -> Option<KafkaBroker> {
    let url = cluster()?;
    Some(KafkaBroker::open(url, &[("request.timeout.ms", "20000")]).unwrap())
}

/// A topic name no other test of this run uses.
pub fn topic(tag: &str) -> String {
    format!("{tag}-{}", std::process::id())
}
