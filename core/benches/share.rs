//! Share consumers (job-queue consumption) against a consumer group on the
//! same log, the redelivery of a message whose lock ran out, and how late
//! delayed records arrive.
//!
//! `cargo bench -p mqlite --bench share`. Runs, scale, filter and the JSON
//! record as in every bench on the shared harness (`harness/mod.rs`).
//!
//! - Rates: a log of 100 B records on one partition, written before the
//!   clock starts (one log per run, read by every rate row of the run, each
//!   row its own group from the log's start). A share consumer `poll`s and
//!   acknowledges each message (`ShareMessage::ack`, the reference row), or
//!   each poll's messages at once (`ShareConsumer::ack`); a consumer group
//!   member (no auto-commit) `poll`s and `commit`s once per poll. All
//!   polls return up to 500 messages (the default `max_poll_records`). At
//!   `commit_acks=1` (written to the operating system) and at
//!   `commit_acks=all` (synced per call: 5,000 messages for the row
//!   acknowledging each, 200,000 for the others, the first ones of the
//!   same log).
//! - Shared mode: the `commit_acks=1` share consumer rows with the
//!   directory open in shared mode (one process), against the same rows in
//!   exclusive mode.
//! - Redelivery: a share consumer with `lock_duration_ms=100`, one message
//!   per poll, records sent one every 5 ms while it polls. It never
//!   acknowledges a first delivery; each message's lock deadline is taken
//!   as the return of the poll that delivered it plus 100 ms (the lock is
//!   taken inside that poll, so this is a few microseconds after the
//!   engine's deadline), and the figure is the time from there to the
//!   return of the poll that delivers it again (then acknowledged).
//!   min, p50, p99 and max over the records of a run.
//! - Delayed delivery: records sent with `Record::delay` spread over
//!   0-2 s (each whole millisecond once, in a shuffled order) while a plain
//!   consumer reads the destination partition; lateness is the wall-clock
//!   time of receipt (ms since the epoch, to the microsecond) minus the
//!   record's delivery time (its `mqlite.deliver_at` header, whole ms).
//!   min, p50, p99 and max; a record received before its time fails the
//!   bench. Beside it, the time of a one-record send with `acks=all` (the
//!   mover sends what is due so), min, p50, p99 and max.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod harness;
use harness::{filter_matches, nearest_rank, scaled, write_records, Harness};

use mqlite::{
    Acks, Broker, Config, ConsumerConfig, ProducerConfig, Record, ShareConsumerConfig, TopicConfig,
};

const VALUE: [u8; 100] = [7; 100];
/// Messages per poll in the rate rows (the default `max_poll_records`).
const PER_POLL: u64 = 500;
/// The redelivery rows' lock.
const LOCK_MS: u64 = 100;

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mqlite-share-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `n` scaled, rounded down to whole polls (at least one).
fn polls_of(n: u64) -> u64 {
    (scaled(n) / PER_POLL).max(1) * PER_POLL
}

/// How a row settles what it read.
#[derive(Clone, Copy)]
enum Settle {
    /// Share consumer, `ShareMessage::ack` per message.
    AckEach,
    /// Share consumer, `ShareConsumer::ack` per poll.
    AckPoll,
    /// Consumer group member, `Consumer::commit` per poll.
    CommitPoll,
}

