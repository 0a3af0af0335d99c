//! Whole partitions of compressed batches read back through the consumer,
//! the time search and the raw scan, across a reopen.

use super::*;

pub(crate) const TOPIC: &str = "t";

/// A partition written (uncompressed) through the raw log in batches of 1 to
/// 20 records, then closed. Returns the messages written, in order.
pub(crate) fn write_partition(dir: &std::path::Path, records: usize, seed: u64) -> Vec<Msg> {
    let mq = Broker::open(dir, exclusive()).unwrap();
    mq.create_topic(TOPIC, TopicConfig::new(1).segment_bytes(16 << 10))
        .unwrap();
    let log = mqlite::raw::partition_log(&mq, TOPIC, 0).unwrap();
    let mut rng = Rng::new(seed);
    let mut all = Vec::new();
    let mut ts = 1_700_000_000_000i64;
    while all.len() < records {
        let n = (rng.range(1, 21) as usize).min(records - all.len());
        let recs: Vec<Rec> = (0..n)
            .map(|_| {
                ts += rng.range(0, 5) as i64;
                let i = all.len() as u64 + rng.range(0, 1000);
                Rec {
                    key: (!i.is_multiple_of(4)).then(|| format!("k{}", i % 13).into_bytes()),
                    value: (i % 9 != 8).then(|| {
                        format!("v{i}-")
                            .repeat(rng.range(0, 40) as usize)
                            .into_bytes()
                    }),
                    headers: (0..i % 3)
                        .map(|j| Header::new(format!("h{j}"), format!("x{i}").into_bytes()))
                        .collect(),
                    timestamp: ts,
                }
            })
            .collect();
        let base = log.append(&refs(&recs)).unwrap();
        for (i, r) in recs.into_iter().enumerate() {
            all.push(Msg {
                partition: 0,
                offset: base + i as u64,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r.headers,
            });
        }
    }
    mq.close().unwrap();
    all
}

/// Rewrites every batch of the closed partition with the codec
/// `codec_of(batch number)`, keeping offsets, and moves the index entries
/// to the batches' new positions (as a writer of compressed batches would
/// have placed them).
pub(crate) fn recompress_partition(dir: &std::path::Path, codec_of: impl Fn(usize) -> Compression) {
    let logs = segment_logs(dir, TOPIC, 0);
    let mut n = 0;
    for (i, path) in logs.iter().enumerate() {
        let active = i + 1 == logs.len();
        let old = std::fs::read(path).unwrap();
        let spans = batches(&old);
        let mut new = Vec::with_capacity(old.len());
        let mut moved = std::collections::HashMap::new();
        for s in &spans {
            moved.insert(s.pos as u32, new.len() as u32);
            new.extend_from_slice(&recompress(&old[s.pos..s.end()], codec_of(n)));
            n += 1;
        }
        let old_end = spans.last().map_or(0, super::common::Span::end);
        moved.insert(old_end as u32, new.len() as u32);
        if active {
            assert!(
                new.len() <= old.len(),
                "compressed data outgrew the segment"
            );
            new.resize(old.len(), 0);
        } else {
            assert_eq!(old_end, old.len());
        }
        std::fs::write(path, &new).unwrap();
        let codecs: Vec<_> = batches(&new)
            .iter()
            .map(|s| valid(&new[s.pos..]).compression().unwrap())
            .collect();
        let want: Vec<_> = (n - spans.len()..n).map(&codec_of).collect();
        assert_eq!(codecs, want, "{}", path.display());
        // Index entries: `.idx` (rel u32, pos u32), `.tix` (ts i64, rel u32, pos u32).
        for (ext, width) in [("idx", 8), ("tix", 16)] {
            let p = path.with_extension(ext);
            let Ok(mut idx) = std::fs::read(&p) else {
                continue;
            };
            for e in idx.chunks_exact_mut(width) {
                if e.iter().all(|&b| b == 0) {
                    break;
                }
                let at = width - 4;
                let pos = u32::from_le_bytes(e[at..].try_into().unwrap());
                let to = moved[&pos];
                e[at..].copy_from_slice(&to.to_le_bytes());
            }
            std::fs::write(&p, &idx).unwrap();
        }
    }
}

