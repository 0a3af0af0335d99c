//! Consumed messages and their accessors.

use std::ffi::{c_char, c_void, CString};
use std::sync::OnceLock;

use mqlite::Message;

use crate::error::{copy_text, guard, guard_value, mql_status, Failure};
use crate::util::{arg, free, out, Out};

/// One consumed record. Made by `mql_poll`, released by
/// `mql_message_free`; or borrowed from an `mql_message_batch`
/// (`mql_message_batch_get`), which owns it. Key and value are read in place from the memory map
/// (no copy): the message keeps its segment mapped while it lives, even if
/// retention, topic deletion or `mql_close` happen meanwhile. Every pointer
/// an accessor returns stays valid until the message is freed.
pub struct mql_message {
    inner: Message,
    /// The topic name, NUL-terminated, made on first use.
    topic: OnceLock<CString>,
    /// The decoded headers, made on first use.
    headers: OnceLock<Vec<MessageHeader>>,
}

struct MessageHeader {
    /// The name's bytes followed by a NUL.
    name: Vec<u8>,
    value: Vec<u8>,
}

impl mql_message {
    pub(crate) fn new(inner: Message) -> mql_message {
        mql_message {
            inner,
            topic: OnceLock::new(),
            headers: OnceLock::new(),
        }
    }

    fn headers(&self) -> &[MessageHeader] {
        self.headers.get_or_init(|| {
            self.inner
                .headers()
                .into_iter()
                .map(|h| {
                    let mut name = h.key.into_bytes();
                    name.push(0);
                    MessageHeader {
                        name,
                        value: h.value,
                    }
                })
                .collect()
        })
    }
}

/// Writes `bytes` (pointer and length) out, or NULL and 0 for `None`.
///
/// # Safety
/// `len` is NULL or valid for writing a `size_t`.
unsafe fn bytes_out(bytes: Option<&[u8]>, len: *mut usize) -> *const c_void {
    let (p, n) = match bytes {
        Some(b) => (b.as_ptr().cast::<c_void>(), b.len()),
        None => (std::ptr::null(), 0),
    };
    if let Ok(len) = Out::new(len, "len") {
        // SAFETY: valid for writes by the caller's contract.
        unsafe { len.write(n) };
    }
    p
}

/// The message's topic, NUL-terminated; NULL if `message` is NULL.
///
/// Ownership: owned by the message, valid until `mql_message_free`.
///
/// # Safety
/// `message` is NULL or a live message.
#[no_mangle]
pub unsafe extern "C" fn mql_message_topic(message: *const mql_message) -> *const c_char {
    guard_value(std::ptr::null(), || {
        let m = arg!(ref message else std::ptr::null());
        m.topic
            .get_or_init(|| {
                // Topic names are validated ASCII without NUL bytes.
                CString::new(m.inner.topic()).unwrap_or_default()
            })
            .as_ptr()
    })
}

/// The message's partition; 0 if `message` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `message` is NULL or a live message.
#[no_mangle]
pub unsafe extern "C" fn mql_message_partition(message: *const mql_message) -> u32 {
    guard_value(0, || {
        let m = arg!(ref message else 0);
        m.inner.partition()
    })
}

/// The message's offset in its partition; 0 if `message` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `message` is NULL or a live message.
#[no_mangle]
pub unsafe extern "C" fn mql_message_offset(message: *const mql_message) -> u64 {
    guard_value(0, || {
        let m = arg!(ref message else 0);
        m.inner.offset()
    })
}

/// The message's timestamp in milliseconds since the Unix epoch; -1 if
/// `message` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `message` is NULL or a live message.
#[no_mangle]
pub unsafe extern "C" fn mql_message_timestamp(message: *const mql_message) -> i64 {
    guard_value(-1, || {
        let m = arg!(ref message else -1);
        m.inner.timestamp()
    })
}

/// The message's key, with its length in `*len` (when `len` is not NULL).
/// Returns NULL (and length 0) when the message has no key, or when
/// `message` is NULL (then `*len` is not written). An empty key is a
/// non-NULL pointer with length 0.
///
/// Ownership: points into the message, valid until `mql_message_free`.
///
/// # Safety
/// `message` is NULL or a live message; `len` is NULL or valid for writing
/// a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_message_key(
    message: *const mql_message,
    len: *mut usize,
) -> *const c_void {
    guard_value(std::ptr::null(), || {
        let m = arg!(ref message else std::ptr::null());
        // SAFETY: forwarded caller contract.
        unsafe { bytes_out(m.inner.key(), len) }
    })
}

