//! How records are written to stdout by `consume` and `tail`, and the
//! length-prefixed framing shared with `produce --format length-prefixed`.

use std::io::{self, Read, Write};

use clap::ValueEnum;
use mqlite::Header;
use serde_json::{json, Value};

/// Output format of `consume` and `tail`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The value as UTF-8 (lossy), one per line; a record with headers is
    /// prefixed with `k=v,k2=v2` and a tab.
    Text,
    /// One JSON object per line (see docs/cli.md).
    Json,
    /// Each value framed as a 4-byte big-endian length followed by its
    /// bytes (the input of `produce --format length-prefixed`).
    Raw,
}

/// One record to print, from the engine's consumer or from a follower.
pub struct Rec<'a> {
    pub topic: &'a str,
    pub partition: u32,
    pub offset: u64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header],
}

fn lossy(b: Option<&[u8]>) -> Value {
    b.map_or(Value::Null, |b| {
        Value::String(String::from_utf8_lossy(b).into_owned())
    })
}

/// Writes one length-prefixed frame.
pub fn write_frame(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "a value longer than 4 GiB cannot be framed",
        )
    })?;
    out.write_all(&len.to_be_bytes())?;
    out.write_all(bytes)
}

/// What reading one frame found.
pub enum Frame {
    /// A whole frame (its bytes are in the buffer).
    Record,
    /// The input ended cleanly between two frames.
    Eof,
}

/// Reads one length-prefixed frame into `buf`, refusing a length above
/// `max` before allocating. `at` is the frame's byte position, for errors.
pub fn read_frame(
    input: &mut impl Read,
    buf: &mut Vec<u8>,
    max: usize,
    at: u64,
) -> Result<Frame, String> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match input.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(Frame::Eof),
            Ok(0) => {
                return Err(format!(
                    "input ends inside the length of the frame at byte {at}"
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the input: {e}")),
        }
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > max {
        return Err(format!(
            "the frame at byte {at} claims {n} bytes, more than the topic's \
             max_message_bytes ({max}): is the input length-prefixed?"
        ));
    }
    buf.clear();
    buf.resize(n, 0);
    input.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            format!("input ends inside the frame at byte {at} ({n} bytes announced)")
        } else {
            format!("reading the input: {e}")
        }
    })?;
    Ok(Frame::Record)
}

/// Writes `r` in `format`.
pub fn write_record(out: &mut impl Write, r: &Rec<'_>, format: Format) -> io::Result<()> {
    match format {
        Format::Text => {
            if !r.headers.is_empty() {
                for (i, h) in r.headers.iter().enumerate() {
                    if i > 0 {
                        out.write_all(b",")?;
                    }
                    write!(out, "{}={}", h.key, String::from_utf8_lossy(&h.value))?;
                }
                out.write_all(b"\t")?;
            }
            let v = r.value.unwrap_or_default();
            writeln!(out, "{}", String::from_utf8_lossy(v))
        }
        Format::Json => {
            let headers: Vec<Value> = r
                .headers
                .iter()
                .map(|h| json!({"key": h.key, "value": lossy(Some(&h.value))}))
                .collect();
            let v = json!({
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": lossy(r.key),
                "value": lossy(r.value),
                "headers": headers,
            });
            writeln!(out, "{v}")
        }
        Format::Raw => write_frame(out, r.value.unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_reject_bad_input() {
        let mut out = Vec::new();
        for v in [&b"a"[..], b"", b"line\nwith newline"] {
            write_frame(&mut out, v).unwrap();
        }
        let mut input = &out[..];
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while let Frame::Record = read_frame(&mut input, &mut buf, 100, 0).unwrap() {
            got.push(buf.clone());
        }
        assert_eq!(got, [&b"a"[..], b"", b"line\nwith newline"]);

        let err = |bytes: &[u8], max| match read_frame(&mut &bytes[..], &mut Vec::new(), max, 7) {
            Err(e) => e,
            Ok(_) => panic!("expected an error"),
        };
        assert!(err(&[0, 0], 100).contains("inside the length"));
        assert!(err(&[0, 0, 0, 5, b'x'], 100).contains("inside the frame at byte 7"));
        assert!(err(&[0, 0, 1, 0], 100).contains("more than the topic"));
    }
}