/// Reads the whole partition through a consumer with `max_poll_records`
/// `per_poll`, keeping every `Message` until the end (they must stay valid).
pub(crate) fn consume(mq: &Broker, per_poll: usize) -> Vec<Msg> {
    let end = mq.topic(TOPIC).unwrap().partitions[0].end_offset;
    let mut c = mq
        .consumer(
            ConsumerConfig::default()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(per_poll),
        )
        .unwrap();
    c.assign(&[(TOPIC, 0)]).unwrap();
    let mut kept = Vec::new();
    while kept.last().map_or(0, |m: &mqlite::Message| m.offset() + 1) < end {
        let got = c.poll(Duration::ZERO).unwrap();
        assert!(
            !got.is_empty(),
            "consumer stopped at {:?}",
            kept.last().map(mqlite::Message::offset)
        );
        assert!(got.len() <= per_poll);
        kept.extend(got);
    }
    c.close();
    kept.iter().map(Msg::from).collect()
}

/// `(offset, key, value)` of a record.
pub(crate) type Kv = (u64, Option<Vec<u8>>, Option<Vec<u8>>);

pub(crate) fn raw_scan(mq: &Broker, from: u64) -> Vec<Kv> {
    let log = mqlite::raw::partition_log(mq, TOPIC, 0).unwrap();
    let mut out = Vec::new();
    log.scan(from, |o, k, v| {
        out.push((o, k.map(<[u8]>::to_vec), v.map(<[u8]>::to_vec)));
    })
    .unwrap();
    out
}

/// Every read path over a partition holding `expected`.
pub(crate) fn assert_reads(mq: &Broker, expected: &[Msg]) {
    assert_eq!(read_partition(mq, TOPIC, 0).unwrap(), expected);
    assert_eq!(consume(mq, 1), expected, "one message per poll");
    assert_eq!(consume(mq, 7), expected, "seven messages per poll");
    let scan = raw_scan(mq, 3);
    assert_eq!(scan.len(), expected.len() - 3);
    for ((o, k, v), m) in scan.iter().zip(&expected[3..]) {
        assert_eq!((*o, k, v), (m.offset, &m.key, &m.value));
    }
    // The time search finds the first record at or after each timestamp.
    let mut rng = Rng::new(3);
    for _ in 0..60 {
        let m = &expected[rng.range(0, expected.len() as u64) as usize];
        for ts in [m.timestamp, m.timestamp - 1, m.timestamp + 1] {
            let want = expected
                .iter()
                .find(|x| x.timestamp >= ts)
                .map(|x| x.offset);
            assert_eq!(
                mq.offset_for_timestamp(TOPIC, 0, ts).unwrap(),
                want,
                "time {ts}"
            );
        }
    }
    let last = expected.last().unwrap().timestamp;
    assert_eq!(mq.offset_for_timestamp(TOPIC, 0, last + 1).unwrap(), None);
}

/// Partitions whose batches all use one codec, then mixed codecs, read back
/// by every reader, before and after a reopen, and appended to afterwards.
#[test]
pub(crate) fn compressed_partitions_read_back() {
    type Choice = Box<dyn Fn(usize) -> Compression>;
    let choices: Vec<(&str, Choice)> = vec![
        ("gzip", Box::new(|_| Compression::Gzip)),
        ("snappy", Box::new(|_| Compression::Snappy)),
        ("lz4", Box::new(|_| Compression::Lz4)),
        ("zstd", Box::new(|_| Compression::Zstd)),
        ("mixed", Box::new(|i| Compression::ALL[i % 5])),
    ];
    for (name, codec_of) in choices {
        let dir = tempfile::tempdir().unwrap();
        let expected = write_partition(dir.path(), 1500, name.len() as u64);
        assert!(
            segment_logs(dir.path(), TOPIC, 0).len() > 2,
            "want sealed segments"
        );
        recompress_partition(dir.path(), codec_of);

        let mq = Broker::open(dir.path(), exclusive()).unwrap();
        let info = mq.topic(TOPIC).unwrap();
        assert_eq!(
            info.partitions[0].recovery,
            mqlite::RecoveryStats::default(),
            "{name}: recovery truncated compressed batches"
        );
        assert_eq!(info.partitions[0].end_offset, expected.len() as u64);
        assert_reads(&mq, &expected);

        // Appends after the compressed batches, then a reopen.
        let log = mqlite::raw::partition_log(&mq, TOPIC, 0).unwrap();
        let extra = Rec {
            key: Some(b"after".to_vec()),
            value: Some(b"reopen".to_vec()),
            headers: vec![],
            timestamp: expected.last().unwrap().timestamp + 10,
        };
        let base = log.append(&refs(std::slice::from_ref(&extra))).unwrap();
        assert_eq!(base, expected.len() as u64);
        mq.close().unwrap();
        let mut expected = expected;
        expected.push(Msg {
            partition: 0,
            offset: base,
            timestamp: extra.timestamp,
            key: extra.key,
            value: extra.value,
            headers: vec![],
        });
        let mq = Broker::open(dir.path(), exclusive()).unwrap();
        assert_eq!(
            mq.topic(TOPIC).unwrap().partitions[0].recovery,
            mqlite::RecoveryStats::default()
        );
        assert_reads(&mq, &expected);
        mq.close().unwrap();
    }
}

