//! Consumed records: [`Message`] (owned, one at a time), [`MessageBatch`]
//! (the messages of one poll, held together) and [`MessageRef`] (a message
//! borrowed from a batch).
//!
//! Key, value and headers are read in place from the segment's memory map
//! (for a compressed batch: from its records, decompressed once and shared).
//! What the bytes live in is a [`Source`]; messages keep their source alive
//! while they exist, even if retention or topic deletion removes the file
//! meanwhile. An owned [`Message`] holds its source through one `Arc` (one
//! reference count per message); a [`MessageBatch`] holds each source once,
//! however many of its messages read from it, which is why polling a batch
//! costs less per message than polling owned messages.

use std::sync::Arc;

use crate::log::batch::{self, Header};
use crate::log::Segment;
use crate::message_id::MessageId;

/// What a source's bytes are.
enum Backing {
    /// The segment's memory map (records of uncompressed batches).
    Segment(Arc<Segment>),
    /// The decompressed records section of one compressed batch. (A `Vec`
    /// rather than a boxed slice: the decompressed `Vec` is kept as it is.)
    Buffer(Vec<u8>),
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backing::Segment(seg) => f.debug_tuple("Segment").field(seg).finish(),
            Backing::Buffer(buf) => write!(f, "Buffer({} bytes)", buf.len()),
        }
    }
}

/// What a run of messages shares: topic, partition and the bytes their
/// ranges point into (a segment, or one decompressed batch).
#[derive(Debug)]
pub(crate) struct Source {
    topic: Arc<str>,
    partition: u32,
    data: Backing,
}

impl Source {
    /// The source of the records read in place from `seg`.
    pub(crate) fn segment(topic: &Arc<str>, partition: u32, seg: &Arc<Segment>) -> Source {
        Source {
            topic: Arc::clone(topic),
            partition,
            data: Backing::Segment(Arc::clone(seg)),
        }
    }

    /// The source of the records of one decompressed batch (`records`).
    pub(crate) fn buffer(topic: &Arc<str>, partition: u32, records: Vec<u8>) -> Source {
        Source {
            topic: Arc::clone(topic),
            partition,
            data: Backing::Buffer(records),
        }
    }

    #[inline]
    fn bytes(&self, start: u32, end: u32) -> &[u8] {
        match &self.data {
            Backing::Segment(seg) => seg.bytes(start as usize, end as usize),
            Backing::Buffer(buf) => &buf[start as usize..end as usize],
        }
    }

    /// A decompressed batch's records section (empty for a segment).
    pub(crate) fn buffer_bytes(&self) -> &[u8] {
        match &self.data {
            Backing::Segment(_) => &[],
            Backing::Buffer(buf) => buf,
        }
    }

    /// Whether this is the source of segment `seg`.
    #[inline]
    pub(crate) fn is_segment(&self, seg: &Arc<Segment>) -> bool {
        matches!(&self.data, Backing::Segment(s) if Arc::ptr_eq(s, seg))
    }
}

/// A byte range in a source, or none (`start == NONE`): half the size of
/// an `Option<Range<usize>>`, which matters when a poll stores hundreds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    start: u32,
    end: u32,
}

impl Span {
    const NONE_START: u32 = u32::MAX;

    /// No range (a missing key, a tombstone's value).
    pub(crate) const NONE: Span = Span {
        start: Self::NONE_START,
        end: 0,
    };

    /// The range `start..end`, moved by `base`.
    #[inline]
    pub(crate) fn new(base: usize, r: std::ops::Range<usize>) -> Span {
        Span {
            start: (base + r.start) as u32,
            end: (base + r.end) as u32,
        }
    }

    /// `r` moved by `base`, or none.
    #[inline]
    pub(crate) fn opt(base: usize, r: Option<std::ops::Range<usize>>) -> Span {
        r.map_or(Span::NONE, |r| Span::new(base, r))
    }

    #[inline]
    fn len(self) -> u64 {
        if self.start == Self::NONE_START {
            0
        } else {
            u64::from(self.end - self.start)
        }
    }

    #[inline]
    fn read(self, src: &Source) -> Option<&[u8]> {
        (self.start != Self::NONE_START).then(|| src.bytes(self.start, self.end))
    }
}

/// Where a record is in its source, and what it says besides its bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rec {
    pub offset: u64,
    pub timestamp: i64,
    pub key: Span,
    pub value: Span,
    pub headers: Span,
    pub header_count: u32,
    /// Which of a [`MessageBatch`]'s sources holds the bytes (kept here,
    /// where the struct has room, rather than beside it).
    pub source: u32,
}

