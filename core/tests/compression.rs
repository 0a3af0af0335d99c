//! Compressed batches (codecs gzip, snappy, lz4 and zstd): the framed block
//! round-trips through `check`, `records_section` and the record decoder;
//! the CRC catches every flip; damaged or lying blocks with a valid CRC are
//! errors, never panics; and whole partitions of compressed batches read
//! back through the consumer, the time search and the raw scan, across a
//! reopen.
//!
//! The format (see `docs/FORMAT.md`, "Compressed batches"): attribute bits
//! 0-2 name the codec; the records section is stored right after the 61-byte
//! header as `uncompressed_len u32 LE, compressed_len u32 LE, data`, then
//! zero padding to a multiple of 8 bytes; `length` and the CRC cover it all.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{batches, cfg, read_partition, segment_logs, Msg, Rng};
use mqlite::log::batch::{
    batch_len, check, decode_headers, encode_batch, records_section, BatchHeader, Check,
    ProducerFields, RecordRef, Records, ALIGN, CODEC_MASK, HEADER_LEN, LENGTH_PREFIX,
};
use mqlite::log::compression::{
    compress_records, decompress_records, parse_framing, FRAMING_LEN, MAX_UNCOMPRESSED_LEN,
};
use mqlite::{Broker, Compression, ConsumerConfig, Error, Header, OffsetReset, TopicConfig};
use proptest::prelude::*;

const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

// ------------------------------------------------------------ batch level

/// An owned record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<Header>,
    timestamp: i64,
}

fn refs(records: &[Rec]) -> Vec<RecordRef<'_>> {
    records
        .iter()
        .map(|r| RecordRef {
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: &r.headers,
            timestamp: r.timestamp,
        })
        .collect()
}

/// An uncompressed batch of `records`.
fn plain_batch(base: u64, records: &[Rec], producer: ProducerFields, attributes: u16) -> Vec<u8> {
    let refs = refs(records);
    let mut buf = vec![0u8; batch_len(&refs)];
    let n = encode_batch(&mut buf, base, &refs, producer, attributes);
    assert_eq!(n, buf.len());
    buf
}

fn valid(b: &[u8]) -> BatchHeader {
    match check(b) {
        Check::Valid(h) => h,
        other => panic!("expected a valid batch, got {other:?}"),
    }
}