/// A consumer that stops in the middle of compressed batches and seeks
/// around them gets every message once, in order.
#[test]
pub(crate) fn consumer_stops_and_seeks_inside_compressed_batches() {
    let dir = tempfile::tempdir().unwrap();
    let expected = write_partition(dir.path(), 400, 11);
    recompress_partition(dir.path(), |i| CODECS[i % 4]);
    let mq = Broker::open(dir.path(), exclusive()).unwrap();
    for per_poll in [1, 2, 3, 19] {
        assert_eq!(consume(&mq, per_poll), expected, "{per_poll} per poll");
    }
    let mut c = mq
        .consumer(ConsumerConfig::default().max_poll_records(2))
        .unwrap();
    c.assign(&[(TOPIC, 0)]).unwrap();
    let mut rng = Rng::new(5);
    for _ in 0..100 {
        let at = rng.range(0, expected.len() as u64);
        c.seek(TOPIC, 0, at).unwrap();
        let got: Vec<Msg> = c
            .poll(Duration::ZERO)
            .unwrap()
            .iter()
            .map(Msg::from)
            .collect();
        let want = &expected[at as usize..(at as usize + 2).min(expected.len())];
        assert_eq!(got, want, "after seeking to {at}");
    }
}

/// A compressed batch whose data is damaged but whose CRC was recomputed
/// (so only decompression can tell) is `Corrupt` for the consumer and the
/// time search, never a panic; what comes before it is delivered.
#[test]
pub(crate) fn undecompressable_batch_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let expected = write_partition(dir.path(), 300, 17);
    recompress_partition(dir.path(), |_| Compression::Lz4);
    // Damage the compressed data of the third batch of the first segment.
    let path = &segment_logs(dir.path(), TOPIC, 0)[0];
    let mut log = std::fs::read(path).unwrap();
    let spans = batches(&log);
    let victim = spans[2];
    let clen = parse_framing(&log[victim.pos + HEADER_LEN..victim.end()])
        .unwrap()
        .1
        .len();
    let data = victim.pos + HEADER_LEN + FRAMING_LEN;
    log[data..data + clen].fill(0xff);
    reseal(&mut log[victim.pos..victim.end()]);
    assert!(matches!(check(&log[victim.pos..]), Check::Valid(_)));
    std::fs::write(path, &log).unwrap();

    let mq = Broker::open(dir.path(), exclusive()).unwrap();
    let mut c = mq
        .consumer(ConsumerConfig::default().max_poll_records(100_000))
        .unwrap();
    c.assign(&[(TOPIC, 0)]).unwrap();
    let before: Vec<Msg> = c
        .poll(Duration::ZERO)
        .unwrap()
        .iter()
        .map(Msg::from)
        .collect();
    assert_eq!(before, expected[..victim.base as usize]);
    match c.poll(Duration::ZERO) {
        Err(Error::Corrupt { position, .. }) => assert_eq!(position, victim.pos as u64),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let ts = expected[victim.base as usize].timestamp;
    let first = expected.iter().find(|m| m.timestamp >= ts).unwrap().offset;
    if first >= victim.base {
        assert!(matches!(
            mq.offset_for_timestamp(TOPIC, 0, ts),
            Err(Error::Corrupt { .. })
        ));
    }
    let scan = mqlite::raw::partition_log(&mq, TOPIC, 0)
        .unwrap()
        .scan(0, |_, _, _| {});
    assert!(matches!(scan, Err(Error::Corrupt { .. })));
}
