//! Lists of names (`mql_name_list`): the topics (`mql_topics`), the
//! consumer groups (`mql_groups`) and the damaged pieces (`mql_damaged`) of
//! a data directory.

use std::ffi::{c_char, CString};

use crate::broker::mql_broker;
use crate::error::{guard, guard_value, mql_status, Failure};
use crate::util::{arg, free, into_handle, out};

/// A list of names, sorted, owned by the caller: read it with
/// `mql_name_list_len` and `mql_name_list_get`, release it with
/// `mql_name_list_free`.
pub struct mql_name_list {
    names: Vec<CString>,
}

impl mql_name_list {
    fn new(names: Vec<String>) -> mql_name_list {
        mql_name_list {
            // Topic and group names are checked on creation and never hold
            // a NUL; one that did would be left out rather than cut short.
            names: names
                .into_iter()
                .filter_map(|n| CString::new(n).ok())
                .collect(),
        }
    }
}

/// Writes a new list of `names` to `out`, unless `broker` is closed.
///
/// # Safety
/// `broker` is NULL or a live broker; `out` is NULL or valid for writing a
/// pointer.
unsafe fn list(
    broker: *mut mql_broker,
    out: *mut *mut mql_name_list,
    names: impl FnOnce(&mqlite::Broker) -> Vec<String>,
) -> mql_status {
    guard(|| {
        let b = arg!(ref broker);
        let out = out!(out);
        if b.inner.is_closed() {
            return Err(Failure::from(mqlite::Error::Closed("broker")));
        }
        let list = mql_name_list::new(names(&b.inner));
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(list)) };
        Ok(())
    })
}

/// The names of all topics, sorted, into `*out`.
///
/// Errors: `MQL_CLOSED`.
///
/// Ownership: on `MQL_OK`, `*out` is a new name list owned by the caller;
/// release it with `mql_name_list_free`.
///
/// # Safety
/// `broker` is NULL or a live broker; `out` is NULL or valid for writing a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_topics(
    broker: *mut mql_broker,
    out: *mut *mut mql_name_list,
) -> mql_status {
    // SAFETY: forwarded caller contract.
    unsafe { list(broker, out, mqlite::Broker::topics) }
}

/// The names of the consumer groups, sorted, into `*out` (Kafka's
/// `listConsumerGroups`): those with committed offsets in the data directory
/// (the offsets of broadcast consumers count for their `group_id`), damaged
/// ones included, and those with members in this process. A
/// group that was only described is not listed.
///
/// Errors: `MQL_CLOSED`.
///
/// Ownership: on `MQL_OK`, `*out` is a new name list owned by the caller;
/// release it with `mql_name_list_free`.
///
/// # Safety
/// `broker` is NULL or a live broker; `out` is NULL or valid for writing a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_groups(
    broker: *mut mql_broker,
    out: *mut *mut mql_name_list,
) -> mql_status {
    // SAFETY: forwarded caller contract.
    unsafe { list(broker, out, mqlite::Broker::groups) }
}

/// What could not be opened because its files are damaged, sorted, into
/// `*out`, one entry per damaged piece as `<kind>:<name>`: `topic:<name>`
/// and `group:<name>` (each use of them fails with `MQL_CORRUPT` or
/// `MQL_UNSUPPORTED_VERSION`, `mql_last_error` naming the file), and
/// `producers:registry` (the producer registry: idempotent producers are
/// refused). The rest of the directory works; `mql_topic_delete` removes a
/// damaged topic. Empty for a healthy directory.
///
/// Errors: `MQL_CLOSED`.
///
/// Ownership: on `MQL_OK`, `*out` is a new name list owned by the caller;
/// release it with `mql_name_list_free`.
///
/// # Safety
/// `broker` is NULL or a live broker; `out` is NULL or valid for writing a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_damaged(
    broker: *mut mql_broker,
    out: *mut *mut mql_name_list,
) -> mql_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        list(broker, out, |b| {
            b.damaged()
                .into_iter()
                .map(|(kind, name, _)| format!("{kind}:{name}"))
                .collect()
        })
    }
}

/// Number of names in `list`; 0 if `list` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `list` is NULL or a live name list.
#[no_mangle]
pub unsafe extern "C" fn mql_name_list_len(list: *const mql_name_list) -> usize {
    guard_value(0, || {
        let l = arg!(ref list else 0);
        l.names.len()
    })
}

/// Name `index` of `list` (0 is the first), NUL-terminated UTF-8; NULL if
/// `list` is NULL or `index` is not below `mql_name_list_len`.
///
/// Ownership: borrowed from the list, valid until `mql_name_list_free`.
///
/// # Safety
/// `list` is NULL or a live name list.
#[no_mangle]
pub unsafe extern "C" fn mql_name_list_get(
    list: *const mql_name_list,
    index: usize,
) -> *const c_char {
    guard_value(std::ptr::null(), || {
        let l = arg!(ref list else std::ptr::null());
        l.names.get(index).map_or(std::ptr::null(), |n| n.as_ptr())
    })
}

/// Releases a name list. NULL does nothing.
///
/// Ownership: takes back the list the caller owned; every string
/// `mql_name_list_get` returned dies with it.
///
/// # Safety
/// `list` is NULL or a live name list from `mql_topics`, `mql_groups` or
/// `mql_damaged`, not used again.
#[no_mangle]
pub unsafe extern "C" fn mql_name_list_free(list: *mut mql_name_list) {
    free!(list);
}
