//! C callbacks run by the engine: delivery reports, custom partition
//! selectors and interceptors. The engine calls Rust closures (on any
//! thread); these call the C functions with plain C views of the data.

use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use mqlite::{BorrowedRecord, Error, Partitioner, ProducerInterceptor, Record, RecordMetadata};

use crate::error::{c_text, mql_status, Failure};
use crate::producer::{
    mql_header, mql_metadata, mql_record, mql_record_view, record_args, MQL_PARTITION_ANY,
    MQL_TIMESTAMP_NOW,
};

/// A caller's `user_data` pointer, handed back to its C callbacks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserData(*mut c_void);

// SAFETY: Rust never dereferences the pointer; it only passes it back to
// the C callbacks it was registered with, which the engine may call from
// any thread, several at once. The header documents that contract on every
// function taking a callback: the C caller makes whatever `user_data`
// points to safe to use that way (or uses it from one thread only by
// configuration, e.g. no background thread). Moving or sharing the pointer
// value itself between threads is harmless.
unsafe impl Send for UserData {}
// SAFETY: as for Send: shared access only copies the pointer value.
unsafe impl Sync for UserData {}

impl UserData {
    pub(crate) fn new(p: *mut c_void) -> UserData {
        UserData(p)
    }

    /// The pointer. (A method, so that closures capture the whole
    /// `UserData`, which is `Send`, rather than its raw-pointer field.)
    pub(crate) fn get(self) -> *mut c_void {
        self.0
    }
}

/// A delivery report: `md` is where the record was written (valid during
/// the call only) and `status` `MQL_OK`, `error_message` NULL; or, on
/// failure, `md` is NULL, `status` the failure's status and `error_message`
/// its text (NUL-terminated, valid during the call only). `user_data` is
/// the pointer given with the callback.
///
/// May be called on another thread than the one that sent the record, and
/// (for interceptors) on several threads at once.
pub type mql_delivery_callback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        md: *const mql_metadata,
        status: mql_status,
        error_message: *const c_char,
    ),
>;

/// A custom partition selector: returns the partition (0 to
/// `partitions - 1`) for `record`, a record sent without an explicit
/// partition (keyed or not), to a topic that has `partitions` partitions.
/// A value out of range fails the send with `MQL_UNKNOWN_PARTITION`.
///
/// Called on the sending thread, during the send call, possibly on several
/// threads at once.
pub type mql_partition_selector = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        record: *const mql_record_view,
        partitions: u32,
    ) -> u32,
>;

/// An interceptor's `on_send`: sees `record` before its partition is
/// chosen, and may send a changed record instead.
///
/// `*out` starts as a copy of `*record`. To change the record, change
/// fields of `*out` (e.g. point `out->value` at a new value) and return 0;
/// the library copies everything `*out` points to as soon as `on_send`
/// returns, so that memory must still be valid then: memory outliving the
/// call (a thread-local buffer reused on each call, data reachable from
/// `user_data`, or parts of `*record` itself), not `on_send`'s own stack.
/// Returning 0 without touching `*out` keeps the record as it is.
///
/// A nonzero return is a failure: the library logs it and skips this
/// interceptor (ignoring `*out`); the record goes on unchanged. An invalid
/// `*out` (NULL topic, bad UTF-8, NULL with a length, ...) is treated the
/// same way.
///
/// Called on the sending thread, during the send call, possibly on several
/// threads at once.
pub type mql_on_send_callback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        record: *const mql_record_view,
        out: *mut mql_record_view,
    ) -> c_int,
>;

/// A producer interceptor (Kafka's `ProducerInterceptor`), for
/// `mql_producer_config_add_interceptor`. Either function may be NULL, not
/// both.
///
/// Threads: `on_send` runs on the sending threads; `on_acknowledgement`
/// runs once per record on whichever thread completes it (the sending
/// thread, the producer's background thread, or one inside a flush, close
/// or free), possibly on several threads at once. Whatever `user_data`
/// points to must be safe to use that way, and stay valid until the config
/// and every producer made from it are freed.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mql_interceptor {
    /// Called before each record is sent (see `mql_on_send_callback`); NULL
    /// for none.
    pub on_send: mql_on_send_callback,
    /// Called once per record when it is done: its metadata, or its error
    /// (see `mql_delivery_callback`); also for records whose send call
    /// failed (a failed `mql_send_batch` reports its error once, not once
    /// per record). NULL for none.
    pub on_acknowledgement: mql_delivery_callback,
    /// Passed to both functions as their first argument.
    pub user_data: *mut c_void,
}