impl Rec {
    /// Bytes of key and value, from their ranges (without touching them).
    #[inline]
    fn payload_len(&self) -> u64 {
        self.key.len() + self.value.len()
    }
}

/// A message borrowed from a [`MessageBatch`]: the same accessors as
/// [`Message`], without owning anything.
#[derive(Debug, Clone, Copy)]
pub struct MessageRef<'a> {
    src: &'a Source,
    rec: &'a Rec,
}

impl<'a> MessageRef<'a> {
    /// The topic.
    pub fn topic(&self) -> &'a str {
        &self.src.topic
    }

    /// The partition.
    pub fn partition(&self) -> u32 {
        self.src.partition
    }

    /// The offset.
    pub fn offset(&self) -> u64 {
        self.rec.offset
    }

    /// The message's unique id: its topic, partition and offset.
    pub fn id(&self) -> MessageId {
        MessageId::new(self.topic(), self.partition(), self.offset())
    }

    /// The timestamp (ms since the epoch).
    pub fn timestamp(&self) -> i64 {
        self.rec.timestamp
    }

    /// The key, if any.
    #[inline]
    pub fn key(&self) -> Option<&'a [u8]> {
        self.rec.key.read(self.src)
    }

    /// The value, if any (`None` for a tombstone).
    #[inline]
    pub fn value(&self) -> Option<&'a [u8]> {
        self.rec.value.read(self.src)
    }

    /// Number of headers.
    pub fn header_count(&self) -> usize {
        self.rec.header_count as usize
    }

    /// The headers, decoded, in order.
    pub fn headers(&self) -> Vec<Header> {
        if self.rec.header_count == 0 {
            return Vec::new();
        }
        let h = self.rec.headers;
        batch::decode_headers(self.src.bytes(h.start, h.end), self.rec.header_count)
    }
}

/// A consumed record, owned. Key, value and headers are read in place from
/// the segment's memory map (for a compressed batch: from its records,
/// decompressed once and shared by its messages); the message keeps those
/// bytes alive while it exists, even if retention or topic deletion removes
/// the file meanwhile. That costs one atomic reference count per message; a
/// [`MessageBatch`] counts once per segment or compressed batch instead.
#[derive(Debug, Clone)]
pub struct Message {
    src: Arc<Source>,
    rec: Rec,
}

impl Message {
    /// A message made of its fields (a record read from a Kafka cluster):
    /// key, value and headers copied into one buffer it owns.
    #[cfg(feature = "kafka")]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_fields(
        topic: &Arc<str>,
        partition: u32,
        offset: u64,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header],
    ) -> Message {
        let mut buf = Vec::with_capacity(key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len));
        let span = |b: Option<&[u8]>, buf: &mut Vec<u8>| {
            b.map_or(Span::NONE, |b| {
                let start = buf.len();
                buf.extend_from_slice(b);
                Span::new(0, start..buf.len())
            })
        };
        let key = span(key, &mut buf);
        let value = span(value, &mut buf);
        let start = buf.len();
        batch::encode_headers(&mut buf, headers);
        let headers_span = Span::new(0, start..buf.len());
        Message {
            src: Arc::new(Source::buffer(topic, partition, buf)),
            rec: Rec {
                offset,
                timestamp,
                key,
                value,
                headers: headers_span,
                header_count: headers.len() as u32,
                source: 0,
            },
        }
    }

    /// Puts the message into a poll's sink.
    #[inline]
    pub(crate) fn push_into<S: Sink>(self, out: &mut S) {
        out.push(&self.src, self.rec);
    }

    /// Bytes of its key and value.
    #[inline]
    pub(crate) fn payload_len(&self) -> u64 {
        self.rec.payload_len()
    }

    /// The message as a [`MessageRef`] (what the accessors below read).
    #[inline]
    pub fn as_message_ref(&self) -> MessageRef<'_> {
        MessageRef {
            src: &self.src,
            rec: &self.rec,
        }
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        self.as_message_ref().topic()
    }

    /// The partition.
    pub fn partition(&self) -> u32 {
        self.as_message_ref().partition()
    }

    /// The offset.
    pub fn offset(&self) -> u64 {
        self.as_message_ref().offset()
    }

    /// The message's unique id: its topic, partition and offset.
    pub fn id(&self) -> MessageId {
        self.as_message_ref().id()
    }

    /// The timestamp (ms since the epoch).
    pub fn timestamp(&self) -> i64 {
        self.as_message_ref().timestamp()
    }

    /// The key, if any.
    #[inline]
    pub fn key(&self) -> Option<&[u8]> {
        self.as_message_ref().key()
    }

    /// The value, if any (`None` for a tombstone).
    #[inline]
    pub fn value(&self) -> Option<&[u8]> {
        self.as_message_ref().value()
    }

    /// Number of headers.
    pub fn header_count(&self) -> usize {
        self.as_message_ref().header_count()
    }

    /// The headers, decoded, in order.
    pub fn headers(&self) -> Vec<Header> {
        self.as_message_ref().headers()
    }
}