/// The message's value, with its length in `*len` (when `len` is not
/// NULL). Returns NULL (and length 0) for a null value (a tombstone), or
/// when `message` is NULL (then `*len` is not written). An empty value is a
/// non-NULL pointer with length 0.
///
/// Ownership: points into the message, valid until `mql_message_free`.
///
/// # Safety
/// `message` is NULL or a live message; `len` is NULL or valid for writing
/// a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_message_value(
    message: *const mql_message,
    len: *mut usize,
) -> *const c_void {
    guard_value(std::ptr::null(), || {
        let m = arg!(ref message else std::ptr::null());
        // SAFETY: forwarded caller contract.
        unsafe { bytes_out(m.inner.value(), len) }
    })
}

/// Number of headers of the message; 0 if `message` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `message` is NULL or a live message.
#[no_mangle]
pub unsafe extern "C" fn mql_message_header_count(message: *const mql_message) -> usize {
    guard_value(0, || {
        let m = arg!(ref message else 0);
        m.headers().len()
    })
}

/// Header `index` (0-based, in the order sent) of the message: its name
/// (`*name_len` bytes of UTF-8, also followed by a NUL for convenience,
/// though a name may contain NUL bytes) and its value (`*value_len` bytes,
/// never NULL).
///
/// Errors: `MQL_INVALID_ARGUMENT` when `index` is not below
/// `mql_message_header_count`.
///
/// Ownership: the pointers point into the message, valid until
/// `mql_message_free`.
///
/// # Safety
/// `message` is NULL or a live message; the out-parameters are NULL or
/// valid for writes of their types.
#[no_mangle]
pub unsafe extern "C" fn mql_message_header(
    message: *const mql_message,
    index: usize,
    name: *mut *const c_char,
    name_len: *mut usize,
    value: *mut *const c_void,
    value_len: *mut usize,
) -> mql_status {
    guard(|| {
        let m = arg!(ref message);
        let name = out!(name);
        let name_len = out!(name_len);
        let value = out!(value);
        let value_len = out!(value_len);
        let headers = m.headers();
        let h = headers.get(index).ok_or_else(|| {
            Failure::invalid(format!(
                "header index {index} is out of range (the message has {})",
                headers.len()
            ))
        })?;
        // SAFETY: all four are valid for writes by the caller's contract.
        unsafe {
            name.write(h.name.as_ptr().cast());
            name_len.write(h.name.len() - 1);
            value.write(h.value.as_ptr().cast());
            value_len.write(h.value.len());
        }
        Ok(())
    })
}

/// The messages of one fetch (`mql_poll_batch`), held together: one
/// allocation for all of them instead of one per message. Read them with
/// `mql_message_batch_len` and `mql_message_batch_get` and the
/// `mql_message_*` accessors; release them all at once with
/// `mql_message_batch_free`.
pub struct mql_message_batch {
    messages: Vec<mql_message>,
}

impl mql_message_batch {
    pub(crate) fn new(messages: impl IntoIterator<Item = Message>) -> mql_message_batch {
        mql_message_batch {
            messages: messages.into_iter().map(mql_message::new).collect(),
        }
    }
}

/// Number of messages in `batch`; 0 if `batch` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `batch` is NULL or a live batch.
#[no_mangle]
pub unsafe extern "C" fn mql_message_batch_len(batch: *const mql_message_batch) -> usize {
    guard_value(0, || {
        let b = arg!(ref batch else 0);
        b.messages.len()
    })
}

/// Message `index` of `batch` (0 is the first, in the order `mql_poll`
/// would have handed them out); NULL if `batch` is NULL or `index` is not
/// below `mql_message_batch_len`.
///
/// Ownership: borrowed from the batch, valid (as is every pointer its
/// accessors return) until `mql_message_batch_free`; do not pass it to
/// `mql_message_free`.
///
/// # Safety
/// `batch` is NULL or a live batch.
#[no_mangle]
pub unsafe extern "C" fn mql_message_batch_get(
    batch: *const mql_message_batch,
    index: usize,
) -> *const mql_message {
    guard_value(std::ptr::null(), || {
        let b = arg!(ref batch else std::ptr::null());
        b.messages
            .get(index)
            .map_or(std::ptr::null(), std::ptr::from_ref::<mql_message>)
    })
}

