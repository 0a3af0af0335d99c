//! The same calls on a Kafka cluster, through librdkafka (the `rdkafka`
//! crate, built from the sources it ships).
//!
//! [`KafkaBroker`] stands for a cluster as [`crate::Broker`] stands for a
//! data directory: it creates, lists, describes and deletes topics, and
//! makes [`KafkaProducer`]s and [`KafkaConsumer`]s from the same
//! [`ProducerConfig`] and [`ConsumerConfig`] a directory takes. Records,
//! messages, metadata and errors are mqlite's own types, so code written
//! against a directory reads the same against a cluster. Where the two
//! differ, the call's documentation says how (`docs/kafka.md` lists it
//! all).
//!
//! Built with the crate's `kafka` feature.

mod consumer;
mod error;
mod groups;
pub mod mirror;
mod named;
mod producer;
mod transaction;

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};

use crate::error::{Error, Result};
use crate::topic::{validate_topic_name, PartitionInfo, TopicConfig, TopicInfo};
use crate::{ConsumerConfig, ProducerConfig, RecoveryStats};

pub use consumer::KafkaConsumer;
pub(crate) use consumer::RebalanceEvent;
pub use producer::KafkaProducer;
pub(crate) use transaction::KafkaTransaction;

use error::from_kafka;

/// The scheme of a cluster's address: `kafka://host1:9092,host2:9092`.
pub const URL_SCHEME: &str = "kafka://";

/// How long a call that asks the cluster waits for its answer when the
/// configuration does not say (`request_timeout_ms`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The error of a call a broker on a Kafka cluster does not have (yet):
/// [`Error::InvalidArgument`] naming it.
pub(crate) fn not_on_cluster(what: &str) -> Error {
    Error::InvalidArgument(format!("{what}: not available on a Kafka cluster"))
}

/// The bootstrap servers of a `kafka://host:port,host:port` address, or
/// `None` when `url` is not one.
pub fn bootstrap_servers(url: &str) -> Option<&str> {
    url.strip_prefix(URL_SCHEME)
}

/// A Kafka cluster: topics, producers and consumers on it.
pub struct KafkaBroker {
    /// The address it was opened with.
    url: String,
    /// librdkafka properties every client of this broker starts from:
    /// `bootstrap.servers` and what the caller added.
    base: Vec<(String, String)>,
    admin: AdminClient<DefaultClientContext>,
    /// Asks for metadata and watermarks.
    meta: BaseConsumer,
    timeout: Duration,
    /// Replicas of each partition of a topic this broker creates.
    replication: i32,
}

impl std::fmt::Debug for KafkaBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaBroker")
            .field("properties", &self.base)
            .finish_non_exhaustive()
    }
}

