//! The CLI lists a damaged topic or group as such and goes on with the
//! rest, instead of failing the whole listing.

use std::path::Path;
use std::process::{Command, Output};

use mqlite::{Broker, Config, ConsumerConfig, ProducerConfig, Record, TopicConfig};

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqlite"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env_remove("MQLITE_DIR")
        .output()
        .expect("run mqlite")
}

fn stdout_of(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert!(
        out.status.success(),
        "mqlite {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn topics_and_groups_list_damage_and_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mq = Broker::open(tmp.path(), Config::default().prefault(false)).unwrap();
        for t in ["a", "b"] {
            mq.create_topic(t, TopicConfig::new(1)).unwrap();
        }
        let p = mq.producer(ProducerConfig::default()).unwrap();
        p.send(Record::new("b").value("v")).unwrap();
        for g in ["g", "h"] {
            let mut c = mq.consumer(ConsumerConfig::group(g)).unwrap();
            c.assign(&[("b", 0)]).unwrap();
            c.commit_offsets(&[("b", 0, 1, "")]).unwrap();
        }
    }
    std::fs::write(tmp.path().join("topics/a/topic.json"), b"{").unwrap();
    std::fs::write(tmp.path().join("groups/g.offsets"), b"{").unwrap();

    let topics = stdout_of(tmp.path(), &["topics"]);
    let lines: Vec<&str> = topics.lines().collect();
    assert_eq!(lines.len(), 2, "{topics}");
    assert!(
        lines[0].starts_with("a  (damaged: corrupt data"),
        "{topics}"
    );
    assert_eq!(lines[1], "b");
    let json: serde_json::Value =
        serde_json::from_str(&stdout_of(tmp.path(), &["topics", "--json"])).unwrap();
    assert!(json[0]["damaged"].as_str().unwrap().contains("topic.json"));
    assert_eq!(json[1]["name"], "b");

    let groups = stdout_of(tmp.path(), &["groups"]);
    assert!(
        groups.contains("g ") && groups.contains("damaged: corrupt data"),
        "{groups}"
    );
    assert!(groups.lines().any(|l| l.starts_with('h')), "{groups}");
}
