//! Status codes, the per-thread error text, and the panic boundary every
//! exported function goes through.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use mqlite::ErrorKind;

// The values must stay written out here for cbindgen, which cannot read
// the core's list of error kinds (`mqlite::ErrorKind`); the test
// `statuses_match_core_kinds` checks that they match it one to one, name
// and number.

/// The result of every fallible function. `MQL_OK` (0) is success; the other
/// values are the engine's stable error codes (allocated in blocks per
/// domain: 1-99 general, 100-199 topics, 200-299 partitions, 300-399 on-disk
/// format, 400-499 producers, 500-599 consumers) and never change meaning.
/// `mql_last_error()` gives the text of the latest failure on the thread.
///
/// cbindgen:prefix-with-name=false
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum mql_status {
    /// Success.
    MQL_OK = 0,
    /// An operating-system I/O error (also the fallback for error kinds
    /// newer than this header; the text names them).
    MQL_IO = 1,
    /// No space left on the device (or the file-size limit was reached).
    MQL_DISK_FULL = 2,
    /// The data directory is held by another handle, in this process or
    /// another; the error text names the holder.
    MQL_LOCKED = 3,
    /// An argument was out of its allowed range or malformed.
    MQL_INVALID_ARGUMENT = 4,
    /// The handle (or the broker it came from) was closed.
    MQL_CLOSED = 5,
    /// Nothing arrived before the timeout (`mql_poll`), or an operation
    /// waited too long.
    MQL_TIMEOUT = 6,
    /// A write (a producer, a topic change, a commit) through a handle
    /// opened read-only (`mql_config_set_readonly`); nothing was written.
    MQL_READ_ONLY = 7,
    /// A required pointer argument was NULL.
    MQL_NULL_ARGUMENT = 10,
    /// A string argument was not valid UTF-8.
    MQL_INVALID_UTF8 = 11,
    /// An internal error (a Rust panic) was caught at the C boundary. Free
    /// the handles involved.
    MQL_PANIC = 12,
    /// A topic name broke the naming rules: 1 to 249 characters of
    /// `[A-Za-z0-9._-]`, not `.` or `..`, not starting with `__`.
    MQL_INVALID_TOPIC_NAME = 100,
    /// The topic already exists.
    MQL_TOPIC_EXISTS = 101,
    /// No topic of that name.
    MQL_UNKNOWN_TOPIC = 102,
    /// A topic configuration value is out of range.
    MQL_INVALID_CONFIG = 103,
    /// The topic has no such partition.
    MQL_UNKNOWN_PARTITION = 200,
    /// The offset is outside the partition's retained range.
    MQL_OFFSET_OUT_OF_RANGE = 201,
    /// An earlier write or fsync failure poisoned the partition; reopen the
    /// data directory.
    MQL_POISONED = 202,
    /// Data on disk failed a length or CRC check.
    MQL_CORRUPT = 300,
    /// The data was written by an on-disk format version this library cannot
    /// read.
    MQL_UNSUPPORTED_VERSION = 301,
    /// The record is larger than the topic's `max_message_bytes`.
    MQL_MESSAGE_TOO_LARGE = 400,
    /// The producer's `buffer_memory` stayed full for `max_block_ms`
    /// (asynchronous sends, `mql_produce`); nothing was queued.
    MQL_BUFFER_FULL = 401,
    /// With `strict_sequences`, a record's sequence skipped ahead of the
    /// next one its partition expects; the error text says which was
    /// expected and which received. Nothing was written.
    MQL_OUT_OF_ORDER_SEQUENCE = 402,
    /// A newer producer with the same name exists (it has a higher epoch);
    /// this one may no longer write. Free it.
    MQL_PRODUCER_FENCED = 403,
    /// A producer of the same name is open in an access mode that excludes
    /// the new one (see `mql_access_mode`); nothing changed, the open one
    /// keeps working.
    MQL_PRODUCER_BUSY = 404,
    /// A transaction grew past the producer's `max_transaction_bytes` (the
    /// record was not added; the transaction stays open), or its part in
    /// one partition is larger than a segment (at the commit: nothing was
    /// written).
    MQL_TRANSACTION_TOO_LARGE = 410,
    /// A commit was refused: this group member no longer owns a partition
    /// it commits (a rebalance gave it to another member). Nothing was
    /// committed.
    MQL_COMMIT_FAILED = 500,
    /// A share consumer's settlement (`mql_share_ack` and the like) was
    /// refused: this delivery of the message is no longer held by the
    /// consumer (its lock ran out and it may have been delivered again, or
    /// it was settled already). Nothing changed.
    MQL_INVALID_RECORD_STATE = 501,
}

