//! C ABI over the mqlite engine: `libmqlite.so` / `libmqlite.a` and the
//! header `include/mqlite.h` (generated from this crate by a pinned cbindgen,
//! see `tests/header.rs`).
//!
//! # API conventions (for C users)
//!
//! - **Status codes.** Every fallible function returns an [`mql_status`].
//!   `MQL_OK` is 0; every other value is the stable numeric code of the
//!   engine's error kind (the same numbers in Rust, C and Python), plus three
//!   codes of the C layer itself: `MQL_NULL_ARGUMENT`, `MQL_INVALID_UTF8`,
//!   `MQL_PANIC`.
//! - **Out-parameters.** Results go to trailing pointer parameters, written
//!   only when the function returns `MQL_OK`; on failure they are untouched.
//! - **Error text** is kept per thread: after a failing call,
//!   `mql_last_error()` describes it and `mql_last_error_code()` returns its
//!   status. Successful calls leave both alone (like `errno`). The text stays
//!   valid until the next failing call on the same thread (or the thread's
//!   exit); never free it.
//!   `mql_last_error_copy()` copies the text into a caller's buffer of any
//!   size, like `snprintf` (cut short safely, returning the full length):
//!   texts have no fixed limit, as they quote the names and paths they are
//!   about.
//! - **Handles** are opaque pointers. Each kind is released by its own
//!   `_free` function (a broker by `mql_close`); passing NULL to a `_free`
//!   function does nothing.
//! - **Closing versus freeing.** Closing may be repeated and is checked:
//!   `mql_producer_close` and `mql_consumer_close` may be called again, and
//!   calls on a closed handle (or on handles whose broker was closed with
//!   `mql_close`) fail with `MQL_CLOSED`, except those the doc comments name
//!   (statistics, ids, closing again). Freeing is not checked: using a
//!   handle, or any pointer its accessors returned, after its `_free` (or a
//!   broker after `mql_close`), and freeing it twice, are undefined
//!   behaviour, which the library cannot detect (the memory may already
//!   belong to something else). Wakers and stoppers, and messages and group
//!   infos, may outlive the handles they came from.
//! - **NULL and strings.** A NULL pointer where one is required gives
//!   `MQL_NULL_ARGUMENT` (the doc comment says where NULL is allowed and what
//!   it means). Strings are NUL-terminated UTF-8 (`MQL_INVALID_UTF8`
//!   otherwise); data buffers are a pointer followed by a `size_t` length.
//! - **Threads.** A broker and a producer may be used from several threads
//!   at once, and so may a message, a share message or a group info (they
//!   are immutable) and a consumer's waker (`mql_waker_wakeup` is how
//!   another thread ends a blocked `mql_poll`) and a processor's stopper
//!   (`mql_stopper_stop`). A consumer, a share consumer and a processor may
//!   be used from one thread at a time (they may move between threads); a consumer lent to a processor
//!   (`mql_processor_new` to `mql_processor_free`) refuses calls. Config objects are plain values: do not
//!   change one while another thread uses it.
//! - **Callbacks** (delivery reports of `mql_produce`, partition selectors,
//!   interceptors) are plain C function pointers with a `void *user_data`
//!   the library hands back. They may run on another thread than the one
//!   that registered them or sent the record (the producer's background
//!   thread, a thread in a flush), some on several threads at once: the
//!   caller makes `user_data` safe for that and keeps it alive as long as
//!   the doc comment says. Pointers a callback receives are valid during
//!   the call only. No callback may free the producer that runs it.
//!   A consumer's rebalance callback is the exception: it runs on the
//!   consumer's own thread, inside a call on that consumer, and may call a
//!   documented subset of the consumer functions on it (`mql_commit` among
//!   them; see `mql_rebalance_callback`). A processor's message handler
//!   (`mql_message_handler`) runs on its worker threads, several at once.
//! - **Logging.** The engine's warnings (recovery cut a damaged log, a
//!   committed offset was reset, background work failed) go to the callback
//!   of `mql_set_log_callback`, one setting for the process, at the level of
//!   `mql_set_log_level` (default `MQL_LOG_WARN`). It runs on the thread
//!   that logged, background threads included, and must not call the
//!   library (see `mql_log_callback`).
//! - **Commits** count exactly the messages `mql_poll` handed out: the
//!   consumer fetches batches from the engine and hands them out one by
//!   one, but messages fetched and not handed out yet are never committed,
//!   by `mql_commit` or automatically.
//! - **Panics** never cross into C: an internal panic is reported as
//!   `MQL_PANIC`. Free the handle involved; it may be in a bad state.
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// The type names are the C API's (`mql_broker`, `mql_status`, ...).
#![allow(non_camel_case_types)]
#![warn(clippy::undocumented_unsafe_blocks)]

