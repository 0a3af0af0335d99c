//! mqlite's rows: the producer (`send`, `send_batch`, threads sharing
//! `acks=all` flushes), the raw log below it, and the consumer.
//!
//! Every row uses the default broker, topic (one partition, 64 MiB
//! preallocated segments) and producer settings (idempotent), except `acks`.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mqlite::log::batch::RecordRef;
use mqlite::raw::partition_log;
use mqlite::{
    Acks, BorrowedRecord, Broker, Config, Consumer, ConsumerConfig, OffsetReset, Producer,
    ProducerConfig, Record, TopicConfig,
};

use crate::runner::{check, chunks, time, Context, Ctx, Res, Tally, CONSUME_BATCH};

const TOPIC: &str = "t";

/// The data directory opened in the row's mode by name (`ctx.mode`:
/// exclusive, or shared for a shared-mode twin), whatever the default.
fn open(ctx: &Ctx, dir: &Path) -> Res<Broker> {
    Broker::open(dir, Config::default().mode(ctx.mode)).ctx("Broker::open")
}

fn create(ctx: &Ctx, dir: &Path) -> Res<Broker> {
    let mq = open(ctx, dir)?;
    mq.create_topic(TOPIC, TopicConfig::new(1))
        .ctx("create_topic")?;
    Ok(mq)
}

fn borrowed(value: &[u8]) -> BorrowedRecord<'_> {
    BorrowedRecord {
        topic: TOPIC,
        partition: Some(0),
        value: Some(value),
        ..BorrowedRecord::default()
    }
}

/// `n` calls of `Producer::send`, each with a `Record` built from the
/// payload (as a caller holding a `&[u8]` writes it).
pub fn send(ctx: &Ctx, n: u64, acks: Acks) -> Res<f64> {
    let dir = ctx.dir()?;
    let mq = create(ctx, dir.path())?;
    let p = producer(&mq, acks)?;
    time(|| {
        for i in 0..n {
            p.send(Record::new(TOPIC).partition(0).value(ctx.payload(i)))
                .ctx("send")?;
        }
        Ok(())
    })
}

/// `n` calls of `Producer::send_borrowed` (no copy before the append).
pub fn send_borrowed(ctx: &Ctx, n: u64) -> Res<f64> {
    let dir = ctx.dir()?;
    let mq = create(ctx, dir.path())?;
    let p = mq.producer(ProducerConfig::default()).ctx("producer")?;
    time(|| {
        for i in 0..n {
            p.send_borrowed(&borrowed(ctx.payload(i)))
                .ctx("send_borrowed")?;
        }
        Ok(())
    })
}

/// A producer with `acks` (made before the clock starts, like the peers'
/// queues: the first producer of a data directory reserves its ids with an
/// fsync).
fn producer(mq: &Broker, acks: Acks) -> Res<Producer> {
    mq.producer(ProducerConfig::default().acks(acks))
        .ctx("producer")
}

fn send_batches(p: &Producer, ctx: &Ctx, n: u64) -> Res<()> {
    send_batches_as(p, ctx, n, false)
}

/// `n` records in calls of `send_batch` (with `report`: `send_batch_with`,
/// the metadata handed to a closure instead of returned in a `Vec`).
fn send_batches_as(p: &Producer, ctx: &Ctx, n: u64, report: bool) -> Res<()> {
    for (first, len) in ctx.batches(n) {
        let recs: Vec<BorrowedRecord<'_>> = (first..first + len as u64)
            .map(|i| borrowed(ctx.payload(i)))
            .collect();
        let reported = if report {
            let mut k = 0;
            p.send_batch_with(&recs, &mut |_, _| k += 1)
                .ctx("send_batch_with")?;
            k
        } else {
            p.send_batch(&recs).ctx("send_batch")?.len()
        };
        check(reported == len, || {
            "send_batch reported too few records".into()
        })?;
    }
    Ok(())
}

/// `n` records in calls of `Producer::send_batch` of `ctx.batch`.
pub fn send_batch(ctx: &Ctx, n: u64, acks: Acks) -> Res<f64> {
    let dir = ctx.dir()?;
    let mq = create(ctx, dir.path())?;
    let p = producer(&mq, acks)?;
    time(|| send_batches(&p, ctx, n))
}

/// `n` records in calls of `Producer::send_batch_with` of `ctx.batch`.
pub fn send_batch_with(ctx: &Ctx, n: u64, acks: Acks) -> Res<f64> {
    let dir = ctx.dir()?;
    let mq = create(ctx, dir.path())?;
    let p = producer(&mq, acks)?;
    time(|| send_batches_as(&p, ctx, n, true))
}