/// Seconds for group `group` to read and settle the first `n` records of
/// `t`/0 (`n` a whole number of polls).
fn consume(mq: &Broker, group: &str, settle: Settle, acks: Acks, n: u64) -> f64 {
    let mut got = 0u64;
    let timeout = Duration::from_secs(5);
    if let Settle::CommitPoll = settle {
        let mut c = mq
            .consumer(
                ConsumerConfig::group(group)
                    .enable_auto_commit(false)
                    .commit_acks(acks)
                    .max_poll_records(PER_POLL as usize),
            )
            .unwrap();
        c.subscribe(&["t"]).unwrap();
        let t = Instant::now();
        while got < n {
            let batch = c.poll(timeout).unwrap();
            assert!(!batch.is_empty(), "{group}: no records after {got}");
            for m in &batch {
                black_box(m.value());
            }
            c.commit().unwrap();
            got += batch.len() as u64;
        }
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(got, n, "{group}: polls past the records asked for");
        return secs;
    }
    let mut c = mq
        .share_consumer(
            ShareConsumerConfig::group(group)
                .commit_acks(acks)
                .max_poll_records(PER_POLL as usize),
        )
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    let each = matches!(settle, Settle::AckEach);
    let t = Instant::now();
    while got < n {
        let batch = c.poll(timeout).unwrap();
        assert!(!batch.is_empty(), "{group}: no records after {got}");
        for m in &batch {
            black_box(m.value());
            if each {
                m.ack().unwrap();
            }
        }
        if !each {
            c.ack(&batch).unwrap();
        }
        got += batch.len() as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(got, n, "{group}: polls past the records asked for");
    assert_eq!(c.stats().acked, n, "{group}: acknowledgements");
    secs
}

/// The rate rows of one run: one log, each row a group of its own.
fn rate_rows(h: &mut Harness) {
    // Messages per row: [ack per message, ack per poll, commit per poll].
    // Synced, acknowledging each message is one sync per message: fewer.
    let one = polls_of(1_000_000);
    let sets = [
        ("commit_acks=1", Acks::One, [one; 3]),
        (
            "commit_acks=all",
            Acks::All,
            [polls_of(5_000), polls_of(200_000), polls_of(200_000)],
        ),
    ];
    let rows = |label: &str| {
        [
            (
                format!("share consumer, poll + ack per message, {label}"),
                Settle::AckEach,
            ),
            (
                format!("share consumer, poll + ack per poll (500), {label}"),
                Settle::AckPoll,
            ),
            (
                format!("consumer group, poll + commit per poll (500), {label}"),
                Settle::CommitPoll,
            ),
        ]
    };
    if !sets
        .iter()
        .any(|(label, _, _)| rows(label).iter().any(|(name, _)| filter_matches(name)))
    {
        return;
    }
    let dir = fresh_dir("rates");
    let mq = Broker::open(&dir, harness::exclusive()).unwrap();
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(256 << 20))
        .unwrap();
    let longest = sets.iter().flat_map(|(_, _, n)| *n).max().unwrap_or(one);
    write_records(&mq, "t", longest, &VALUE);
    for (i, (label, acks, counts)) in sets.into_iter().enumerate() {
        let group_title = format!("100 B, {label}, against a share consumer acking each message");
        let rows = rows(label);
        let base = &rows[0].0;
        for (j, ((name, settle), n)) in rows.iter().zip(counts).enumerate() {
            if !filter_matches(name) {
                continue;
            }
            let secs = consume(&mq, &format!("g{i}{j}"), *settle, acks, n);
            let baseline = (j > 0).then_some(base.as_str());
            h.record(name, &group_title, n, VALUE.len(), secs, baseline);
        }
    }
    mq.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `commit_acks=1` share consumer rows with the directory open in
/// shared mode (one process; every operation takes the group's file lock
/// and looks for what other processes wrote), against the same rows in
/// exclusive mode.
fn shared_mode_rows(h: &mut Harness) {
    let rows = [
        (
            "share consumer in shared mode, poll + ack per message, commit_acks=1",
            Settle::AckEach,
            "share consumer, poll + ack per message, commit_acks=1",
        ),
        (
            "share consumer in shared mode, poll + ack per poll (500), commit_acks=1",
            Settle::AckPoll,
            "share consumer, poll + ack per poll (500), commit_acks=1",
        ),
    ];
    if !rows.iter().any(|(name, _, _)| filter_matches(name)) {
        return;
    }
    let n = polls_of(1_000_000);
    let dir = fresh_dir("shared");
    let mq = Broker::open(&dir, Config::default().shared(true)).unwrap();
    mq.create_topic("t", TopicConfig::new(1).segment_bytes(256 << 20))
        .unwrap();
    write_records(&mq, "t", n, &VALUE);
    for (j, (name, settle, exclusive)) in rows.iter().enumerate() {
        if !filter_matches(name) {
            continue;
        }
        let secs = consume(&mq, &format!("s{j}"), *settle, Acks::One, n);
        let group = "100 B, commit_acks=1, shared mode against exclusive mode";
        h.record(name, group, n, VALUE.len(), secs, Some(exclusive));
    }
    mq.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value at quantile `q` of `sorted` (nearest rank).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[nearest_rank(sorted.len(), q)]
}

/// min, p50, p99 and max of `v`.
fn percentiles(mut v: Vec<f64>) -> [(&'static str, f64); 4] {
    v.sort_by(f64::total_cmp);
    [
        ("min", v[0]),
        ("p50", percentile(&v, 0.5)),
        ("p99", percentile(&v, 0.99)),
        ("max", v[v.len() - 1]),
    ]
}

/// Microseconds from each lock deadline to the message's next delivery,
/// for `n` records sent one every `gap` (see the module documentation).
fn redelivery_delays(n: u64, gap: Duration) -> Vec<f64> {
    let dir = fresh_dir("redelivery");
    let mq = Broker::open(&dir, harness::exclusive()).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let mut c = mq
        .share_consumer(
            ShareConsumerConfig::group("redelivery")
                .lock_duration_ms(LOCK_MS)
                .max_poll_records(1)
                .commit_acks(Acks::One),
        )
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    let lock = Duration::from_millis(LOCK_MS);
    let mut deadlines: HashMap<u64, Instant> = HashMap::new();
    let mut delays = Vec::with_capacity(n as usize);
    std::thread::scope(|s| {
        let mq = &mq;
        s.spawn(move || {
            let p = mq.producer(ProducerConfig::default()).unwrap();
            for _ in 0..n {
                p.send(Record::new("t").partition(0).value(VALUE)).unwrap();
                std::thread::sleep(gap);
            }
            p.close().unwrap();
        });
        while (delays.len() as u64) < n {
            let got = c.poll(Duration::from_secs(5)).unwrap();
            let now = Instant::now();
            assert!(!got.is_empty(), "redelivery: nothing for 5 s");
            for m in &got {
                match m.delivery_count() {
                    1 => {
                        deadlines.insert(m.offset(), now + lock);
                    }
                    2 => {
                        let due = deadlines[&m.offset()];
                        let late = if now >= due {
                            (now - due).as_secs_f64()
                        } else {
                            -(due - now).as_secs_f64()
                        };
                        delays.push(late * 1e6);
                        m.ack().unwrap();
                    }
                    k => panic!("redelivery: offset {} delivered {k} times", m.offset()),
                }
            }
        }
    });
    assert_eq!(c.stats().redelivered, n);
    drop(c);
    mq.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    delays
}

fn redelivery_rows(h: &mut Harness) {
    let what = "redelivery after a lock expiry (lock_duration_ms=100)";
    if !filter_matches(what) {
        return;
    }
    let n = scaled(200);
    for (label, v) in percentiles(redelivery_delays(n, Duration::from_millis(5))) {
        h.figure(&format!("{what}, {label}"), "us", v);
    }
}

/// Milliseconds since the epoch, to the microsecond.
fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1e3
}

/// Per record of `n` sent with delays spread over `span`: its receipt
/// minus its delivery time, in ms.
fn delayed_lateness(n: u64, span: Duration) -> Vec<f64> {
    let dir = fresh_dir("delayed");
    let mq = Broker::open(&dir, harness::exclusive()).unwrap();
    mq.create_topic("d", TopicConfig::new(1)).unwrap();
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[("d", 0)]).unwrap();
    let span_ms = span.as_millis() as u64;
    let mut late = Vec::with_capacity(n as usize);
    std::thread::scope(|s| {
        let mq = &mq;
        s.spawn(move || {
            let p = mq.producer(ProducerConfig::default()).unwrap();
            for i in 0..n {
                // 7919 is prime and no factor of n: a permutation of 0..n.
                let slot = if n.is_multiple_of(7919) {
                    i
                } else {
                    i * 7919 % n
                };
                let delay = Duration::from_millis(slot * span_ms / n);
                p.send(Record::new("d").partition(0).value(VALUE).delay(delay))
                    .unwrap();
            }
            p.close().unwrap();
        });
        while (late.len() as u64) < n {
            let got = c.poll(Duration::from_secs(10)).unwrap();
            let now = wall_ms();
            assert!(!got.is_empty(), "delayed: {} of {n} after 10 s", late.len());
            for m in &got {
                let due: i64 = m
                    .headers()
                    .iter()
                    .find(|h| h.key == mqlite::delayed::DELIVER_AT_HEADER)
                    .and_then(|h| std::str::from_utf8(&h.value).ok()?.parse().ok())
                    .unwrap();
                late.push(now - due as f64);
            }
        }
    });
    drop(c);
    mq.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    late
}