/// Runs `f`, stopping any panic from unwinding further (into the engine's
/// callback machinery, or towards C): a panic yields `fallback`.
pub(crate) fn contained<R>(fallback: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// Calls a C delivery callback with `result`.
pub(crate) fn deliver(
    cb: unsafe extern "C" fn(*mut c_void, *const mql_metadata, mql_status, *const c_char),
    ud: UserData,
    result: Result<&RecordMetadata, &Error>,
) {
    contained((), || match result {
        Ok(md) => {
            let md = mql_metadata::from(md);
            // SAFETY: `cb` is a C function with the mql_delivery_callback
            // contract, given with `ud` by the caller, who promised it may
            // be called from any thread; `md` lives through the call.
            unsafe { cb(ud.get(), &raw const md, mql_status::MQL_OK, ptr::null()) }
        }
        Err(e) => {
            let f = Failure::from(e);
            let text = c_text(f.message);
            // SAFETY: as above; `text` lives through the call.
            unsafe { cb(ud.get(), ptr::null(), f.status, text.as_ptr()) }
        }
    });
}

/// A topic name, NUL-terminated for C: on the stack when short (topic names
/// have at most 249 characters, so almost always).
// A short-lived stack value: the large variant is the point (no allocation).
#[allow(clippy::large_enum_variant)]
enum CTopic {
    Short([u8; 256]),
    Long(CString),
}

impl CTopic {
    fn new(topic: &str) -> CTopic {
        let b = topic.as_bytes();
        if b.len() < 256 && !b.contains(&0) {
            let mut buf = [0u8; 256];
            buf[..b.len()].copy_from_slice(b);
            CTopic::Short(buf)
        } else {
            CTopic::Long(c_text(topic.to_owned()))
        }
    }

    fn as_ptr(&self) -> *const c_char {
        match self {
            CTopic::Short(buf) => buf.as_ptr().cast(),
            CTopic::Long(s) => s.as_ptr(),
        }
    }
}

fn bytes_parts(b: Option<&[u8]>) -> (*const c_void, usize) {
    b.map_or((ptr::null(), 0), |b| (b.as_ptr().cast(), b.len()))
}

/// Calls `f` with a C view of `r`, valid during the call.
fn with_view<R>(r: &BorrowedRecord<'_>, f: impl FnOnce(&mql_record_view) -> R) -> R {
    let topic = CTopic::new(r.topic);
    let headers: Vec<mql_header> = r
        .headers
        .iter()
        .map(|h| mql_header {
            name: h.key.as_ptr().cast(),
            name_len: h.key.len(),
            value: h.value.as_ptr().cast(),
            value_len: h.value.len(),
        })
        .collect();
    let (key, key_len) = bytes_parts(r.key);
    let (value, value_len) = bytes_parts(r.value);
    let view = mql_record {
        topic: topic.as_ptr(),
        partition: r.partition.map_or(MQL_PARTITION_ANY, i64::from),
        key,
        key_len,
        value,
        value_len,
        headers: if headers.is_empty() {
            ptr::null()
        } else {
            headers.as_ptr()
        },
        header_count: headers.len(),
        timestamp: r.timestamp.unwrap_or(MQL_TIMESTAMP_NOW),
        sequence: r.sequence.unwrap_or(-1),
        has_sequence: r.sequence.is_some(),
    };
    f(&view)
}

/// A custom partitioner calling a C selector.
pub(crate) fn selector(
    select: unsafe extern "C" fn(*mut c_void, *const mql_record_view, u32) -> u32,
    ud: UserData,
) -> Partitioner {
    Partitioner::custom(move |r, partitions| {
        // A panic here (none is expected) picks no valid partition: the
        // send fails with MQL_UNKNOWN_PARTITION.
        contained(u32::MAX, || {
            with_view(r, |view| {
                // SAFETY: `select` is a C function with the
                // mql_partition_selector contract, registered with `ud` by
                // the caller, who promised it may be called from any thread;
                // `view` and what it points to live through the call.
                unsafe { select(ud.get(), view, partitions) }
            })
        })
    })
}

/// An interceptor calling C functions.
#[derive(Debug)]
pub(crate) struct CInterceptor {
    on_send: mql_on_send_callback,
    on_ack: mql_delivery_callback,
    user_data: UserData,
}

impl CInterceptor {
    pub(crate) fn new(ic: &mql_interceptor) -> CInterceptor {
        CInterceptor {
            on_send: ic.on_send,
            on_ack: ic.on_acknowledgement,
            user_data: UserData::new(ic.user_data),
        }
    }
}

impl ProducerInterceptor for CInterceptor {
    fn on_send(&self, record: &Record) -> Result<Option<Record>, String> {
        let Some(f) = self.on_send else {
            return Ok(None);
        };
        let ud = self.user_data;
        contained(
            Err("internal error (panic) in the C interceptor glue".into()),
            || {
                with_view(&record.as_borrowed(), |view| {
                    let mut out = *view;
                    // SAFETY: `f` is a C function with the mql_on_send_callback
                    // contract, registered with `ud` by the caller, who promised
                    // it may be called from any thread; `view`, what it points
                    // to, and `out` live through the call.
                    let rc = unsafe { f(ud.get(), view, &raw mut out) };
                    if rc != 0 {
                        return Err(format!("on_send returned {rc}"));
                    }
                    if out == *view {
                        return Ok(None);
                    }
                    // SAFETY: by the mql_on_send_callback contract, what `out`
                    // points to is still valid now, right after on_send
                    // returned (C memory, or `view`'s, alive until with_view
                    // returns); it is copied before anything else runs.
                    let args = unsafe { record_args(&out, &|| "on_send's out->".to_owned()) }
                        .map_err(|e| format!("on_send gave an invalid record: {}", e.message))?;
                    Ok(Some(args.into_record()))
                })
            },
        )
    }

    fn on_acknowledgement(&self, result: Result<&RecordMetadata, &Error>) {
        if let Some(f) = self.on_ack {
            deliver(f, self.user_data, result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn topics_are_nul_terminated_short_or_long() {
        for t in ["t", &"x".repeat(255), &"y".repeat(300), "a\0b"] {
            let c = CTopic::new(t);
            // SAFETY: CTopic always holds a NUL-terminated string.
            let back = unsafe { CStr::from_ptr(c.as_ptr()) }.to_str().unwrap();
            assert_eq!(back, t.replace('\0', "?"));
        }
    }

    #[test]
    fn views_show_every_field() {
        let headers = [mqlite::Header::new("h", "v")];
        let r = BorrowedRecord {
            topic: "orders",
            partition: Some(3),
            key: Some(b""),
            value: None,
            headers: &headers,
            timestamp: Some(5),
            sequence: Some(9),
        };
        with_view(&r, |v| {
            // SAFETY: the view's topic is a NUL-terminated string.
            assert_eq!(unsafe { CStr::from_ptr(v.topic) }.to_bytes(), b"orders");
            assert_eq!(v.partition, 3);
            assert!(!v.key.is_null(), "an empty key is not a missing key");
            assert_eq!(v.key_len, 0);
            assert!(v.value.is_null());
            assert_eq!(v.header_count, 1);
            assert_eq!((v.timestamp, v.sequence, v.has_sequence), (5, 9, true));
        });
        let bare = BorrowedRecord {
            topic: "t",
            ..Default::default()
        };
        with_view(&bare, |v| {
            assert!(v.key.is_null() && v.headers.is_null());
            assert_eq!(v.partition, MQL_PARTITION_ANY);
            assert_eq!(v.timestamp, MQL_TIMESTAMP_NOW);
            assert_eq!((v.sequence, v.has_sequence), (-1, false));
        });
    }

    static CALLS: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn keep(_: *mut c_void, _: *const mql_record, _: *mut mql_record) -> c_int {
        CALLS.fetch_add(1, Ordering::SeqCst);
        0
    }

    unsafe extern "C" fn fail(_: *mut c_void, _: *const mql_record, out: *mut mql_record) -> c_int {
        // SAFETY: the library passes a valid `out`.
        unsafe { (*out).value = c"ignored".as_ptr().cast() };
        -1
    }

    unsafe extern "C" fn replace(
        ud: *mut c_void,
        _: *const mql_record,
        out: *mut mql_record,
    ) -> c_int {
        // SAFETY: the tests pass a static string as user data, and the
        // library a valid `out`.
        unsafe {
            let v = CStr::from_ptr(ud.cast());
            (*out).value = v.as_ptr().cast();
            (*out).value_len = v.to_bytes().len();
            (*out).has_sequence = true;
            (*out).sequence = 4;
        }
        0
    }

    unsafe extern "C" fn no_topic(
        _: *mut c_void,
        _: *const mql_record,
        out: *mut mql_record,
    ) -> c_int {
        // SAFETY: the library passes a valid `out`.
        unsafe { (*out).topic = ptr::null() };
        0
    }

    fn interceptor(f: mql_on_send_callback, ud: *mut c_void) -> CInterceptor {
        CInterceptor::new(&mql_interceptor {
            on_send: f,
            on_acknowledgement: None,
            user_data: ud,
        })
    }

    #[test]
    fn on_send_keeps_replaces_or_fails() {
        let r = Record::new("t").key("k").value("v").header("h", "x");
        assert_eq!(
            interceptor(Some(keep), ptr::null_mut()).on_send(&r),
            Ok(None)
        );
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);
        let e = interceptor(Some(fail), ptr::null_mut())
            .on_send(&r)
            .unwrap_err();
        assert!(e.contains("returned -1"), "{e}");
        let changed = interceptor(Some(replace), c"new value".as_ptr().cast_mut().cast())
            .on_send(&r)
            .unwrap()
            .unwrap();
        assert_eq!(changed, r.clone().value("new value").sequence(4));
        let e = interceptor(Some(no_topic), ptr::null_mut())
            .on_send(&r)
            .unwrap_err();
        assert!(e.contains("out->topic` is NULL"), "{e}");
        assert_eq!(interceptor(None, ptr::null_mut()).on_send(&r), Ok(None));
    }
}