// The header lists items in this order (rustfmt keeps separated groups).
mod error;

mod config;

mod broker;

mod topic;

mod producer;

mod callback;

mod consumer;

mod group;

mod flow;

mod processor;

mod share_consumer;

mod message;

mod names;

mod log;

mod util;

// Transactions.
mod transaction;

// Copies between a directory and a Kafka cluster.
mod mirror;

pub use crate::log::*;
pub use broker::*;
pub use callback::*;
pub use config::*;
pub use consumer::*;
pub use error::*;
pub use flow::*;
pub use group::*;
pub use message::*;
pub use mirror::*;
pub use names::*;
pub use processor::*;
pub use producer::*;
pub use share_consumer::*;
pub use topic::*;
pub use transaction::*;

use std::ffi::{c_char, CStr};

/// The library's version, a static NUL-terminated string such as `"0.1.0"`
/// (the same as `MQLITE_VERSION` in the header the program was compiled
/// with, unless it links a different library).
///
/// Ownership: static storage, owned by the library; never free it.
#[no_mangle]
pub extern "C" fn mql_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => panic!("the package version contains a NUL byte"),
        };
    error::guard_value(VERSION.as_ptr(), || VERSION.as_ptr())
}

/// The library's version as one integer, `major * 1000000 + minor * 1000 +
/// patch` (1000 for 0.1.0): the same as `MQLITE_VERSION_NUMBER` in the
/// header the program was compiled with, unless it links a different
/// library. Compare it with `MQLITE_VERSION_NUMBER` to check at run time
/// that the library is at least as new as the header.
#[no_mangle]
pub extern "C" fn mql_version_number() -> i32 {
    const NUMBER: i32 = version_number(
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH"),
    );
    error::guard_value(NUMBER, || NUMBER)
}

/// `major * 1000000 + minor * 1000 + patch` from the decimal version parts,
/// at compile time (a part that is not a number below 1000 fails the build).
const fn version_number(major: &str, minor: &str, patch: &str) -> i32 {
    const fn part(s: &str) -> i32 {
        let b = s.as_bytes();
        assert!(
            !b.is_empty() && b.len() <= 3,
            "a version part is 1-3 digits"
        );
        let mut n = 0;
        let mut i = 0;
        while i < b.len() {
            assert!(b[i].is_ascii_digit(), "a version part is decimal");
            n = n * 10 + (b[i] - b'0') as i32;
            i += 1;
        }
        n
    }
    part(major) * 1_000_000 + part(minor) * 1_000 + part(patch)
}

/// Compile-time backing for the thread rules in the crate docs: brokers,
/// producers and messages may be shared between threads; consumers may be
/// moved between them.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    const fn movable<T: Send>() {}
    shared::<mqlite::Broker>();
    shared::<mqlite::Producer>();
    shared::<mqlite::Message>();
    movable::<mqlite::Consumer>();
    shared::<mql_broker>();
    shared::<mql_producer>();
    shared::<mql_message>();
    shared::<mql_waker>();
    shared::<mql_group_info>();
    movable::<mql_consumer>();
    movable::<mqlite::Processor>();
    movable::<mql_processor>();
    shared::<mqlite::ProcessorStop>();
    movable::<mqlite::ShareConsumer>();
    shared::<mqlite::ShareMessage>();
    movable::<mql_share_consumer>();
    shared::<mql_share_message>();
    shared::<mql_stopper>();
};
