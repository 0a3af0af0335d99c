//! Producers compressing with every codec, end to end.

use super::*;

/// The records the end-to-end tests send: keys, tombstones, headers,
/// values that compress and values that do not, explicit timestamps.
pub(crate) fn outgoing(n: usize, seed: u64) -> Vec<mqlite::Record> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let mut r = mqlite::Record::new(TOPIC)
                .partition(0)
                .timestamp(1_700_000_000_000 + i as i64 / 3);
            if i % 5 != 0 {
                r = r.key(format!("key-{}", i % 17));
            }
            match i % 11 {
                0 => {} // tombstone
                1 => {
                    let n = rng.range(0, 300) as usize;
                    r = r.value(rng.bytes(n));
                }
                _ => r = r.value(format!("value {i};").repeat(rng.range(1, 30) as usize)),
            }
            for j in 0..i % 3 {
                r = r.header(format!("h{j}"), format!("{i}/{j}"));
            }
            r
        })
        .collect()
}

/// What a consumer should see for `records` written from `offset` on.
pub(crate) fn expected_of(records: &[mqlite::Record], offset: u64) -> Vec<Msg> {
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let b = r.as_borrowed();
            Msg {
                partition: 0,
                offset: offset + i as u64,
                timestamp: b.timestamp.unwrap(),
                key: b.key.map(<[u8]>::to_vec),
                value: b.value.map(<[u8]>::to_vec),
                headers: b.headers.to_vec(),
            }
        })
        .collect()
}

/// Sends `records` with `codec` three ways: one at a time, `send_batch`
/// (several records per batch) and `send_async` with linger (the
/// accumulator's batches).
pub(crate) fn produce(mq: &Broker, codec: Compression, records: &[mqlite::Record]) {
    let p = mq
        .producer(
            mqlite::ProducerConfig::default()
                .compression(codec)
                .linger_ms(50)
                .batch_size(4096),
        )
        .unwrap();
    let third = records.len() / 3;
    for r in &records[..third] {
        p.send(r.clone()).unwrap();
    }
    let borrowed: Vec<_> = records[third..2 * third]
        .iter()
        .map(mqlite::Record::as_borrowed)
        .collect();
    for chunk in borrowed.chunks(40) {
        p.send_batch(chunk).unwrap();
    }
    for r in &records[2 * third..] {
        p.send_async(r.clone(), |res| {
            res.unwrap();
        })
        .unwrap();
    }
    p.flush().unwrap();
    p.close().unwrap();
}

/// Codec of every batch on disk, in order, with its record count.
pub(crate) fn codecs_on_disk(dir: &std::path::Path) -> Vec<(Compression, u32)> {
    let mut out = Vec::new();
    for path in segment_logs(dir, TOPIC, 0) {
        let bytes = std::fs::read(&path).unwrap();
        for s in batches(&bytes) {
            let h = valid(&bytes[s.pos..]);
            out.push((h.compression().unwrap(), h.record_count));
        }
    }
    out
}

/// Every codec through the producer and back through every reader,
/// including a consumer that stops in the middle of batches, and again
/// after a reopen.
#[test]
pub(crate) fn every_codec_end_to_end() {
    for codec in Compression::ALL {
        let dir = tempfile::tempdir().unwrap();
        let mq = Broker::open(dir.path(), cfg()).unwrap();
        mq.create_topic(TOPIC, TopicConfig::new(1).segment_bytes(8 << 10))
            .unwrap();
        let records = outgoing(1500, u64::from(codec.bits()));
        produce(&mq, codec, &records);
        let expected = expected_of(&records, 0);
        assert_reads(&mq, &expected);
        mq.close().unwrap();

        let on_disk = codecs_on_disk(dir.path());
        assert!(on_disk.iter().all(|&(c, _)| c == codec), "{codec}");
        assert!(
            on_disk.iter().any(|&(_, n)| n > 1),
            "{codec}: no batch of several records"
        );
        assert!(
            segment_logs(dir.path(), TOPIC, 0).len() > 1,
            "{codec}: no roll"
        );

        let mq = Broker::open(dir.path(), cfg()).unwrap();
        assert_eq!(
            mq.topic(TOPIC).unwrap().partitions[0].recovery,
            mqlite::RecoveryStats::default(),
            "{codec}"
        );
        assert_reads(&mq, &expected);
        mq.close().unwrap();
    }
}

/// Producers with different codecs writing one partition: every batch
/// keeps its own codec and readers see one ordered partition.
#[test]
pub(crate) fn mixed_codecs_in_one_partition() {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), cfg()).unwrap();
    mq.create_topic(TOPIC, TopicConfig::new(1).segment_bytes(64 << 10))
        .unwrap();
    let producers: Vec<_> = Compression::ALL
        .iter()
        .map(|&c| {
            mq.producer(mqlite::ProducerConfig::default().compression(c))
                .unwrap()
        })
        .collect();
    let records = outgoing(1000, 99);
    let borrowed: Vec<_> = records.iter().map(mqlite::Record::as_borrowed).collect();
    for (i, chunk) in borrowed.chunks(23).enumerate() {
        producers[i % producers.len()].send_batch(chunk).unwrap();
    }
    for p in &producers {
        p.close().unwrap();
    }
    let expected = expected_of(&records, 0);
    assert_reads(&mq, &expected);
    mq.close().unwrap();

    let on_disk: Vec<Compression> = codecs_on_disk(dir.path()).iter().map(|c| c.0).collect();
    for codec in Compression::ALL {
        assert!(on_disk.contains(&codec), "no {codec} batch");
    }
    let mq = Broker::open(dir.path(), cfg()).unwrap();
    assert_reads(&mq, &expected);
    mq.close().unwrap();
}