/// The messages of one poll ([`Consumer::poll_batch`]), in the order `poll`
/// would return them. It holds what they read from once, not per message;
/// read them by reference ([`iter`](Self::iter), [`get`](Self::get)) or
/// turn them into owned [`Message`]s (`into_iter`).
///
/// [`Consumer::poll_batch`]: crate::Consumer::poll_batch
#[derive(Debug, Default)]
pub struct MessageBatch {
    sources: Vec<Arc<Source>>,
    entries: Vec<Rec>,
}

impl MessageBatch {
    /// Number of messages.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no messages (the poll timed out).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Message `i` (in poll order), if there is one.
    pub fn get(&self, i: usize) -> Option<MessageRef<'_>> {
        self.entries.get(i).map(|e| self.view(e))
    }

    /// The messages, by reference, in poll order.
    pub fn iter(&self) -> MessageIter<'_> {
        MessageIter {
            sources: &self.sources,
            entries: self.entries.iter(),
        }
    }

    /// Message `i` as an owned [`Message`] (it shares the bytes).
    pub fn to_message(&self, i: usize) -> Option<Message> {
        self.entries.get(i).map(|&rec| Message {
            src: Arc::clone(&self.sources[rec.source as usize]),
            rec,
        })
    }

    #[inline]
    fn view<'a>(&'a self, rec: &'a Rec) -> MessageRef<'a> {
        MessageRef {
            src: &self.sources[rec.source as usize],
            rec,
        }
    }
}

/// The messages of a [`MessageBatch`], by reference ([`MessageBatch::iter`]).
#[derive(Debug, Clone)]
pub struct MessageIter<'a> {
    sources: &'a [Arc<Source>],
    entries: std::slice::Iter<'a, Rec>,
}

impl<'a> Iterator for MessageIter<'a> {
    type Item = MessageRef<'a>;

    #[inline]
    fn next(&mut self) -> Option<MessageRef<'a>> {
        let rec = self.entries.next()?;
        Some(MessageRef {
            src: &self.sources[rec.source as usize],
            rec,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl ExactSizeIterator for MessageIter<'_> {}

impl IntoIterator for MessageBatch {
    type Item = Message;
    type IntoIter = std::vec::IntoIter<Message>;

    /// The messages as owned [`Message`]s, in poll order.
    fn into_iter(self) -> Self::IntoIter {
        let sources = self.sources;
        self.entries
            .into_iter()
            .map(|rec| Message {
                src: Arc::clone(&sources[rec.source as usize]),
                rec,
            })
            .collect::<Vec<_>>()
            .into_iter()
    }
}

impl<'a> IntoIterator for &'a MessageBatch {
    type Item = MessageRef<'a>;
    type IntoIter = MessageIter<'a>;

    fn into_iter(self) -> MessageIter<'a> {
        self.iter()
    }
}

/// Where a poll puts the messages it takes.
pub(crate) trait Sink {
    /// Messages taken so far.
    fn len(&self) -> usize;
    /// Makes room for `n` more.
    fn reserve(&mut self, n: usize);
    /// Takes the record `rec` of `src`.
    fn push(&mut self, src: &Arc<Source>, rec: Rec);
    /// Bytes of keys and values taken so far.
    fn payload_bytes(&self) -> u64;
}

impl Sink for Vec<Message> {
    #[inline]
    fn len(&self) -> usize {
        Vec::len(self)
    }

    fn reserve(&mut self, n: usize) {
        Vec::reserve(self, n);
    }

    #[inline]
    fn push(&mut self, src: &Arc<Source>, rec: Rec) {
        Vec::push(
            self,
            Message {
                src: Arc::clone(src),
                rec,
            },
        );
    }

    fn payload_bytes(&self) -> u64 {
        self.iter().map(|m| m.rec.payload_len()).sum()
    }
}

impl Sink for MessageBatch {
    #[inline]
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
    }

    #[inline]
    fn push(&mut self, src: &Arc<Source>, mut rec: Rec) {
        if !self.sources.last().is_some_and(|s| Arc::ptr_eq(s, src)) {
            self.sources.push(Arc::clone(src));
        }
        rec.source = (self.sources.len() - 1) as u32;
        self.entries.push(rec);
    }

    fn payload_bytes(&self) -> u64 {
        self.entries.iter().map(Rec::payload_len).sum()
    }
}