/// Releases a batch and every message in it. NULL does nothing.
///
/// Ownership: takes back the batch the caller owned; every message pointer
/// `mql_message_batch_get` returned, and every pointer their accessors
/// returned, dies with it.
///
/// # Safety
/// `batch` is NULL or a live batch from `mql_poll_batch`, not used again.
#[no_mangle]
pub unsafe extern "C" fn mql_message_batch_free(batch: *mut mql_message_batch) {
    free!(batch);
}

/// Releases a message. NULL does nothing.
///
/// Ownership: takes back the message the caller owned; every pointer its accessors returned dies with it.
///
/// # Safety
/// `message` is NULL or a live message from `mql_poll`, not used again
/// (nor any pointer its accessors returned).
#[no_mangle]
pub unsafe extern "C" fn mql_message_free(message: *mut mql_message) {
    free!(message);
}

// Message ids.

/// Bytes of the longest message id (`topic:partition:offset`), without the
/// NUL: a buffer of `MQL_MESSAGE_ID_MAX + 1` bytes holds any id.
pub const MQL_MESSAGE_ID_MAX: usize = 281;

// The C constant is a literal (the header generator reads no other crate).
const _: () = assert!(MQL_MESSAGE_ID_MAX == mqlite::MAX_MESSAGE_ID_LEN);

/// Copies the message's unique id into `buf`, like `snprintf` (as
/// `mql_last_error_copy` does): at most `buf_len - 1` bytes and a NUL.
/// Returns the id's length without the NUL (0 when `message` is NULL): the
/// copy is whole when that is below `buf_len`; `buf` may be NULL to ask
/// for the length only.
///
/// The id is `<topic>:<partition>:<offset>` in decimal, e.g.
/// `orders:3:1042`; `mql_message_id_parse` reads it back and
/// `mql_seek_to_id` moves a consumer to it. The id of a record just sent is
/// the same string made from its topic and `mql_metadata`'s partition and
/// offset.
///
/// Ownership: borrows `message` and `buf` for the call; nothing to free.
///
/// # Safety
/// `message` is NULL or a live message; `buf` is NULL or valid for writing
/// `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn mql_message_id(
    message: *const mql_message,
    buf: *mut c_char,
    buf_len: usize,
) -> usize {
    guard_value(0, || {
        let m = arg!(ref message else 0);
        let id = m.inner.id().to_string();
        // SAFETY: forwarded caller contract.
        unsafe { copy_text(id.as_bytes(), buf, buf_len) }
    })
}

/// Parses a message id (`<topic>:<partition>:<offset>`, as
/// `mql_message_id` writes it): the topic into `topic` (NUL-terminated; a
/// buffer of 250 bytes holds any topic name), the partition into
/// `*partition` and the offset into `*offset`.
///
/// Errors: `MQL_INVALID_ARGUMENT` when `id` is malformed (not a valid
/// topic name, two `:` and two decimal numbers without sign or leading
/// zeros) or the topic does not fit in `topic_len` bytes with its NUL;
/// nothing is written then. `MQL_NULL_ARGUMENT` for a NULL pointer.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `id` is NULL or a NUL-terminated string; `topic` is NULL or valid for
/// writing `topic_len` bytes; `partition` is NULL or valid for writing a
/// `uint32_t`; `offset` is NULL or valid for writing a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_message_id_parse(
    id: *const c_char,
    topic: *mut c_char,
    topic_len: usize,
    partition: *mut u32,
    offset: *mut u64,
) -> mql_status {
    guard(|| {
        let id = arg!(str id);
        if topic.is_null() {
            return Err(Failure::null("topic"));
        }
        let partition = out!(partition);
        let offset = out!(offset);
        let parsed: mqlite::MessageId = id.parse()?;
        if parsed.topic.len() >= topic_len {
            return Err(Failure::invalid(format!(
                "the topic buffer holds {topic_len} bytes; the topic of {id:?} needs {}",
                parsed.topic.len() + 1
            )));
        }
        // SAFETY: `topic` is valid for `topic_len` bytes by the caller's
        // contract, and the name and its NUL fit (checked above).
        unsafe { copy_text(parsed.topic.as_bytes(), topic, topic_len) };
        // SAFETY: valid for writes by the caller's contract.
        unsafe {
            partition.write(parsed.partition);
            offset.write(parsed.offset);
        }
        Ok(())
    })
}