/// Rewrites the batch header of `out` for `codec` and `out`'s length, pads
/// it and recomputes the CRC.
fn seal(out: &mut Vec<u8>, attributes: u16, codec: Compression) {
    out.resize(out.len().next_multiple_of(ALIGN), 0);
    let attributes = (attributes & !CODEC_MASK) | codec.bits();
    out[17..19].copy_from_slice(&attributes.to_le_bytes());
    let length = (out.len() - LENGTH_PREFIX) as u32;
    out[8..12].copy_from_slice(&length.to_le_bytes());
    let crc = crc32c::crc32c(&out[16..]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Just the CRC, recomputed after a deliberate change.
fn reseal(out: &mut [u8]) {
    let crc = crc32c::crc32c(&out[16..]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// The records section of the valid uncompressed batch `plain` (without its
/// padding: up to the end of its last record).
fn plain_records(plain: &[u8]) -> &[u8] {
    let h = valid(plain);
    let last = Records::new(plain, &h)
        .last()
        .expect("at least one record")
        .expect("valid records");
    &plain[HEADER_LEN..last.headers.end]
}

/// The batch `plain` (valid, uncompressed) stored with `codec`, byte for byte
/// as the format says, through `compress_records`.
fn recompress(plain: &[u8], codec: Compression) -> Vec<u8> {
    let h = valid(plain);
    if codec == Compression::None {
        return plain[..h.total_len()].to_vec();
    }
    let mut out = plain[..HEADER_LEN].to_vec();
    compress_records(codec, plain_records(plain), &mut out);
    seal(&mut out, h.attributes, codec);
    out
}

/// Compresses `data` with `codec` using the codec crates directly (not
/// mqlite's code), in the formats `docs/FORMAT.md` names.
fn reference_compress(codec: Compression, data: &[u8]) -> Vec<u8> {
    match codec {
        Compression::None => data.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        Compression::Snappy => snap::raw::Encoder::new().compress_vec(data).unwrap(),
        Compression::Lz4 => lz4_flex::block::compress(data),
        Compression::Zstd => zstd::bulk::compress(data, 19).unwrap(),
    }
}

/// Decompresses with the codec crates directly.
fn reference_decompress(codec: Compression, data: &[u8], len: usize) -> Vec<u8> {
    match codec {
        Compression::None => data.to_vec(),
        Compression::Gzip => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .unwrap();
            out
        }
        Compression::Snappy => snap::raw::Decoder::new().decompress_vec(data).unwrap(),
        Compression::Lz4 => lz4_flex::block::decompress(data, len).unwrap(),
        Compression::Zstd => zstd::bulk::decompress(data, len).unwrap(),
    }
}

/// Decodes every record of a checked batch through `records_section`.
fn decode(buf: &[u8]) -> Result<Vec<Rec>, &'static str> {
    let h = valid(buf);
    let section = records_section(buf, &h, MAX_UNCOMPRESSED_LEN)?;
    let mut out = Vec::new();
    for v in Records::over_section(&section, h.record_count) {
        let v = v?;
        assert_eq!(v.offset_delta as usize, out.len());
        out.push(Rec {
            key: v.key.map(|k| section[k].to_vec()),
            value: v.value.map(|k| section[k].to_vec()),
            headers: decode_headers(&section[v.headers.clone()], v.header_count),
            timestamp: h.first_timestamp.wrapping_add(v.timestamp_delta),
        });
    }
    Ok(out)
}

/// Runs every read path over `buf`; it must not panic, and ranges must stay
/// in bounds.
fn exercise(buf: &[u8]) {
    let _ = check(buf);
    if let Some(h) = BatchHeader::parse(buf) {
        for limit in [0, 100, MAX_UNCOMPRESSED_LEN] {
            if let Ok(section) = records_section(buf, &h, limit) {
                for v in Records::over_section(&section, h.record_count.min(10_000)).flatten() {
                    for r in [v.key.clone(), v.value.clone(), Some(v.headers.clone())]
                        .into_iter()
                        .flatten()
                    {
                        assert!(r.start <= r.end && r.end <= section.len());
                    }
                    let _ = decode_headers(&section[v.headers.clone()], v.header_count);
                }
            }
        }
        for v in Records::new(buf, &h).take(10_000).flatten() {
            assert!(v.headers.end <= buf.len());
        }
    }
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..=max)
}

/// Values that compress (runs and repeats) as well as random ones.
fn value(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        bytes(max),
        (any::<u8>(), 0..=max).prop_map(|(b, n)| vec![b; n]),
        (bytes(8), 0..=max / 8).prop_map(|(p, n)| p.repeat(n)),
    ]
}

fn record(max_value: usize) -> impl Strategy<Value = Rec> {
    (
        prop::option::of(bytes(24)),
        prop::option::of(value(max_value)),
        prop::collection::vec((any::<String>(), bytes(16)), 0..3),
        prop_oneof![any::<i64>(), 1_600_000_000_000i64..1_900_000_000_000],
    )
        .prop_map(|(key, value, headers, timestamp)| Rec {
            key,
            value,
            headers: headers
                .into_iter()
                .map(|(k, v)| Header::new(k, v))
                .collect(),
            timestamp,
        })
}

fn codec() -> impl Strategy<Value = Compression> {
    prop::sample::select(CODECS.to_vec())
}

