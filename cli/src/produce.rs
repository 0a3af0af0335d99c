//! `mqlite produce`: records from stdin or a file, as lines or
//! length-prefixed frames.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use mqlite::{Acks, BorrowedRecord, Broker, Header, ProducerConfig};

use crate::output::{read_frame, Frame};
use crate::progress::{bar, Unit};
use crate::CliResult;

/// Records sent in one call at most.
const CHUNK_RECORDS: usize = 1000;
/// Bytes of records sent in one call at most.
const CHUNK_BYTES: usize = 1 << 20;

/// How the input is cut into records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InputFormat {
    /// One record per line (`\n`, a trailing `\r` is dropped).
    Lines,
    /// Each record is a 4-byte big-endian length followed by that many
    /// bytes (what `consume --format raw` writes).
    LengthPrefixed,
}

#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// Topic to write to.
    topic: String,
    /// Read this file instead of stdin (`-` is stdin).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// How the input is cut into records.
    #[arg(long, value_enum, default_value = "lines")]
    format: InputFormat,
    /// Split each record at the first occurrence of this character: the
    /// part before is the key, the rest the value.
    #[arg(long)]
    key_separator: Option<char>,
    /// Add this header to every record (repeatable).
    #[arg(long = "header", value_name = "KEY=VALUE", value_parser = parse_header)]
    headers: Vec<Header>,
    /// Write every record to this partition.
    #[arg(long)]
    partition: Option<u32>,
    /// Durability: 0, 1 or all.
    #[arg(long, default_value = "1", value_parser = crate::parse_acks)]
    acks: Acks,
}

fn parse_header(s: &str) -> Result<Header, String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok(Header::new(k, v)),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A byte range `(start, end)` in a [`Chunk`]'s buffer.
type Span = (usize, usize);

/// Records read but not sent yet: one buffer of bytes and each record's
/// key and value ranges in it.
#[derive(Default)]
struct Chunk {
    data: Vec<u8>,
    records: Vec<(Option<Span>, Span)>,
}

impl Chunk {
    fn push(&mut self, record: &[u8], sep: Option<&[u8]>) {
        let at = self.data.len();
        self.data.extend_from_slice(record);
        let split = sep.and_then(|s| find(record, s).map(|i| (i, s.len())));
        self.records.push(match split {
            Some((i, n)) => (Some((at, at + i)), (at + i + n, at + record.len())),
            None => (None, (at, at + record.len())),
        });
    }

    fn is_full(&self) -> bool {
        self.records.len() >= CHUNK_RECORDS || self.data.len() >= CHUNK_BYTES
    }
}

struct Sender<'a> {
    producer: mqlite::Producer,
    topic: &'a str,
    partition: Option<u32>,
    headers: &'a [Header],
    sent: u64,
}

impl Sender<'_> {
    fn send(&mut self, chunk: &mut Chunk) -> CliResult {
        if chunk.records.is_empty() {
            return Ok(());
        }
        let d = &chunk.data;
        let records: Vec<BorrowedRecord<'_>> = chunk
            .records
            .iter()
            .map(|&(k, (vs, ve))| BorrowedRecord {
                topic: self.topic,
                partition: self.partition,
                key: k.map(|(s, e)| &d[s..e]),
                value: Some(&d[vs..ve]),
                headers: self.headers,
                ..BorrowedRecord::default()
            })
            .collect();
        let mut done = 0u64;
        let res = self
            .producer
            .send_batch_with(&records, &mut |_, _| done += 1);
        self.sent += done;
        res.map_err(|e| format!("{e} (after {} record(s) written)", self.sent))?;
        chunk.data.clear();
        chunk.records.clear();
        Ok(())
    }
}

pub fn produce(broker: &Broker, args: ProduceArgs) -> CliResult {
    // Fail before reading any input when the topic does not exist.
    let info = broker.topic(&args.topic)?;
    if let Some(p) = args.partition {
        if p as usize >= info.partitions.len() {
            return Err(mqlite::Error::UnknownPartition {
                topic: args.topic.clone(),
                partition: p,
                count: info.partitions.len() as u32,
            }
            .into());
        }
    }
    let max = info.config.max_message_bytes as usize;
    let (input, pb): (Box<dyn Read>, _) = match args.file.as_deref() {
        Some(path) if path.as_os_str() != "-" => {
            let f = File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
            let len = f.metadata().map_or(0, |m| m.len());
            let pb = bar(len, Unit::Bytes, "produce");
            (Box::new(pb.wrap_read(f)), Some(pb))
        }
        _ => (Box::new(io::stdin()), None),
    };
    let mut input = BufReader::with_capacity(1 << 20, input);
    let mut sep_buf = [0u8; 4];
    let sep = args
        .key_separator
        .map(|c| c.encode_utf8(&mut sep_buf).as_bytes().to_vec());
    let mut sender = Sender {
        producer: broker.producer(ProducerConfig::default().acks(args.acks))?,
        topic: &args.topic,
        partition: args.partition,
        headers: &args.headers,
        sent: 0,
    };
    let mut chunk = Chunk::default();
    let mut record = Vec::new();
    let mut at: u64 = 0;
    let result = (|| -> CliResult {
        loop {
            // Send what was read before waiting for more input (a person
            // typing, a slow pipe), and whenever the chunk is full.
            if chunk.is_full() || (!chunk.records.is_empty() && input.buffer().is_empty()) {
                sender.send(&mut chunk)?;
            }
            match args.format {
                InputFormat::Lines => {
                    record.clear();
                    let n = input
                        .read_until(b'\n', &mut record)
                        .map_err(|e| format!("reading the input: {e}"))?;
                    if n == 0 {
                        break;
                    }
                    at += n as u64;
                    if record.last() == Some(&b'\n') {
                        record.pop();
                    }
                    if record.last() == Some(&b'\r') {
                        record.pop();
                    }
                }
                InputFormat::LengthPrefixed => {
                    match read_frame(&mut input, &mut record, max, at)? {
                        Frame::Eof => break,
                        Frame::Record => at += 4 + record.len() as u64,
                    }
                }
            }
            chunk.push(&record, sep.as_deref());
        }
        sender.send(&mut chunk)?;
        sender.producer.flush()?;
        Ok(())
    })();
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    result?;
    sender.producer.close()?;
    eprintln!("{} record(s) written to {}", sender.sent, args.topic);
    Ok(())
}
