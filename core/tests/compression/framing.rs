//! Batch level: the framed block, the CRC, damaged and lying blocks, limits.

use super::*;

/// An owned record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rec {
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) headers: Vec<Header>,
    pub(crate) timestamp: i64,
}

pub(crate) fn refs(records: &[Rec]) -> Vec<RecordRef<'_>> {
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
pub(crate) fn plain_batch(
    base: u64,
    records: &[Rec],
    producer: ProducerFields,
    attributes: u16,
) -> Vec<u8> {
    let refs = refs(records);
    let mut buf = vec![0u8; batch_len(&refs)];
    let n = encode_batch(&mut buf, base, &refs, producer, attributes);
    assert_eq!(n, buf.len());
    buf
}

pub(crate) fn valid(b: &[u8]) -> BatchHeader {
    match check(b) {
        Check::Valid(h) => h,
        other => panic!("expected a valid batch, got {other:?}"),
    }
}

/// Rewrites the batch header of `out` for `codec` and `out`'s length, pads
/// it and recomputes the CRC.
pub(crate) fn seal(out: &mut Vec<u8>, attributes: u16, codec: Compression) {
    out.resize(out.len().next_multiple_of(ALIGN), 0);
    let attributes = (attributes & !CODEC_MASK) | codec.bits();
    out[17..19].copy_from_slice(&attributes.to_le_bytes());
    let length = (out.len() - LENGTH_PREFIX) as u32;
    out[8..12].copy_from_slice(&length.to_le_bytes());
    let crc = crc32c::crc32c(&out[16..]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Just the CRC, recomputed after a deliberate change.
pub(crate) fn reseal(out: &mut [u8]) {
    let crc = crc32c::crc32c(&out[16..]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// The records section of the valid uncompressed batch `plain` (without its
/// padding: up to the end of its last record).
pub(crate) fn plain_records(plain: &[u8]) -> &[u8] {
    let h = valid(plain);
    let last = Records::new(plain, &h)
        .last()
        .expect("at least one record")
        .expect("valid records");
    &plain[HEADER_LEN..last.headers.end]
}

/// The batch `plain` (valid, uncompressed) stored with `codec`, byte for byte
/// as the format says, through `compress_records`.
pub(crate) fn recompress(plain: &[u8], codec: Compression) -> Vec<u8> {
    let h = valid(plain);
    if codec == Compression::None {
        return plain[..h.total_len()].to_vec();
    }
    if h.magic == MAGIC_COMPACT {
        return recompress(&full_layout(plain), codec);
    }
    let mut out = plain[..HEADER_LEN].to_vec();
    compress_records(codec, plain_records(plain), &mut out);
    seal(&mut out, h.attributes, codec);
    out
}

/// The compact (one-record) batch `b` in the full layout: the same record
/// and header fields.
pub(crate) fn full_layout(b: &[u8]) -> Vec<u8> {
    let h = valid(b);
    let r = Records::new(b, &h).next().unwrap().unwrap();
    let headers = decode_headers(&b[r.headers.clone()], r.header_count);
    let rec = RecordRef {
        key: r.key.map(|k| &b[k]),
        value: r.value.map(|v| &b[v]),
        headers: &headers,
        timestamp: h.first_timestamp,
    };
    let mut buf = vec![0u8; batch_len(&[rec])];
    let n = encode_batch(&mut buf, h.base_offset, &[rec], h.producer, h.attributes);
    assert_eq!(n, buf.len());
    buf
}

/// Compresses `data` with `codec` using the codec crates directly (not
/// mqlite's code), in the formats `docs/FORMAT.md` names.
pub(crate) fn reference_compress(codec: Compression, data: &[u8]) -> Vec<u8> {
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
pub(crate) fn reference_decompress(codec: Compression, data: &[u8], len: usize) -> Vec<u8> {
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
pub(crate) fn decode(buf: &[u8]) -> Result<Vec<Rec>, &'static str> {
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
pub(crate) fn exercise(buf: &[u8]) {
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

pub(crate) fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..=max)
}

/// Values that compress (runs and repeats) as well as random ones.
pub(crate) fn value(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        bytes(max),
        (any::<u8>(), 0..=max).prop_map(|(b, n)| vec![b; n]),
        (bytes(8), 0..=max / 8).prop_map(|(p, n)| p.repeat(n)),
    ]
}

pub(crate) fn record(max_value: usize) -> impl Strategy<Value = Rec> {
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

pub(crate) fn codec() -> impl Strategy<Value = Compression> {
    prop::sample::select(CODECS.to_vec())
}

pub(crate) fn records(n: usize, max_value: usize) -> impl Strategy<Value = Vec<Rec>> {
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
pub(crate) fn every_bit_of_small_compressed_batches() {
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

pub(crate) fn sample_records(n: usize) -> Vec<Rec> {
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
pub(crate) fn hand_framed_batches_are_read() {
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
pub(crate) fn compress_records_writes_the_documented_framing() {
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
pub(crate) fn damaged_blocks_with_a_valid_crc_are_errors() {
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
                    let r = Rng::new(u64::from(clen)).bytes(clen as usize);
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
pub(crate) fn unknown_codecs_are_rejected() {
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
pub(crate) fn records_new_refuses_a_compressed_batch() {
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
pub(crate) fn uncompressed_sections_are_borrowed() {
    let plain = plain_batch(0, &sample_records(5), ProducerFields::default(), 0);
    let h = valid(&plain);
    let s = records_section(&plain, &h, 0).unwrap();
    assert!(matches!(s, std::borrow::Cow::Borrowed(_)));
    assert_eq!(s.len(), plain.len() - HEADER_LEN);
}

/// The uncompressed size is checked against the caller's limit before
/// decompressing.
#[test]
pub(crate) fn limits_are_enforced() {
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