impl KafkaBroker {
    /// Connects to the cluster at `url` (`kafka://host:port,...`).
    /// `properties` are librdkafka's (`security.protocol`, `sasl.*`,
    /// `client.id`, ...), given to every producer and consumer of this
    /// broker, plus two read here: `replication.factor` (replicas of the
    /// partitions of the topics [`KafkaBroker::create_topic`] makes;
    /// default 1) and `request.timeout.ms` (how long a call waits for the
    /// cluster; default 30 s).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an address that is not `kafka://`;
    /// [`Error::InvalidConfig`] for a property librdkafka refuses;
    /// [`Error::Io`] when the cluster cannot be reached in time.
    pub fn open(url: &str, properties: &[(&str, &str)]) -> Result<KafkaBroker> {
        let servers = bootstrap_servers(url)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{url:?} is not a cluster address ({URL_SCHEME}host:port,...)"
                ))
            })?;
        let mut base = vec![("bootstrap.servers".to_owned(), servers.to_owned())];
        let mut timeout = DEFAULT_REQUEST_TIMEOUT;
        let mut replication = 1;
        for (k, v) in properties {
            match *k {
                "replication.factor" => {
                    replication = v.parse().map_err(|_| {
                        Error::InvalidConfig(format!("replication.factor {v:?} is not a number"))
                    })?;
                }
                "request.timeout.ms" => {
                    let ms: u64 = v.parse().map_err(|_| {
                        Error::InvalidConfig(format!("request.timeout.ms {v:?} is not a number"))
                    })?;
                    timeout = Duration::from_millis(ms);
                }
                _ => base.push(((*k).to_owned(), (*v).to_owned())),
            }
        }
        let admin = client_config(&base)
            .create()
            .map_err(|e| from_kafka(e, "connecting to the cluster"))?;
        let meta: BaseConsumer = client_config(&base)
            .create()
            .map_err(|e| from_kafka(e, "connecting to the cluster"))?;
        // Reach the cluster once now, so an address nobody answers at fails
        // here rather than at the first send.
        meta.fetch_metadata(None, timeout)
            .map_err(|e| from_kafka(e, &format!("reaching {servers}")))?;
        Ok(KafkaBroker {
            url: url.to_owned(),
            base,
            admin,
            meta,
            timeout,
            replication,
        })
    }

    /// The librdkafka properties of a new client: the broker's, then
    /// `extra`.
    pub(crate) fn client_config(&self, extra: &[(&str, String)]) -> ClientConfig {
        let mut c = client_config(&self.base);
        for (k, v) in extra {
            c.set(*k, v);
        }
        c
    }

    /// The address the broker was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How long a call waits for the cluster.
    pub fn request_timeout(&self) -> Duration {
        self.timeout
    }

    /// Creates a topic of `config.partitions` partitions, with
    /// `retention_ms`, `retention_bytes`, `segment_bytes` and
    /// `max_message_bytes` as the topic's Kafka configs. The name follows
    /// mqlite's rules (a stricter subset of Kafka's), so a name valid here
    /// is valid on a directory.
    ///
    /// # Errors
    /// [`Error::InvalidTopicName`], [`Error::InvalidConfig`],
    /// [`Error::TopicExists`], or the cluster's error.
    pub fn create_topic(&self, name: &str, config: TopicConfig) -> Result<()> {
        validate_topic_name(name)?;
        config.validate()?;
        let mut settings: Vec<(&str, String)> = Vec::new();
        if let Some(ms) = config.retention_ms {
            settings.push(("retention.ms", ms.to_string()));
        }
        if let Some(b) = config.retention_bytes {
            settings.push(("retention.bytes", b.to_string()));
        }
        let defaults = TopicConfig::default();
        if config.segment_bytes != defaults.segment_bytes {
            settings.push(("segment.bytes", config.segment_bytes.to_string()));
        }
        if config.max_message_bytes != defaults.max_message_bytes {
            settings.push(("max.message.bytes", config.max_message_bytes.to_string()));
        }
        self.create_topic_with(name, config.partitions, &settings)
    }

    /// Creates topic `name` (its name not checked against mqlite's rules:
    /// internal topics start with `__`) with `partitions` partitions and
    /// the topic configs `settings`, and waits until the metadata shows it.
    pub(crate) fn create_topic_with(
        &self,
        name: &str,
        partitions: u32,
        settings: &[(&str, String)],
    ) -> Result<()> {
        let mut topic = NewTopic::new(
            name,
            partitions as i32,
            TopicReplication::Fixed(self.replication),
        );
        for (k, v) in settings {
            topic = topic.set(k, v);
        }
        let results =
            futures_executor::block_on(self.admin.create_topics([&topic], &self.admin_options()))
                .map_err(|e| from_kafka(e, &format!("creating topic {name:?}")))?;
        for r in results {
            r.map_err(|(t, code)| error::from_code(code, &t, &format!("creating topic {t:?}")))?;
        }
        self.wait_for_topic(name, Some(partitions))
    }

    /// Waits until the cluster's metadata shows `name` (with `partitions`
    /// partitions when given), or gone when `None` and `gone`.
    fn wait_for_topic(&self, name: &str, partitions: Option<u32>) -> Result<()> {
        let deadline = std::time::Instant::now() + self.timeout;
        loop {
            let seen = self.partition_count(name)?;
            let ready = match (seen, partitions) {
                (Some(n), Some(want)) => n >= want,
                (None, None) => true,
                _ => false,
            };
            if ready {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(Error::Timeout(self.timeout.as_millis() as u64));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn admin_options(&self) -> AdminOptions {
        AdminOptions::new()
            .request_timeout(Some(self.timeout))
            .operation_timeout(Some(self.timeout))
    }

    /// Deletes a topic.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], or the cluster's error.
    pub fn delete_topic(&self, name: &str) -> Result<()> {
        validate_topic_name(name)?;
        if self.partition_count(name)?.is_none() {
            return Err(Error::UnknownTopic(name.to_owned()));
        }
        let results =
            futures_executor::block_on(self.admin.delete_topics(&[name], &self.admin_options()))
                .map_err(|e| from_kafka(e, &format!("deleting topic {name:?}")))?;
        for r in results {
            r.map_err(|(t, code)| error::from_code(code, &t, &format!("deleting topic {t:?}")))?;
        }
        self.wait_for_topic(name, None)
    }

    /// Grows topic `name` to `partitions` partitions.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`]; [`Error::InvalidArgument`] when
    /// `partitions` is not more than the topic has; the cluster's error.
    pub fn add_partitions(&self, name: &str, partitions: u32) -> Result<()> {
        let have = self
            .partition_count(name)?
            .ok_or_else(|| Error::UnknownTopic(name.to_owned()))?;
        if partitions <= have {
            return Err(Error::InvalidArgument(format!(
                "topic {name:?} has {have} partitions; {partitions} is not more"
            )));
        }
        let grow = NewPartitions::new(name, partitions as usize);
        let results = futures_executor::block_on(
            self.admin.create_partitions([&grow], &self.admin_options()),
        )
        .map_err(|e| from_kafka(e, &format!("adding partitions to {name:?}")))?;
        for r in results {
            r.map_err(|(t, code)| {
                error::from_code(code, &t, &format!("adding partitions to {t:?}"))
            })?;
        }
        self.wait_for_topic(name, Some(partitions))
    }

    /// The topics of the cluster, sorted; internal ones (names starting
    /// with `__`, such as `__consumer_offsets`) are left out, as a
    /// directory leaves out its own.
    ///
    /// # Errors
    /// The cluster's error.
    pub fn topics(&self) -> Result<Vec<String>> {
        let md = self
            .meta
            .fetch_metadata(None, self.timeout)
            .map_err(|e| from_kafka(e, "listing topics"))?;
        let mut v: Vec<String> = md
            .topics()
            .iter()
            .filter(|t| t.error().is_none() && !t.name().starts_with("__"))
            .map(|t| t.name().to_owned())
            .collect();
        v.sort();
        Ok(v)
    }

    /// The partition count of topic `name`, `None` when the cluster does
    /// not have it.
    pub(crate) fn partition_count(&self, name: &str) -> Result<Option<u32>> {
        partition_count(&self.meta, name, self.timeout)
    }

    /// Topic `name` as the cluster has it: its partitions with their
    /// first and next offsets. `config` holds the partition count; the
    /// other configs are the defaults (the cluster's own are not read
    /// back), and sizes, segments and flushes are 0.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], or the cluster's error.
    pub fn topic(&self, name: &str) -> Result<TopicInfo> {
        validate_topic_name(name)?;
        let count = self
            .partition_count(name)?
            .ok_or_else(|| Error::UnknownTopic(name.to_owned()))?;
        let mut partitions = Vec::with_capacity(count as usize);
        for p in 0..count {
            let (low, high) = self
                .meta
                .fetch_watermarks(name, p as i32, self.timeout)
                .map_err(|e| from_kafka(e, &format!("reading offsets of {name}/{p}")))?;
            partitions.push(PartitionInfo {
                partition: p,
                start_offset: low.max(0) as u64,
                end_offset: high.max(0) as u64,
                size_bytes: 0,
                segments: 0,
                recovery: RecoveryStats::default(),
                flushes: 0,
            });
        }
        Ok(TopicInfo {
            name: name.to_owned(),
            config: TopicConfig::new(count),
            partitions,
        })
    }

    /// The earliest offset of `topic`/`partition` whose record timestamp is
    /// at or after `timestamp_ms`, or `None` when all records are older.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`], or the
    /// cluster's error.
    pub fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp_ms: i64,
    ) -> Result<Option<u64>> {
        let count = self
            .partition_count(topic)?
            .ok_or_else(|| Error::UnknownTopic(topic.to_owned()))?;
        if partition >= count {
            return Err(Error::UnknownPartition {
                topic: topic.to_owned(),
                partition,
                count,
            });
        }
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(
            topic,
            partition as i32,
            rdkafka::Offset::Offset(timestamp_ms),
        )
        .map_err(|e| from_kafka(e, "looking up offsets"))?;
        let got = self
            .meta
            .offsets_for_times(tpl, self.timeout)
            .map_err(|e| from_kafka(e, "looking up offsets"))?;
        Ok(got
            .find_partition(topic, partition as i32)
            .and_then(|e| match e.offset() {
                rdkafka::Offset::Offset(o) if o >= 0 => Some(o as u64),
                _ => None,
            }))
    }

    /// The names of the cluster's consumer groups, sorted.
    ///
    /// # Errors
    /// The cluster's error.
    pub fn groups(&self) -> Result<Vec<String>> {
        let list = self
            .meta
            .fetch_group_list(None, self.timeout)
            .map_err(|e| from_kafka(e, "listing consumer groups"))?;
        let mut v: Vec<String> = list.groups().iter().map(|g| g.name().to_owned()).collect();
        v.sort();
        Ok(v)
    }

    /// A producer on the cluster (see [`KafkaProducer`] for how each
    /// setting maps onto librdkafka's).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a setting the cluster cannot honour.
    pub fn producer(&self, config: ProducerConfig) -> Result<KafkaProducer> {
        KafkaProducer::new(self, config)
    }

    /// A consumer on the cluster (see [`KafkaConsumer`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a setting the cluster cannot honour.
    pub fn consumer(&self, config: ConsumerConfig) -> Result<KafkaConsumer> {
        KafkaConsumer::new(self, config)
    }
}

/// The partition count of `topic` in the metadata `client` asks the
/// cluster for, `None` when the cluster does not have it.
pub(crate) fn partition_count<C: rdkafka::consumer::ConsumerContext>(
    client: &BaseConsumer<C>,
    topic: &str,
    timeout: Duration,
) -> Result<Option<u32>> {
    let md = client
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| from_kafka(e, &format!("describing topic {topic:?}")))?;
    Ok(md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len() as u32))
}

fn client_config(props: &[(String, String)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (k, v) in props {
        c.set(k, v);
    }
    c
}
