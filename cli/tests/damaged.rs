//! The CLI lists a damaged topic or group as such and goes on with the
//! rest, instead of failing the whole listing.
#![allow(clippy::unwrap_used)]

mod common;

use common::ok;
use mqlite::{Broker, Config, ConsumerConfig, ProducerConfig, Record, TopicConfig};

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

    let topics = ok(tmp.path(), &["topics"], None);
    let lines: Vec<&str> = topics.lines().collect();
    assert_eq!(lines.len(), 2, "{topics}");
    assert!(
        lines[0].starts_with("a  (damaged: corrupt data"),
        "{topics}"
    );
    assert_eq!(lines[1], "b");
    let json: serde_json::Value =
        serde_json::from_str(&ok(tmp.path(), &["topics", "--json"], None)).unwrap();
    assert!(json[0]["damaged"].as_str().unwrap().contains("topic.json"));
    assert_eq!(json[1]["name"], "b");

    let groups = ok(tmp.path(), &["groups"], None);
    assert!(
        groups.contains("g ") && groups.contains("damaged: corrupt data"),
        "{groups}"
    );
    assert!(groups.lines().any(|l| l.starts_with('h')), "{groups}");
}