/// A batch claiming more than the 64 MiB limit (with a valid CRC: written
/// on purpose) is kept by recovery, not truncated away, and refused by the
/// readers as `Corrupt` without allocating that much.
#[test]
pub(crate) fn over_limit_batch_is_kept_by_recovery_and_refused_by_readers() {
    let dir = tempfile::tempdir().unwrap();
    let expected = write_partition(dir.path(), 300, 23);
    recompress_partition(dir.path(), |_| Compression::Zstd);
    let path = segment_logs(dir.path(), TOPIC, 0).pop().unwrap();
    let mut log = std::fs::read(&path).unwrap();
    let last = *batches(&log).last().unwrap();
    let claim = (MAX_UNCOMPRESSED_LEN as u32 + 1).to_le_bytes();
    log[last.pos + HEADER_LEN..last.pos + HEADER_LEN + 4].copy_from_slice(&claim);
    reseal(&mut log[last.pos..last.end()]);
    std::fs::write(&path, &log).unwrap();

    let mq = Broker::open(dir.path(), exclusive()).unwrap();
    let info = mq.topic(TOPIC).unwrap();
    assert_eq!(
        info.partitions[0].recovery,
        mqlite::RecoveryStats::default()
    );
    assert_eq!(info.partitions[0].end_offset, expected.len() as u64);
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
    assert_eq!(before, expected[..last.base as usize]);
    match c.poll(Duration::ZERO) {
        Err(Error::Corrupt { position, .. }) => assert_eq!(position, last.pos as u64),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    mq.close().unwrap();
}

/// A records section over the 64 MiB limit is never written compressed:
/// the producer stores it uncompressed or refuses it with
/// `MessageTooLarge`; what it acknowledged reads back, also after a reopen.
#[test]
pub(crate) fn records_over_the_limit_are_not_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let mq = Broker::open(dir.path(), cfg()).unwrap();
    mq.create_topic(
        TOPIC,
        TopicConfig::new(1)
            .segment_bytes(256 << 20)
            .max_message_bytes(200 << 20),
    )
    .unwrap();
    let value = vec![0u8; MAX_UNCOMPRESSED_LEN + (1 << 20)];
    let p = mq
        .producer(mqlite::ProducerConfig::default().compression(Compression::Zstd))
        .unwrap();
    let sent = p.send(mqlite::Record::new(TOPIC).partition(0).value(value.clone()));
    p.close().unwrap();
    match sent {
        Err(Error::MessageTooLarge { .. }) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(md) => {
            let check_read = |mq: &Broker| {
                let got = read_partition(mq, TOPIC, 0).unwrap();
                assert_eq!(got.len(), 1);
                assert_eq!(got[0].offset, md.offset);
                assert!(got[0].value.as_deref() == Some(&value[..]));
            };
            check_read(&mq);
            mq.close().unwrap();
            let mq = Broker::open(dir.path(), cfg()).unwrap();
            assert_eq!(
                mq.topic(TOPIC).unwrap().partitions[0].recovery,
                mqlite::RecoveryStats::default()
            );
            check_read(&mq);
            mq.close().unwrap();
        }
    }
}

/// A consumer that stops in the middle of a compressed batch reuses the
/// batch it decompressed when it comes back: the messages of its next poll
/// point into the same buffer as those of the previous one.
#[test]
pub(crate) fn stopping_mid_batch_does_not_decompress_again() {
    let dir = tempfile::tempdir().unwrap();
    write_partition(dir.path(), 200, 29);
    recompress_partition(dir.path(), |_| Compression::Lz4);
    // The first batch with two records in a row that have values.
    let path = &segment_logs(dir.path(), TOPIC, 0)[0];
    let log = std::fs::read(path).unwrap();
    let (first, starts) = batches(&log)
        .iter()
        .find_map(|s| {
            let buf = &log[s.pos..s.end()];
            let h = valid(buf);
            let section = records_section(buf, &h, MAX_UNCOMPRESSED_LEN).unwrap();
            let views: Vec<_> = Records::over_section(&section, h.record_count)
                .map(Result::unwrap)
                .collect();
            views
                .windows(2)
                .find_map(|w| match (&w[0].value, &w[1].value) {
                    (Some(a), Some(b)) => {
                        Some((s.base + u64::from(w[0].offset_delta), (a.start, b.start)))
                    }
                    _ => None,
                })
        })
        .expect("a batch with two values in a row");

    let mq = Broker::open(dir.path(), exclusive()).unwrap();
    let mut c = mq
        .consumer(ConsumerConfig::default().max_poll_records(1))
        .unwrap();
    c.assign(&[(TOPIC, 0)]).unwrap();
    c.seek(TOPIC, 0, first).unwrap();
    let a = c.poll(Duration::ZERO).unwrap().pop().unwrap();
    let b = c.poll(Duration::ZERO).unwrap().pop().unwrap();
    assert_eq!((a.offset(), b.offset()), (first, first + 1));
    let (pa, pb) = (
        a.value().unwrap().as_ptr() as usize,
        b.value().unwrap().as_ptr() as usize,
    );
    assert_eq!(
        pb.wrapping_sub(pa),
        starts.1 - starts.0,
        "the second poll decompressed the batch again"
    );
}
