//! What the tests against librdkafka's mock cluster share: a broker on
//! it, and a `read_committed` reader.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use mqlite::{Broker, Config, ConsumerConfig, IsolationLevel, OffsetReset};
use rdkafka::mocking::MockCluster;

/// librdkafka's mock cluster (in the test process).
pub type Mock = MockCluster<'static, rdkafka::producer::DefaultProducerContext>;

/// A broker on `mock`, which holds the named producers' sequences topic
/// already (the mock cluster cannot create topics when asked; Kafka's own
/// clusters can, and the first named producer does).
pub fn open(mock: &Mock) -> Broker {
    mock.create_topic("__mqlite_sequences", 1, 1).unwrap();
    let url = format!("kafka://{}", mock.bootstrap_servers());
    Broker::open(
        url,
        Config::default().kafka_property("request.timeout.ms", "10000"),
    )
    .unwrap()
}

/// Every value a `read_committed` reader sees in `topic`'s first
/// `partitions` partitions, with its partition, read until `want` came or
/// 10 s passed, then 300 ms more.
pub fn committed(mq: &Broker, topic: &str, partitions: u32, want: usize) -> Vec<(u32, String)> {
    let mut c = mq
        .consumer(ConsumerConfig {
            isolation_level: IsolationLevel::ReadCommitted,
            auto_offset_reset: OffsetReset::Earliest,
            ..ConsumerConfig::default()
        })
        .unwrap();
    let parts: Vec<(&str, u32)> = (0..partitions).map(|p| (topic, p)).collect();
    c.assign(&parts).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut more = None;
    loop {
        for m in c.poll(Duration::from_millis(100)).unwrap() {
            out.push((
                m.partition(),
                String::from_utf8(m.value().unwrap().to_vec()).unwrap(),
            ));
        }
        let now = Instant::now();
        if more.is_none() && (out.len() >= want || now >= deadline) {
            more = Some(now + Duration::from_millis(300));
        }
        if more.is_some_and(|m| now >= m) {
            return out;
        }
    }
}

/// [`committed`] of a one-partition topic: the values alone.
pub fn committed_values(mq: &Broker, topic: &str, want: usize) -> Vec<String> {
    committed(mq, topic, 1, want)
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}
