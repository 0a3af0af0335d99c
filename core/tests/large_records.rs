//! Large records, written to the segment file with `pwritev` rather than
//! through the map: a reader tailing the log sees each batch whole or not
//! at all, and every record comes back as sent, whatever the acks, sizes
//! around the thresholds, compression, `send_batch` of many mid-size
//! records, and a batch of more pieces than one `pwritev` takes.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use mqlite::{
    Acks, BorrowedRecord, Broker, Compression, Config, ConsumerConfig, ProducerConfig, Record,
    TopicConfig,
};

/// The value of record `i`: its length and bytes depend on `i`, so a
/// record read back partly written or mixed with another shows.
fn value(i: usize) -> Vec<u8> {
    let sizes = [
        300 << 10,
        (1 << 20) - 200,
        16 << 10,
        (64 << 10) + 3,
        100,
        (128 << 10) + 1,
        5,
        (256 << 10) - 7,
    ];
    let len = sizes[i % sizes.len()];
    let mut v: Vec<u8> = (0..len)
        .map(|k| {
            (k as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(i as u32) as u8
        })
        .collect();
    let tag = (i as u64).to_le_bytes();
    let n = v.len().min(8);
    v[..n].copy_from_slice(&tag[..n]);
    v
}

fn open(dir: &std::path::Path) -> Broker {
    open_with(dir, 8 << 20, 2 << 20)
}

/// A broker on `dir` with topic `t` of one partition made there.
fn open_with(dir: &std::path::Path, segment_bytes: u64, max_message_bytes: u32) -> Broker {
    let mq = Broker::open(dir, Config::default()).unwrap();
    mq.create_topic(
        "t",
        TopicConfig::new(1)
            .segment_bytes(segment_bytes)
            .max_message_bytes(max_message_bytes),
    )
    .unwrap();
    mq
}

/// A consumer polling while a producer writes large batches sees every
/// record whole, in order: the end offset is published only after the
/// batch's bytes are in the file.
#[test]
fn a_tailing_reader_never_sees_part_of_a_large_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let mq = open(tmp.path());
    let n = 120;
    let mut consumer = mq.consumer(ConsumerConfig::default()).unwrap();
    consumer.assign(&[("t", 0)]).unwrap();
    std::thread::scope(|s| {
        let mq = &mq;
        s.spawn(move || {
            // Both acks levels: `acks=all` takes the same path.
            for (half, acks) in [(0, Acks::One), (1, Acks::All)] {
                let p = mq.producer(ProducerConfig::default().acks(acks)).unwrap();
                for i in half * n / 2..(half + 1) * n / 2 {
                    p.send(Record::new("t").value(value(i))).unwrap();
                }
            }
        });
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(120);
        while got < n {
            assert!(Instant::now() < deadline, "only {got} of {n} records read");
            for m in &consumer.poll_batch(Duration::from_millis(20)).unwrap() {
                assert_eq!(m.offset(), got as u64);
                assert!(m.value().unwrap() == value(got), "record {got} differs");
                got += 1;
            }
        }
    });
}

/// `send_batch` of many mid-size records (batches cut at
/// `max_message_bytes`, their values written in place), with and without
/// compression, and `send_async`; read back after a reopen too.
#[test]
fn batches_of_large_records_read_back_as_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let values: Vec<Vec<u8>> = (0..64).map(value).collect();
    let mut want: Vec<Vec<u8>> = Vec::new();
    {
        let mq = open(tmp.path());
        for codec in [Compression::None, Compression::Lz4] {
            let p = mq
                .producer(ProducerConfig::default().compression(codec))
                .unwrap();
            let recs: Vec<BorrowedRecord<'_>> = values
                .iter()
                .map(|v| BorrowedRecord {
                    topic: "t",
                    partition: None,
                    key: Some(b"k"),
                    value: Some(v),
                    headers: &[],
                    timestamp: None,
                    sequence: None,
                })
                .collect();
            p.send_batch(&recs).unwrap();
            want.extend(values.iter().cloned());
            for v in &values[..16] {
                p.send_async(Record::new("t").value(v.clone()), |r| {
                    r.unwrap();
                })
                .unwrap();
            }
            p.flush().unwrap();
            want.extend(values[..16].iter().cloned());
        }
        let read = read_all(&mq);
        assert_eq!(read.len(), want.len());
        assert!(read == want, "values differ");
    }
    let mq = Broker::open(tmp.path(), Config::default()).unwrap();
    let p = &mq.topic("t").unwrap().partitions[0];
    assert_eq!(p.recovery, mqlite::RecoveryStats::default());
    let read = read_all(&mq);
    assert!(read == want, "values differ after a reopen");
}

/// One batch of 1,500 records whose 4 KiB values are written from where
/// they are: about 3,000 pieces, more than one `pwritev` takes (1,024), so
/// the write goes on in further calls. The batch reads back whole, before
/// and after a reopen, with nothing for recovery to cut.
#[test]
fn a_batch_of_more_pieces_than_one_write_takes_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let values: Vec<Vec<u8>> = (0..1500u32)
        .map(|i| {
            (0..4096u32)
                .map(|k| (k.wrapping_mul(31) ^ i.wrapping_mul(2_654_435_761)) as u8)
                .collect()
        })
        .collect();
    {
        let mq = open_with(tmp.path(), 32 << 20, 8 << 20);
        let log = mqlite::raw::partition_log(&mq, "t", 0).unwrap();
        let records: Vec<mqlite::log::batch::RecordRef<'_>> = values
            .iter()
            .map(|v| mqlite::log::batch::RecordRef {
                key: Some(b"k"),
                value: Some(v),
                headers: &[],
                timestamp: 1,
            })
            .collect();
        assert_eq!(log.append(&records).unwrap(), 0);
        assert_eq!(log.end_offset(), 1500);
        assert!(read_all(&mq) == values, "values differ");
        mq.close().unwrap();
    }
    let mq = Broker::open(tmp.path(), Config::default()).unwrap();
    let p = &mq.topic("t").unwrap().partitions[0];
    assert_eq!(p.recovery, mqlite::RecoveryStats::default());
    assert!(read_all(&mq) == values, "values differ after a reopen");
}

fn read_all(mq: &Broker) -> Vec<Vec<u8>> {
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[("t", 0)]).unwrap();
    let mut out = Vec::new();
    loop {
        let msgs = c.poll(Duration::from_millis(50)).unwrap();
        if msgs.is_empty() {
            return out;
        }
        out.extend(msgs.iter().map(|m| m.value().unwrap().to_vec()));
    }
}