/// `n` calls of `Producer::send` with `acks=all`, shared by `ctx.threads`
/// threads on one partition: concurrent senders share each flush.
pub fn send_threads(ctx: &Ctx, n: u64) -> Res<f64> {
    let dir = ctx.dir()?;
    let mq = create(ctx, dir.path())?;
    let p = producer(&mq, Acks::All)?;
    let threads = ctx.threads as u64;
    time(|| {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let p = &p;
                    s.spawn(move || -> Res<()> {
                        for i in (t..n).step_by(threads as usize) {
                            p.send(Record::new(TOPIC).partition(0).value(ctx.payload(i)))
                                .ctx("send")?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| check(false, || "a sender panicked".into()))
            })
        })
    })
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `n` records appended straight to the partition log (`mqlite::raw`), `per`
/// records per batch; with `flush`, the log is flushed after each batch.
pub fn raw_append(ctx: &Ctx, n: u64, per: usize, flush: bool) -> Res<f64> {
    let dir = ctx.dir()?;
    let mq = create(ctx, dir.path())?;
    let log = partition_log(&mq, TOPIC, 0).ctx("partition_log")?;
    let ts = now_ms();
    time(|| {
        let mut recs: Vec<RecordRef<'_>> = Vec::with_capacity(per);
        for (first, len) in chunks(n, per) {
            recs.clear();
            recs.extend((first..first + len as u64).map(|i| RecordRef {
                key: None,
                value: Some(ctx.payload(i)),
                headers: &[],
                timestamp: ts,
            }));
            log.append(&recs).ctx("append")?;
            if flush {
                log.flush().ctx("flush")?;
            }
        }
        Ok(())
    })
}

/// How the backlog of a consume row was written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Backlog {
    /// `send_batch` of `ctx.batch` records: one log batch per call.
    Batches,
    /// One record per log batch (as `send` without batching writes them):
    /// the per-batch work of a read (header, CRC) is paid per message.
    Singles,
}

/// A data directory holding `n` records written as `shape` says, closed
/// and opened again (the consume rows read a backlog from the files).
fn backlog(ctx: &Ctx, dir: &Path, n: u64, shape: Backlog) -> Res<Broker> {
    {
        let mq = create(ctx, dir)?;
        match shape {
            Backlog::Batches => send_batches(&producer(&mq, Acks::One)?, ctx, n)?,
            Backlog::Singles => {
                let log = partition_log(&mq, TOPIC, 0).ctx("partition_log")?;
                let ts = now_ms();
                for i in 0..n {
                    let rec = RecordRef {
                        key: None,
                        value: Some(ctx.payload(i)),
                        headers: &[],
                        timestamp: ts,
                    };
                    log.append(&[rec]).ctx("append")?;
                }
            }
        }
    }
    open(ctx, dir)
}

/// A standalone consumer of the backlog's partition, `CONSUME_BATCH`
/// records per poll, and that backlog.
fn backlog_consumer(ctx: &Ctx, dir: &Path, n: u64, shape: Backlog) -> Res<(Broker, Consumer)> {
    let mq = backlog(ctx, dir, n, shape)?;
    let mut c = mq
        .consumer(
            ConsumerConfig::default()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(CONSUME_BATCH),
        )
        .ctx("consumer")?;
    c.assign(&[(TOPIC, 0)]).ctx("assign")?;
    Ok((mq, c))
}

/// Reads the `n` records back through a standalone consumer, `take` doing
/// one poll: it adds what it got to the tally and returns how many.
fn consume_with(
    ctx: &Ctx,
    n: u64,
    shape: Backlog,
    mut take: impl FnMut(&mut Consumer, &mut Tally) -> Res<usize>,
) -> Res<f64> {
    let dir = ctx.dir()?;
    let (_mq, mut c) = backlog_consumer(ctx, dir.path(), n, shape)?;
    let mut tally = Tally::default();
    let secs = time(|| {
        let mut idle = 0;
        while tally.count() < n {
            idle = if take(&mut c, &mut tally)? == 0 {
                idle + 1
            } else {
                0
            };
            check(idle < 50, || "the consumer found no more records".into())?;
        }
        Ok(())
    })?;
    tally.check(ctx, n)?;
    Ok(secs)
}

/// Reads the `n` records of a backlog of `shape` back with
/// `Consumer::poll` (owned messages).
pub fn poll(ctx: &Ctx, n: u64, shape: Backlog) -> Res<f64> {
    consume_with(ctx, n, shape, |c, tally| {
        let msgs = c.poll(Duration::from_millis(100)).ctx("poll")?;
        for m in &msgs {
            tally.add(m.value().unwrap_or_default());
        }
        Ok(msgs.len())
    })
}

/// Reads the `n` records of a backlog of `shape` back with
/// `Consumer::poll_batch` (the messages of a poll read by reference from
/// one `MessageBatch`).
pub fn poll_batch(ctx: &Ctx, n: u64, shape: Backlog) -> Res<f64> {
    consume_with(ctx, n, shape, |c, tally| {
        let batch = c.poll_batch(Duration::from_millis(100)).ctx("poll_batch")?;
        for m in &batch {
            tally.add(m.value().unwrap_or_default());
        }
        Ok(batch.len())
    })
}

/// Reads the `n` records of a backlog of `shape` back with the raw log
/// scan (CRC checked, no consumer).
pub fn raw_scan(ctx: &Ctx, n: u64, shape: Backlog) -> Res<f64> {
    let dir = ctx.dir()?;
    let mq = backlog(ctx, dir.path(), n, shape)?;
    let log = partition_log(&mq, TOPIC, 0).ctx("partition_log")?;
    let mut tally = Tally::default();
    let secs = time(|| {
        log.scan(0, |_, _, v| tally.add(v.unwrap_or_default()))
            .ctx("scan")?;
        Ok(())
    })?;
    tally.check(ctx, n)?;
    Ok(secs)
}