// The statuses by name in the table and matches below.
#[allow(clippy::enum_glob_use)]
use mql_status::*;

/// Every status, for lookups by number.
const ALL: [mql_status; 28] = [
    MQL_OK,
    MQL_IO,
    MQL_DISK_FULL,
    MQL_LOCKED,
    MQL_INVALID_ARGUMENT,
    MQL_CLOSED,
    MQL_TIMEOUT,
    MQL_READ_ONLY,
    MQL_NULL_ARGUMENT,
    MQL_INVALID_UTF8,
    MQL_PANIC,
    MQL_INVALID_TOPIC_NAME,
    MQL_TOPIC_EXISTS,
    MQL_UNKNOWN_TOPIC,
    MQL_INVALID_CONFIG,
    MQL_UNKNOWN_PARTITION,
    MQL_OFFSET_OUT_OF_RANGE,
    MQL_POISONED,
    MQL_CORRUPT,
    MQL_UNSUPPORTED_VERSION,
    MQL_MESSAGE_TOO_LARGE,
    MQL_BUFFER_FULL,
    MQL_OUT_OF_ORDER_SEQUENCE,
    MQL_PRODUCER_FENCED,
    MQL_PRODUCER_BUSY,
    MQL_TRANSACTION_TOO_LARGE,
    MQL_COMMIT_FAILED,
    MQL_INVALID_RECORD_STATE,
];

impl mql_status {
    /// The status with numeric value `code`, if there is one.
    pub(crate) fn from_code(code: c_int) -> Option<mql_status> {
        ALL.iter().copied().find(|s| *s as c_int == code)
    }

    /// The status for an engine error, by its stable code. Codes newer than
    /// this library (the core's `Error` is non-exhaustive) become `MQL_IO`;
    /// the error text keeps the details.
    pub(crate) fn from_core(e: &mqlite::Error) -> mql_status {
        match mql_status::from_code(e.code()) {
            // The FFI-only codes are never core codes.
            Some(s) if !s.is_ffi_only() => s,
            _ => MQL_IO,
        }
    }

    /// The status name: the FFI's own four here, the engine's from the
    /// core's list of error kinds.
    fn name(self) -> &'static CStr {
        match self {
            MQL_OK => c"MQL_OK",
            MQL_NULL_ARGUMENT => c"MQL_NULL_ARGUMENT",
            MQL_INVALID_UTF8 => c"MQL_INVALID_UTF8",
            MQL_PANIC => c"MQL_PANIC",
            s => ErrorKind::from_code(s as c_int)
                .map_or(c"MQL_UNKNOWN_STATUS", ErrorKind::status_cstr),
        }
    }

    /// Whether the status is the FFI's own, not an engine error kind.
    fn is_ffi_only(self) -> bool {
        matches!(
            self,
            MQL_OK | MQL_NULL_ARGUMENT | MQL_INVALID_UTF8 | MQL_PANIC
        )
    }
}

/// Why a call failed: a status and its text.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: mql_status,
    pub(crate) message: String,
}

/// What the bodies of exported functions return.
pub(crate) type FfiResult<T = ()> = Result<T, Failure>;

impl Failure {
    pub(crate) fn new(status: mql_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    /// A required pointer argument was NULL.
    pub(crate) fn null(arg: &str) -> Failure {
        Failure::new(MQL_NULL_ARGUMENT, format!("argument `{arg}` is NULL"))
    }

    /// An argument was out of range.
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(MQL_INVALID_ARGUMENT, message)
    }
}

impl From<&mqlite::Error> for Failure {
    fn from(e: &mqlite::Error) -> Failure {
        let status = mql_status::from_core(e);
        let message = if status as c_int == e.code() {
            e.to_string()
        } else {
            format!("{e} (engine error code {})", e.code())
        };
        Failure { status, message }
    }
}

impl From<mqlite::Error> for Failure {
    fn from(e: mqlite::Error) -> Failure {
        Failure::from(&e)
    }
}

/// The latest failure on this thread.
struct LastError {
    status: mql_status,
    text: Option<CString>,
}

thread_local! {
    static LAST_ERROR: RefCell<LastError> = const {
        RefCell::new(LastError { status: MQL_OK, text: None })
    };
}