fn delayed_rows(h: &mut Harness) {
    let what = "delayed delivery lateness (delays 0-2 s)";
    if !filter_matches(what) {
        return;
    }
    let n = scaled(2_000);
    let late = delayed_lateness(n, Duration::from_secs(2));
    let early = late.iter().filter(|l| **l < 0.0).count();
    h.figure(
        &format!("delayed records received before their time (of {n})"),
        "records",
        early as f64,
    );
    assert_eq!(early, 0, "delayed records received before their time");
    for (label, v) in percentiles(late) {
        h.figure(&format!("{what}, {label}"), "ms", v);
    }
    let what = "send of one 100 B record, acks=all (as the mover's move)";
    for (label, v) in percentiles(synced_sends(scaled(300))) {
        h.figure(&format!("{what}, {label}"), "ms", v);
    }
}

/// Milliseconds of each of `n` sends of one record with `acks=all`, one
/// after another: what moving a due record waits for (the mover sends
/// with `acks=all`).
fn synced_sends(n: u64) -> Vec<f64> {
    let dir = fresh_dir("synced");
    let mq = Broker::open(&dir, harness::exclusive()).unwrap();
    mq.create_topic("d", TopicConfig::new(1)).unwrap();
    let p = mq
        .producer(ProducerConfig::default().acks(Acks::All))
        .unwrap();
    let took = (0..n)
        .map(|_| {
            let t = Instant::now();
            p.send(Record::new("d").partition(0).value(VALUE)).unwrap();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    p.close().unwrap();
    mq.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    took
}

fn one_run(h: &mut Harness) {
    rate_rows(h);
    shared_mode_rows(h);
    redelivery_rows(h);
    delayed_rows(h);
}

fn main() {
    harness::run_bench(
        "share",
        &[
            "rates: 100 B records on one partition written before the clock starts; each row \
             a group of its own reading the same log from its start, up to 500 messages per poll",
            "redelivery: lock_duration_ms=100, one message per poll, a record sent every 5 ms; \
             from the delivering poll's return + 100 ms to the return of the poll that delivers \
             it again",
            "delayed: Record::delay spread over 0-2 s, read by a plain consumer; receipt (wall \
             clock) minus the record's mqlite.deliver_at",
        ],
        one_run,
    );
}