fn records(n: usize, max_value: usize) -> impl Strategy<Value = Vec<Rec>> {
    prop::collection::vec(record(max_value), 1..=n)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Every codec: the compressed batch checks out with the same header
    /// (but for length, CRC and codec) and decodes to the same records.
    #[test]
    fn every_codec_round_trips(
        recs in records(12, 600),
        base in 0u64..(u64::MAX / 2),
        (pid, epoch, seq) in (any::<i64>(), any::<i16>(), any::<i64>()),
        attributes in any::<u16>().prop_map(|a| a & !CODEC_MASK & 0x7f),
    ) {
        let producer = ProducerFields { producer_id: pid, producer_epoch: epoch, base_sequence: seq };
        let plain = plain_batch(base, &recs, producer, attributes);
        let ph = valid(&plain);
        prop_assert_eq!(decode(&plain).unwrap(), recs.clone());
        for codec in CODECS {
            let buf = recompress(&plain, codec);
            prop_assert_eq!(buf.len() % ALIGN, 0);
            let h = valid(&buf);
            prop_assert_eq!(h.compression(), Some(codec));
            prop_assert_eq!(h.attributes & !CODEC_MASK, attributes);
            prop_assert_eq!(h.total_len(), buf.len());
            prop_assert_eq!(
                BatchHeader { length: ph.length, crc: ph.crc, attributes: ph.attributes, ..h },
                ph
            );
            prop_assert_eq!(decode(&buf).unwrap(), recs.clone());
            // Followed by more data (the end marker), the batch is the same.
            let mut more = buf.clone();
            more.extend_from_slice(&[0u8; 64]);
            prop_assert_eq!(check(&more), Check::Valid(h));
            prop_assert_eq!(check(&more[buf.len()..]), Check::End);
        }
    }

    /// A flip of any bit from the CRC on is caught.
    #[test]
    fn any_bit_flip_after_the_length_is_detected(
        recs in records(4, 200),
        codec in codec(),
        bits in prop::collection::vec(any::<prop::sample::Index>(), 1..64),
    ) {
        let buf = recompress(&plain_batch(9, &recs, ProducerFields::default(), 0), codec);
        for bit in bits.iter().map(|i| LENGTH_PREFIX * 8 + i.index((buf.len() - LENGTH_PREFIX) * 8)) {
            let mut damaged = buf.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(matches!(check(&damaged), Check::Invalid(_)), "{} bit {}", codec, bit);
            exercise(&damaged);
        }
    }

    /// Random damage to the framing and the compressed data, with the CRC
    /// made valid again: read paths return errors, never panic.
    #[test]
    fn damage_with_a_valid_crc_never_panics(
        recs in records(6, 300),
        codec in codec(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        ulen in prop::option::of(any::<u32>()),
        clen in prop::option::of(any::<u32>()),
    ) {
        let mut buf = recompress(&plain_batch(0, &recs, ProducerFields::default(), 0), codec);
        let block = HEADER_LEN..buf.len();
        for (at, byte) in &edits {
            let i = block.start + at.index(block.len());
            buf[i] = *byte;
        }
        if let Some(u) = ulen {
            buf[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&u.to_le_bytes());
        }
        if let Some(c) = clen {
            buf[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&c.to_le_bytes());
        }
        reseal(&mut buf);
        exercise(&buf);
    }

    /// Random bytes behind a valid header of a compressed batch.
    #[test]
    fn garbage_blocks_with_a_valid_crc_never_panic(
        garbage in bytes(400),
        codec in codec(),
        count in 1u32..20,
        ulen in prop_oneof![0u32..2000, any::<u32>()],
    ) {
        let plain = plain_batch(0, &[Rec { key: None, value: None, headers: vec![], timestamp: 0 }],
            ProducerFields::default(), 0);
        let mut buf = plain[..HEADER_LEN].to_vec();
        buf[19..23].copy_from_slice(&(count - 1).to_le_bytes());
        buf[57..61].copy_from_slice(&count.to_le_bytes());
        buf.extend_from_slice(&ulen.to_le_bytes());
        buf.extend_from_slice(&(garbage.len() as u32).to_le_bytes());
        buf.extend_from_slice(&garbage);
        seal(&mut buf, 0, codec);
        exercise(&buf);
        if ulen as usize > MAX_UNCOMPRESSED_LEN {
            if let Check::Valid(h) = check(&buf) {
                prop_assert!(records_section(&buf, &h, MAX_UNCOMPRESSED_LEN).is_err());
            }
        }
    }
}

/// Every bit of a small compressed batch, for every codec.
#[test]
fn every_bit_of_small_compressed_batches() {
    let recs = vec![
        Rec {
            key: Some(b"key".to_vec()),
            value: Some(b"value value value value".to_vec()),
            headers: vec![Header::new("h", b"v".to_vec())],
            timestamp: 1_700_000_000_000,
        },
        Rec {
            key: None,
            value: None,
            headers: vec![],
            timestamp: 1_700_000_000_005,
        },
    ];
    let plain = plain_batch(77, &recs, ProducerFields::default(), 0);
    for codec in CODECS {
        let buf = recompress(&plain, codec);
        assert_eq!(decode(&buf).unwrap(), recs);
        for bit in LENGTH_PREFIX * 8..buf.len() * 8 {
            let mut damaged = buf.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(
                matches!(check(&damaged), Check::Invalid(_)),
                "{codec}: flip of bit {bit} not detected"
            );
        }
    }
}

fn sample_records(n: usize) -> Vec<Rec> {
    (0..n)
        .map(|i| Rec {
            key: (i % 3 != 0).then(|| format!("key-{}", i % 10).into_bytes()),
            value: (i % 7 != 6).then(|| format!("value {i} ").repeat(i % 20 + 1).into_bytes()),
            headers: (0..i % 3)
                .map(|j| Header::new(format!("h{j}"), vec![j as u8; j]))
                .collect(),
            timestamp: 1_700_000_000_000 + (i as i64 * 37) % 1000,
        })
        .collect()
}

/// Batches framed by hand with the codec crates (and another compression
/// level than mqlite's) are read: the format, not just mqlite's writer.
#[test]
fn hand_framed_batches_are_read() {
    let recs = sample_records(50);
    let plain = plain_batch(1000, &recs, ProducerFields::default(), 1 << 3);
    let section = plain_records(&plain);
    for codec in CODECS {
        let data = reference_compress(codec, section);
        let mut buf = plain[..HEADER_LEN].to_vec();
        buf.extend_from_slice(&(section.len() as u32).to_le_bytes());
        buf.extend_from_slice(&(data.len() as u32).to_le_bytes());
        buf.extend_from_slice(&data);
        seal(&mut buf, 1 << 3, codec);
        let h = valid(&buf);
        assert_eq!(h.compression(), Some(codec));
        assert_eq!(decode(&buf).unwrap(), recs, "{codec}");
    }
}

/// `compress_records` writes exactly the documented framing, and the data
/// decompresses with the codec crates alone.
#[test]
fn compress_records_writes_the_documented_framing() {
    let recs = sample_records(40);
    let plain = plain_batch(0, &recs, ProducerFields::default(), 0);
    let section = plain_records(&plain);
    for codec in CODECS {
        let mut out = Vec::new();
        compress_records(codec, section, &mut out);
        let ulen = u32::from_le_bytes(out[0..4].try_into().unwrap()) as usize;
        let clen = u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize;
        assert_eq!(ulen, section.len(), "{codec}");
        assert_eq!(FRAMING_LEN + clen, out.len(), "{codec}");
        assert!(
            clen < section.len(),
            "{codec} did not compress repetitive records"
        );
        assert_eq!(
            reference_decompress(codec, &out[8..], ulen),
            section,
            "{codec}"
        );
        assert_eq!(parse_framing(&out).unwrap(), (ulen, &out[8..]));
    }
    let mut out = Vec::new();
    compress_records(Compression::None, section, &mut out);
    assert_eq!(out, section, "no codec, no framing");
}

/// Specific damage, each with a valid CRC: always an error somewhere
/// (`check` or `records_section`), for every codec.
#[test]
fn damaged_blocks_with_a_valid_crc_are_errors() {
    let recs = sample_records(30);
    let plain = plain_batch(5, &recs, ProducerFields::default(), 0);
    for codec in CODECS {
        let good = recompress(&plain, codec);
        let (ulen, data) = parse_framing(&good[HEADER_LEN..]).unwrap();
        let (ulen, clen) = (ulen as u32, data.len() as u32);
        let data_at = HEADER_LEN + FRAMING_LEN;
        type Damage = Box<dyn Fn(&mut Vec<u8>)>;
        let set = |at: usize, v: u32| -> Damage {
            Box::new(move |b: &mut Vec<u8>| b[at..at + 4].copy_from_slice(&v.to_le_bytes()))
        };
        let damages: Vec<(&str, Damage)> = vec![
            ("uncompressed_len + 1", set(HEADER_LEN, ulen + 1)),
            ("uncompressed_len - 1", set(HEADER_LEN, ulen - 1)),
            ("uncompressed_len 0", set(HEADER_LEN, 0)),
            ("uncompressed_len huge", set(HEADER_LEN, u32::MAX)),
            (
                "uncompressed_len just over the cap",
                set(HEADER_LEN, MAX_UNCOMPRESSED_LEN as u32 + 1),
            ),
            ("compressed_len + 8", set(HEADER_LEN + 4, clen + 8)),
            ("compressed_len past the end", set(HEADER_LEN + 4, u32::MAX)),
            ("compressed_len - 1", set(HEADER_LEN + 4, clen - 1)),
            ("compressed_len 0", set(HEADER_LEN + 4, 0)),
            (
                "data zeroed",
                Box::new(move |b: &mut Vec<u8>| {
                    b[data_at..data_at + clen as usize].fill(0);
                }),
            ),
            (
                "data random",
                Box::new(move |b: &mut Vec<u8>| {
                    let r = Rng::new(clen as u64).bytes(clen as usize);
                    b[data_at..data_at + clen as usize].copy_from_slice(&r);
                }),
            ),
            (
                "data cut in half",
                Box::new(move |b: &mut Vec<u8>| {
                    b.truncate(data_at + clen as usize / 2);
                    b[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&(clen / 2).to_le_bytes());
                    let len = b.len().next_multiple_of(ALIGN);
                    b.resize(len, 0);
                    let length = (b.len() - LENGTH_PREFIX) as u32;
                    b[8..12].copy_from_slice(&length.to_le_bytes());
                }),
            ),
            (
                "framing cut",
                Box::new(move |b: &mut Vec<u8>| {
                    b.truncate(HEADER_LEN + 3);
                    let length = (b.len() - LENGTH_PREFIX) as u32;
                    b[8..12].copy_from_slice(&length.to_le_bytes());
                }),
            ),
            (
                "a byte more than the padding after the block",
                Box::new(move |b: &mut Vec<u8>| {
                    let len = (data_at + clen as usize + ALIGN).next_multiple_of(ALIGN);
                    b.resize(len, 0);
                    let length = (b.len() - LENGTH_PREFIX) as u32;
                    b[8..12].copy_from_slice(&length.to_le_bytes());
                }),
            ),
        ];
        for (what, damage) in damages {
            let mut b = good.clone();
            damage(&mut b);
            reseal(&mut b);
            exercise(&b);
            let outcome = match check(&b) {
                Check::Valid(h) => records_section(&b, &h, MAX_UNCOMPRESSED_LEN)
                    .map(|s| s.len())
                    .err(),
                Check::Invalid(reason) => Some(reason),
                Check::End => panic!("{codec}, {what}: end marker"),
            };
            assert!(outcome.is_some(), "{codec}, {what}: accepted");
        }
    }
}

/// Codec numbers 5-7 are not codecs.
#[test]
fn unknown_codecs_are_rejected() {
    let recs = sample_records(3);
    let plain = plain_batch(0, &recs, ProducerFields::default(), 0);
    let zstd = recompress(&plain, Compression::Zstd);
    for bits in 5u16..=7 {
        for base in [&plain, &zstd] {
            let mut b = base.clone();
            b[17..19].copy_from_slice(&bits.to_le_bytes());
            reseal(&mut b);
            assert_eq!(
                check(&b),
                Check::Invalid("unsupported compression codec"),
                "codec {bits}"
            );
            let h = BatchHeader::parse(&b).unwrap();
            assert_eq!(h.compression(), None);
            assert!(records_section(&b, &h, MAX_UNCOMPRESSED_LEN).is_err());
        }
    }
}

/// `Records::new` reads uncompressed batches in place; on a compressed one
/// it yields a single error instead of decoding compressed bytes as records.
#[test]
fn records_new_refuses_a_compressed_batch() {
    let plain = plain_batch(0, &sample_records(5), ProducerFields::default(), 0);
    assert_eq!(Records::new(&plain, &valid(&plain)).count(), 5);
    for codec in CODECS {
        let buf = recompress(&plain, codec);
        let got: Vec<_> = Records::new(&buf, &valid(&buf)).collect();
        assert_eq!(got.len(), 1, "{codec}");
        assert!(got[0].is_err(), "{codec}");
    }
}

/// An uncompressed batch's section is borrowed, not copied.
#[test]
fn uncompressed_sections_are_borrowed() {
    let plain = plain_batch(0, &sample_records(5), ProducerFields::default(), 0);
    let h = valid(&plain);
    let s = records_section(&plain, &h, 0).unwrap();
    assert!(matches!(s, std::borrow::Cow::Borrowed(_)));
    assert_eq!(s.len(), plain.len() - HEADER_LEN);
}

/// The uncompressed size is checked against the caller's limit before
/// decompressing.
#[test]
fn limits_are_enforced() {
    let plain = plain_batch(0, &sample_records(20), ProducerFields::default(), 0);
    let section = plain_records(&plain).len();
    for codec in CODECS {
        let buf = recompress(&plain, codec);
        let h = valid(&buf);
        assert!(records_section(&buf, &h, section - 1).is_err(), "{codec}");
        assert_eq!(
            records_section(&buf, &h, section).unwrap().len(),
            section,
            "{codec}"
        );
        let block = &buf[HEADER_LEN..];
        assert!(decompress_records(codec, block, section - 1).is_err());
        assert_eq!(
            decompress_records(codec, block, section).unwrap().len(),
            section
        );
    }
}

// ------------------------------------------------------------ partitions

const TOPIC: &str = "t";

/// A partition written (uncompressed) through the raw log in batches of 1 to
/// 20 records, then closed. Returns the messages written, in order.
fn write_partition(dir: &std::path::Path, records: usize, seed: u64) -> Vec<Msg> {
    let mq = Broker::open(dir, cfg()).unwrap();
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
fn recompress_partition(dir: &std::path::Path, codec_of: impl Fn(usize) -> Compression) {
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
        let old_end = spans.last().map_or(0, |s| s.end());
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
fn consume(mq: &Broker, per_poll: usize) -> Vec<Msg> {
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
            kept.last().map(|m| m.offset())
        );
        assert!(got.len() <= per_poll);
        kept.extend(got);
    }
    c.close();
    kept.iter().map(Msg::from).collect()
}

/// `(offset, key, value)` of a record.
type Kv = (u64, Option<Vec<u8>>, Option<Vec<u8>>);

fn raw_scan(mq: &Broker, from: u64) -> Vec<Kv> {
    let log = mqlite::raw::partition_log(mq, TOPIC, 0).unwrap();
    let mut out = Vec::new();
    log.scan(from, |o, k, v| {
        out.push((o, k.map(<[u8]>::to_vec), v.map(<[u8]>::to_vec)))
    })
    .unwrap();
    out
}

/// Every read path over a partition holding `expected`.
fn assert_reads(mq: &Broker, expected: &[Msg]) {
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
fn compressed_partitions_read_back() {
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

        let mq = Broker::open(dir.path(), cfg()).unwrap();
        let info = mq.topic(TOPIC).unwrap();
        assert_eq!(
            info.partitions[0].recovery,
            Default::default(),
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
        let mq = Broker::open(dir.path(), cfg()).unwrap();
        assert_eq!(
            mq.topic(TOPIC).unwrap().partitions[0].recovery,
            Default::default()
        );
        assert_reads(&mq, &expected);
        mq.close().unwrap();
    }
}

/// A consumer that stops in the middle of compressed batches and seeks
/// around them gets every message once, in order.
#[test]
fn consumer_stops_and_seeks_inside_compressed_batches() {
    let dir = tempfile::tempdir().unwrap();
    let expected = write_partition(dir.path(), 400, 11);
    recompress_partition(dir.path(), |i| CODECS[i % 4]);
    let mq = Broker::open(dir.path(), cfg()).unwrap();
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
fn undecompressable_batch_is_corrupt() {
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

    let mq = Broker::open(dir.path(), cfg()).unwrap();
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

// ------------------------------------------------------------ producers

/// The records the end-to-end tests send: keys, tombstones, headers,
/// values that compress and values that do not, explicit timestamps.
fn outgoing(n: usize, seed: u64) -> Vec<mqlite::Record> {
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
fn expected_of(records: &[mqlite::Record], offset: u64) -> Vec<Msg> {
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
fn produce(mq: &Broker, codec: Compression, records: &[mqlite::Record]) {
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
fn codecs_on_disk(dir: &std::path::Path) -> Vec<(Compression, u32)> {
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
fn every_codec_end_to_end() {
    for codec in Compression::ALL {
        let dir = tempfile::tempdir().unwrap();
        let mq = Broker::open(dir.path(), cfg()).unwrap();
        mq.create_topic(TOPIC, TopicConfig::new(1).segment_bytes(8 << 10))
            .unwrap();
        let records = outgoing(1500, codec.bits() as u64);
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
            Default::default(),
            "{codec}"
        );
        assert_reads(&mq, &expected);
        mq.close().unwrap();
    }
}

/// Producers with different codecs writing one partition: every batch
/// keeps its own codec and readers see one ordered partition.
#[test]
fn mixed_codecs_in_one_partition() {
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
fn over_limit_batch_is_kept_by_recovery_and_refused_by_readers() {
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

    let mq = Broker::open(dir.path(), cfg()).unwrap();
    let info = mq.topic(TOPIC).unwrap();
    assert_eq!(info.partitions[0].recovery, Default::default());
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
fn records_over_the_limit_are_not_compressed() {
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
                Default::default()
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
fn stopping_mid_batch_does_not_decompress_again() {
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
                        Some((s.base + w[0].offset_delta as u64, (a.start, b.start)))
                    }
                    _ => None,
                })
        })
        .expect("a batch with two values in a row");

    let mq = Broker::open(dir.path(), cfg()).unwrap();
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