/// `message` as a C string; interior NULs (which C cannot show) become `?`.
pub(crate) fn c_text(message: String) -> CString {
    CString::new(message).unwrap_or_else(|e| {
        let bytes: Vec<u8> = e
            .into_vec()
            .into_iter()
            .map(|b| if b == 0 { b'?' } else { b })
            .collect();
        CString::new(bytes).unwrap_or_default()
    })
}

/// Records a failure as this thread's last error, for functions that
/// return no status (a refused `_free`).
pub(crate) fn record_failure(f: Failure) {
    set_last_error(f.status, f.message);
}

fn set_last_error(status: mql_status, message: String) {
    let text = c_text(message);
    // `try_with` fails only while the thread is being torn down; the error
    // is then lost, which nobody could read anyway.
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            l.status = status;
            l.text = Some(text);
        }
    });
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_owned()
    }
}

fn caught_panic(payload: Box<dyn std::any::Any + Send>) {
    let message = panic_message(&*payload);
    // Dropping the payload could itself panic; never let that escape.
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
    set_last_error(MQL_PANIC, format!("internal error (panic): {message}"));
}

/// The panic boundary of every exported function that returns a status:
/// runs `body`, records a failure as this thread's last error, and turns a
/// panic into `MQL_PANIC` instead of unwinding into C.
pub(crate) fn guard(body: impl FnOnce() -> FfiResult) -> mql_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => MQL_OK,
        Ok(Err(f)) => {
            let status = f.status;
            set_last_error(status, f.message);
            status
        }
        Err(payload) => {
            caught_panic(payload);
            MQL_PANIC
        }
    }
}

/// The panic boundary of exported functions that return a value rather
/// than a status (accessors, `_free`): a panic yields `fallback` and sets
/// this thread's last error to `MQL_PANIC`.
pub(crate) fn guard_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            caught_panic(payload);
            fallback
        }
    }
}

/// Text of the latest failure on the calling thread, or `""` when no call on
/// this thread has failed yet. Successful calls do not clear it.
///
/// Ownership: the string belongs to the library; do not free it. It stays
/// valid until the next failing call on this thread or the thread's exit;
/// copy it to keep it longer.
#[no_mangle]
pub extern "C" fn mql_last_error() -> *const c_char {
    guard_value(c"".as_ptr(), || {
        LAST_ERROR
            .try_with(|l| match l.try_borrow() {
                Ok(l) => l.text.as_deref().map_or(c"".as_ptr(), CStr::as_ptr),
                Err(_) => c"".as_ptr(),
            })
            .unwrap_or(c"".as_ptr())
    })
}

/// Copies the text of the latest failure on the calling thread (what
/// `mql_last_error()` returns) into `buf`, like `snprintf`: at most
/// `buf_len - 1` bytes followed by a NUL when `buf_len` > 0, cut short at a
/// UTF-8 character boundary so that the copy is valid UTF-8. Returns the
/// length of the whole text in bytes, without the NUL: the copy was cut
/// short when that is at least `buf_len` (call again with a buffer of the
/// returned length plus one to get all of it). `buf` may be NULL to ask for
/// the length only; nothing is written then, whatever `buf_len`.
///
/// Never fails and never changes the last error. Error texts have no fixed
/// limit (they quote the names and paths they are about), so this is the
/// way to keep one in a buffer of your own.
///
/// Ownership: borrows `buf` for the call; nothing to free.
///
/// # Safety
/// `buf` is NULL or valid for writing `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn mql_last_error_copy(buf: *mut c_char, buf_len: usize) -> usize {
    guard_value(0, || {
        LAST_ERROR
            .try_with(|l| match l.try_borrow() {
                // SAFETY: forwarded caller contract.
                Ok(l) => unsafe {
                    copy_text(l.text.as_deref().map_or(b"", CStr::to_bytes), buf, buf_len)
                },
                Err(_) => 0,
            })
            .unwrap_or(0)
    })
}

/// Copies `text` into `(buf, buf_len)` as [`mql_last_error_copy`] says;
/// returns `text.len()`.
///
/// # Safety
/// `buf` is NULL or valid for writing `buf_len` bytes, not overlapping
/// `text`.
pub(crate) unsafe fn copy_text(text: &[u8], buf: *mut c_char, buf_len: usize) -> usize {
    if !buf.is_null() && buf_len > 0 {
        let n = utf8_floor(text, buf_len - 1);
        // SAFETY: `buf` is valid for `buf_len` bytes by the caller's
        // contract and n + 1 <= buf_len; bytes need no alignment; `text` is
        // the library's own buffer, which cannot overlap the caller's.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
    }
    text.len()
}

/// The largest `n <= max` at which `text` (UTF-8) can be cut without
/// splitting a character.
fn utf8_floor(text: &[u8], max: usize) -> usize {
    if max >= text.len() {
        return text.len();
    }
    let mut n = max;
    // text[n] is the first byte left out: while it continues a character,
    // that character started before the cut and is left out too.
    while n > 0 && text[n] & 0xC0 == 0x80 {
        n -= 1;
    }
    n
}

/// Status of the latest failure on the calling thread (`MQL_OK` when no call
/// on this thread has failed yet). Successful calls do not clear it.
///
/// Ownership: returns a plain value; nothing to free.
#[no_mangle]
pub extern "C" fn mql_last_error_code() -> mql_status {
    guard_value(MQL_PANIC, || {
        LAST_ERROR
            .try_with(|l| l.try_borrow().map_or(MQL_OK, |l| l.status))
            .unwrap_or(MQL_OK)
    })
}

/// The name of a status as a static string, e.g. `"MQL_UNKNOWN_TOPIC"` for
/// `MQL_UNKNOWN_TOPIC`; `"MQL_UNKNOWN_STATUS"` for a value that is not an
/// `mql_status`. Takes an `int` so that any value is safe to pass.
///
/// Ownership: static storage; never free it.
#[no_mangle]
pub extern "C" fn mql_status_str(status: c_int) -> *const c_char {
    guard_value(c"MQL_UNKNOWN_STATUS".as_ptr(), || {
        mql_status::from_code(status)
            .map_or(c"MQL_UNKNOWN_STATUS", mql_status::name)
            .as_ptr()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mqlite::Error;
    use std::path::PathBuf;

    fn io() -> std::io::Error {
        std::io::Error::other("x")
    }

    /// Every core error kind maps to the status with its own code.
    #[test]
    fn statuses_equal_core_codes() {
        let errors = [
            Error::Io {
                context: "c".into(),
                source: io(),
            },
            Error::DiskFull {
                context: "c".into(),
                source: io(),
            },
            Error::Locked {
                path: PathBuf::from("d"),
                holder: "process 1".into(),
            },
            Error::InvalidArgument("a".into()),
            Error::Closed("broker"),
            Error::Timeout(5),
            Error::InvalidTopicName {
                name: "n".into(),
                reason: "r",
            },
            Error::TopicExists("t".into()),
            Error::UnknownTopic("t".into()),
            Error::InvalidConfig("c".into()),
            Error::UnknownPartition {
                topic: "t".into(),
                partition: 9,
                count: 1,
            },
            Error::OffsetOutOfRange {
                topic: "t".into(),
                partition: 0,
                offset: 9,
                start: 0,
                end: 1,
            },
            Error::Poisoned {
                topic: "t".into(),
                partition: 0,
            },
            Error::Corrupt {
                path: PathBuf::from("f"),
                position: 0,
                reason: "r".into(),
            },
            Error::UnsupportedVersion {
                path: PathBuf::from("f"),
                found: 9,
                supported: 1,
            },
            Error::MessageTooLarge { size: 9, max: 1 },
            Error::BufferFull {
                buffered: 9,
                limit: 1,
                waited_ms: 5,
            },
            Error::OutOfOrderSequence {
                topic: "t".into(),
                partition: 0,
                expected: 2,
                received: 5,
            },
            Error::ProducerFenced {
                producer_id: 1,
                epoch: 0,
                current_epoch: 1,
            },
            Error::TransactionTooLarge { size: 9, max: 1 },
            Error::CommitFailed("t/0 is not owned".into()),
            Error::InvalidRecordState("t/0 offset 3 is not held".into()),
            Error::ProducerBusy {
                name: "x".into(),
                reason: "open".into(),
            },
        ];
        for e in errors {
            let code = e.code();
            let f = Failure::from(e);
            assert_eq!(f.status as c_int, code, "{}", f.message);
        }
    }

    /// The statuses written out above and the core's list of error kinds
    /// match one to one: same number, same name, and back.
    #[test]
    fn statuses_match_core_kinds() {
        for &k in ErrorKind::ALL {
            let s =
                mql_status::from_code(k.code()).unwrap_or_else(|| panic!("no status for {k:?}"));
            assert!(!s.is_ffi_only(), "{k:?}");
            assert_eq!(format!("{s:?}"), k.status_name());
            assert_eq!(s.name(), k.status_cstr());
        }
        for s in ALL {
            let kind = ErrorKind::from_code(s as c_int);
            assert_eq!(kind.is_none(), s.is_ffi_only(), "{s:?}");
            if let Some(k) = kind {
                assert_eq!(k.status_name(), format!("{s:?}"));
            }
        }
        assert_eq!(ALL.len(), ErrorKind::ALL.len() + 4);
    }

    #[test]
    fn every_status_has_a_name() {
        for s in ALL {
            let name = mql_status_str(s as c_int);
            // SAFETY: mql_status_str returns a static NUL-terminated string.
            let name = unsafe { CStr::from_ptr(name) }.to_str().unwrap();
            assert!(name.starts_with("MQL_"), "{name}");
            assert_eq!(mql_status::from_code(s as c_int), Some(s));
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(mql_status_str(-7)) };
        assert_eq!(unknown.to_bytes(), b"MQL_UNKNOWN_STATUS");
    }

    #[test]
    fn guard_catches_panics_and_keeps_text_per_thread() {
        let st = guard(|| panic!("boom"));
        assert_eq!(st, MQL_PANIC);
        assert_eq!(mql_last_error_code(), MQL_PANIC);
        // SAFETY: mql_last_error returns a live NUL-terminated string.
        let text = unsafe { CStr::from_ptr(mql_last_error()) }
            .to_str()
            .unwrap()
            .to_owned();
        assert!(text.contains("boom"), "{text}");
        std::thread::spawn(|| {
            assert_eq!(mql_last_error_code(), MQL_OK);
            // SAFETY: as above.
            assert_eq!(unsafe { CStr::from_ptr(mql_last_error()) }.to_bytes(), b"");
        })
        .join()
        .unwrap();
        assert_eq!(guard_value(7, || panic!("again")), 7);
        assert_eq!(guard(|| Ok(())), MQL_OK);
        // Success leaves the last error alone.
        assert_eq!(mql_last_error_code(), MQL_PANIC);
    }

    fn last_error_copy(buf_len: usize) -> (usize, Vec<u8>) {
        let mut buf = vec![b'#'; buf_len];
        // SAFETY: `buf` is valid for `buf_len` bytes.
        let full = unsafe { mql_last_error_copy(buf.as_mut_ptr().cast(), buf_len) };
        (full, buf)
    }

    #[test]
    fn last_error_copy_truncates_at_character_boundaries() {
        // "é" is two bytes and "€" three: 8 bytes in all.
        let st = guard(|| Err(Failure::invalid("aébc€")));
        assert_eq!(st, MQL_INVALID_ARGUMENT);
        let text = "aébc€".as_bytes();
        // SAFETY: NULL asks for the length only.
        assert_eq!(unsafe { mql_last_error_copy(std::ptr::null_mut(), 99) }, 8);
        assert_eq!(last_error_copy(0), (8, vec![]));
        // buf_len -> how many bytes of the text fit (never half an "é" or
        // "€"); the rest of the buffer after the NUL is untouched.
        for (buf_len, kept) in [
            (1, 0),
            (2, 1),
            (3, 1),
            (4, 3),
            (5, 4),
            (6, 5),
            (7, 5),
            (8, 5),
            (9, 8),
        ] {
            let (full, buf) = last_error_copy(buf_len);
            assert_eq!(full, 8);
            let mut want = text[..kept].to_vec();
            want.push(0);
            want.resize(buf_len, b'#');
            assert_eq!(buf, want, "buf_len {buf_len}");
        }
        // Reading it changed nothing.
        assert_eq!(mql_last_error_code(), MQL_INVALID_ARGUMENT);
    }

    #[test]
    fn utf8_floor_never_splits_a_character() {
        let s = "x€y".as_bytes(); // x, 3 bytes, y
        let cuts: Vec<usize> = (0..=6).map(|m| utf8_floor(s, m)).collect();
        assert_eq!(cuts, [0, 1, 1, 1, 4, 5, 5]);
    }

    #[test]
    fn interior_nul_in_error_text_is_replaced() {
        let st = guard(|| Err(Failure::invalid("a\0b")));
        assert_eq!(st, MQL_INVALID_ARGUMENT);
        // SAFETY: mql_last_error returns a live NUL-terminated string.
        let text = unsafe { CStr::from_ptr(mql_last_error()) };
        assert_eq!(text.to_bytes(), b"a?b");
    }
}
