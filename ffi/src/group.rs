//! Consumer groups: rebalance callbacks, commits and committed offsets, lag,
//! member ids and group descriptions. See `consumer.rs` for how calls from
//! a rebalance callback reach the consumer.

use std::ffi::{c_char, c_void, CString};
use std::ptr::{self, NonNull};

use mqlite::{GroupInfo, RebalanceContext, RebalanceListener};

use crate::broker::mql_broker;
use crate::callback::{contained, UserData};
use crate::consumer::{mql_consumer, mql_topic_partition};
use crate::error::{c_text, guard, guard_value, mql_status, Failure, FfiResult};
use crate::producer::MQL_OFFSET_UNKNOWN;
use crate::util::{arg_ref, arg_slice, arg_str, free_handle, into_handle, opt_str, Out, TextOut};

/// What happened to the partitions a rebalance callback is told about.
///
/// cbindgen:prefix-with-name=false
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mql_rebalance_event {
    /// The consumer now owns the partitions; their positions start at the
    /// group's committed offsets (else the reset policy applies).
    MQL_REBALANCE_ASSIGN = 1,
    /// The consumer is about to give the partitions up: they go to another
    /// member once the callback returns. Commit here (`mql_commit`) to
    /// hand over exactly what was processed.
    MQL_REBALANCE_REVOKE = 2,
    /// The consumer has already lost the partitions (Kafka's
    /// `onPartitionsLost`): it was removed from the group for not polling
    /// within `max_poll_interval_ms`, and another member may own them now.
    /// Nothing can be committed for them any more: they are no longer
    /// assigned (`mql_commit` has nothing to commit), `mql_commit_offsets`
    /// for them fails with `MQL_COMMIT_FAILED`, and no auto-commit runs;
    /// drop the state kept for them. The consumer then joins the group again. A callback that
    /// does not tell the two apart can treat this like a revoke.
    MQL_REBALANCE_LOST = 3,
}

/// A rebalance callback (Kafka's `ConsumerRebalanceListener`): `event` says
/// whether `consumer` now owns the `n` partitions of `partitions`
/// (`MQL_REBALANCE_ASSIGN`), is about to give them up
/// (`MQL_REBALANCE_REVOKE`) or has lost them already, having been removed
/// from the group (`MQL_REBALANCE_LOST`). A member that gives partitions up is always
/// told (revoke) before the member that gets them (assign).
///
/// Runs on the consumer's own thread, inside `mql_poll`, `mql_subscribe*`,
/// `mql_assign`, `mql_unsubscribe`, `mql_consumer_close` or
/// `mql_consumer_free` on that consumer. It may call on `consumer`:
/// `mql_commit`, `mql_commit_async`, `mql_commit_offsets`,
/// `mql_committed`, `mql_position`, `mql_seek*`, `mql_offsets_for_times`,
/// `mql_assignment`, `mql_lag`, `mql_pause`, `mql_resume`, `mql_paused`,
/// `mql_store_offsets`, `mql_consumer_get_stats`,
/// `mql_consumer_member_id`, `mql_consumer_waker` and
/// `mql_consumer_set_rebalance_callback`; the
/// other consumer functions fail there with `MQL_INVALID_ARGUMENT`
/// (`mql_consumer_free` does nothing). `partitions` and the topic strings
/// are valid during the call (the strings until the consumer is freed).
///
/// With auto-commit on, the engine commits the positions of revoked
/// partitions (what `mql_commit` would commit) just before the revoke
/// callback runs: offsets the callback commits with `mql_commit_offsets`
/// are the last word.
pub type mql_rebalance_callback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        consumer: *mut mql_consumer,
        event: mql_rebalance_event,
        partitions: *const mql_topic_partition,
        n: usize,
    ),
>;

/// A C rebalance callback with its user data.
#[derive(Clone, Copy)]
pub(crate) struct RebalanceCallback {
    f: unsafe extern "C" fn(
        *mut c_void,
        *mut mql_consumer,
        mql_rebalance_event,
        *const mql_topic_partition,
        usize,
    ),
    user_data: UserData,
}

/// The engine's rebalance listener of every subscription made through C: it
/// calls the handle's current C callback, if any, lending it the consumer.
pub(crate) struct CListener {
    handle: NonNull<mql_consumer>,
}

// SAFETY: the listener dereferences `handle` only in on_assign/on_revoke,
// which the engine runs inside a call on the consumer, on the thread making
// that call; the handle is used by one thread at a time (documented
// contract) and outlives the listener (the handle owns the consumer that
// owns the listener). Moving the pointer value between threads is harmless.
unsafe impl Send for CListener {}

impl CListener {
    pub(crate) fn new(handle: NonNull<mql_consumer>) -> CListener {
        CListener { handle }
    }

    fn run(
        &mut self,
        ctx: &mut RebalanceContext<'_>,
        event: mql_rebalance_event,
        parts: &[(String, u32)],
    ) {
        // SAFETY: the handle is alive (it owns this listener, see the Send
        // impl) and only shared access is made: the outer call holds the
        // handle's state through its UnsafeCell, which this does not touch.
        let h = unsafe { self.handle.as_ref() };
        let Some(cb) = h.rebalance.get() else {
            return;
        };
        let list: Vec<mql_topic_partition> = parts
            .iter()
            .map(|(t, p)| mql_topic_partition {
                topic: h.name_ptr(t),
                partition: *p,
            })
            .collect();
        let _lent = h.lend(ctx);
        contained((), || {
            // SAFETY: `cb.f` is a C function with the
            // mql_rebalance_callback contract, registered with its user
            // data by the caller; it runs on the consumer's thread; `list`
            // and the names it points to outlive the call; the handle
            // pointer is the caller's own.
            unsafe {
                (cb.f)(
                    cb.user_data.get(),
                    self.handle.as_ptr(),
                    event,
                    list.as_ptr(),
                    list.len(),
                );
            }
        });
    }
}

impl RebalanceListener for CListener {
    fn on_assign(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.run(ctx, mql_rebalance_event::MQL_REBALANCE_ASSIGN, partitions);
    }

    fn on_revoke(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.run(ctx, mql_rebalance_event::MQL_REBALANCE_REVOKE, partitions);
    }

    fn on_lost(&mut self, ctx: &mut RebalanceContext<'_>, partitions: &[(String, u32)]) {
        self.run(ctx, mql_rebalance_event::MQL_REBALANCE_LOST, partitions);
    }
}

/// Sets the consumer's rebalance callback (see `mql_rebalance_callback`),
/// replacing the one set before; NULL `callback` removes it. Takes effect
/// at once, also for a subscription made earlier. Only group members
/// (`mql_subscribe*` with a group id, not in broadcast mode) have
/// rebalances; setting one on a closed consumer is allowed and harmless.
///
/// Threads and lifetime: the callback runs on the consumer's own thread;
/// `user_data` must stay valid until the callback is replaced or the
/// consumer is freed.
///
/// Ownership: borrows `consumer` for the call; `user_data` stays the
/// caller's.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `callback` is NULL or a function
/// with the `mql_rebalance_callback` contract.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_set_rebalance_callback(
    consumer: *mut mql_consumer,
    callback: mql_rebalance_callback,
    user_data: *mut c_void,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        h.rebalance.set(callback.map(|f| RebalanceCallback {
            f,
            user_data: UserData::new(user_data),
        }));
        Ok(())
    })
}

/// A committed offset of a partition: the next offset the group reads
/// there (the last processed plus one), with optional metadata.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mql_committed_offset {
    /// The topic, NUL-terminated.
    pub topic: *const c_char,
    /// The partition.
    pub partition: u32,
    /// The next offset to read.
    pub offset: u64,
    /// Free-form text stored with the offset, NUL-terminated UTF-8; NULL
    /// for none (in results: never NULL, maybe empty).
    pub metadata: *const c_char,
    /// When it was committed (ms since the Unix epoch). Set in results;
    /// ignored by `mql_commit_offsets` (the commit time is used).
    pub timestamp: i64,
}

/// Commits, for every partition the consumer reads, the offset after the
/// last message `mql_poll` handed out (messages fetched from the engine but
/// not handed out yet are not committed). Returns once the offsets are on
/// disk (they survive a crash and power loss). Allowed from a rebalance
/// callback (in a revoke: the partitions are still owned then).
///
/// Errors: `MQL_INVALID_ARGUMENT` (the consumer has no group id),
/// `MQL_COMMIT_FAILED` (a rebalance took a partition away; nothing was
/// committed), `MQL_CLOSED`, I/O errors.
///
/// Ownership: borrows `consumer` for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer.
#[no_mangle]
pub unsafe extern "C" fn mql_commit(consumer: *mut mql_consumer) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        h.any("mql_commit", |mut a| Ok(a.commit()?))
    })
}

/// A commit report (`mql_commit_async`): `status` is the commit's outcome,
/// `MQL_OK` with `error_message` NULL, or the failure's status with its
/// text (NUL-terminated, valid during the call only). `user_data` is the
/// pointer given with the callback.
///
/// Runs on the thread that called `mql_commit_async`, before it returns,
/// and may call functions on the consumer (those a rebalance callback may
/// call, when `mql_commit_async` was itself called from one).
pub type mql_commit_callback = Option<
    unsafe extern "C" fn(user_data: *mut c_void, status: mql_status, error_message: *const c_char),
>;

/// Commits like `mql_commit`, then reports the outcome to `callback` with
/// `user_data` (Kafka's `commitAsync` with a callback): the callback runs
/// exactly once, with the status this function then returns, once the
/// offsets are on disk (or the commit failed). The commit itself is made
/// in place: an in-process commit is one local write and sync, with no
/// round trip to overlap. Allowed from a rebalance callback.
///
/// Errors (returned and reported): as `mql_commit`. `MQL_NULL_ARGUMENT`
/// for a NULL `consumer` or `callback` is only returned (the callback is
/// not called; use `mql_commit` without a callback).
///
/// Ownership: borrows `consumer` for the call; `user_data` stays the
/// caller's and is not used after the call returns.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `callback` is NULL or a function
/// with the `mql_commit_callback` contract.
#[no_mangle]
pub unsafe extern "C" fn mql_commit_async(
    consumer: *mut mql_consumer,
    callback: mql_commit_callback,
    user_data: *mut c_void,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        let cb = callback.ok_or_else(|| Failure::null("callback"))?;
        // The consumer's state is released before the callback runs, so
        // that the callback may call functions on the consumer.
        let result = h.any("mql_commit_async", |mut a| Ok(a.commit()?));
        let (status, text) = match &result {
            Ok(()) => (mql_status::MQL_OK, None),
            Err(f) => (f.status, Some(c_text(f.message.clone()))),
        };
        contained((), || {
            // SAFETY: `cb` is a C function with the mql_commit_callback
            // contract, given with `user_data` by the caller; it runs on the
            // caller's thread during the call; `text` outlives the call.
            unsafe {
                cb(
                    user_data,
                    status,
                    text.as_ref().map_or(ptr::null(), |t| t.as_ptr()),
                );
            }
        });
        result
    })
}

/// Commits the `n` given offsets (all or nothing): each entry's `offset` is
/// the next offset to read in its partition (the last processed plus one),
/// stored with its `metadata` (NULL for none). With `n` 0 nothing is
/// committed (`offsets` may then be NULL). Returns once they are on disk.
/// Allowed from a rebalance callback.
///
/// Errors: `MQL_INVALID_ARGUMENT` (no group id), `MQL_COMMIT_FAILED` (a
/// group member committing a partition it does not own; nothing was
/// committed), `MQL_UNKNOWN_TOPIC`, `MQL_UNKNOWN_PARTITION`,
/// `MQL_CLOSED`, `MQL_NULL_ARGUMENT` (also for a NULL topic), I/O errors.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `offsets` is NULL or points to
/// `n` entries whose strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn mql_commit_offsets(
    consumer: *mut mql_consumer,
    offsets: *const mql_committed_offset,
    n: usize,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let raw = unsafe { arg_slice(offsets, n, "offsets") }?;
        let mut list = Vec::with_capacity(raw.len());
        for (i, e) in raw.iter().enumerate() {
            // SAFETY: as above.
            let topic = unsafe { arg_str(e.topic, &format!("offsets[{i}].topic")) }?;
            // SAFETY: as above.
            let meta = unsafe { opt_str(e.metadata, &format!("offsets[{i}].metadata")) }?;
            list.push((topic, e.partition, e.offset, meta.unwrap_or("")));
        }
        h.any("mql_commit_offsets", |mut a| Ok(a.commit_offsets(&list)?))
    })
}

/// The group's committed offset of a partition (any partition, owned by
/// this consumer or not): the offset into `*offset`, `MQL_OFFSET_UNKNOWN`
/// when nothing is committed. Its metadata is copied into `metadata`
/// (`metadata_len` bytes, like `snprintf`: cut short to `metadata_len - 1`
/// bytes and always NUL-terminated when `metadata_len` > 0; `metadata` may
/// be NULL when `metadata_len` is 0), and its full length in bytes, without
/// the NUL, into `*metadata_len_out` (when not NULL): the text was cut
/// short when that is at least `metadata_len`. No commit gives an empty
/// metadata. Allowed from a rebalance callback.
///
/// Errors: `MQL_INVALID_ARGUMENT` (no group id), `MQL_CLOSED`; nothing is
/// written then.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `topic` is NULL or a
/// NUL-terminated string; `offset` is NULL or valid for writing a
/// `uint64_t`; `metadata` is NULL or valid for writing `metadata_len`
/// bytes; `metadata_len_out` is NULL or valid for writing a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_committed(
    consumer: *mut mql_consumer,
    topic: *const c_char,
    partition: u32,
    offset: *mut u64,
    metadata: *mut c_char,
    metadata_len: usize,
    metadata_len_out: *mut usize,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for both).
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        let offset = Out::new(offset, "offset")?;
        let text = TextOut::new(metadata, metadata_len, metadata_len_out, "metadata")?;
        let c = h.any("mql_committed", |mut a| Ok(a.committed(topic, partition)?))?;
        let (o, meta) = c.map_or((MQL_OFFSET_UNKNOWN, String::new()), |c| {
            (c.offset, c.metadata)
        });
        // SAFETY: all are valid for writes by the caller's contract.
        unsafe {
            offset.write(o);
            text.write(meta.as_bytes());
        }
        Ok(())
    })
}

/// How far the consumer is behind in an assigned partition, into `*out`:
/// the partition's end offset minus the group's committed offset, or minus
/// the consumer's position (`mql_position`) when nothing is committed (or
/// the consumer has no group id). Allowed from a rebalance callback.
///
/// Errors: `MQL_INVALID_ARGUMENT` (the partition is not assigned),
/// `MQL_CLOSED`.
///
/// Ownership: borrows every argument for the call; the result is a plain
/// value; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `topic` is NULL or a
/// NUL-terminated string; `out` is NULL or valid for writing a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_lag(
    consumer: *mut mql_consumer,
    topic: *const c_char,
    partition: u32,
    out: *mut u64,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all three).
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        // SAFETY: as above.
        let topic = unsafe { arg_str(topic, "topic") }?;
        let out = Out::new(out, "out")?;
        let lag = h.any("mql_lag", |mut a| {
            a.lag()?
                .into_iter()
                .find(|(t, p, _)| t == topic && *p == partition)
                .map(|(_, _, lag)| lag)
                .ok_or_else(|| {
                    Failure::invalid(format!(
                        "partition {topic}/{partition} is not assigned to this consumer"
                    ))
                })
        })?;
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(lag) };
        Ok(())
    })
}

/// The consumer's member id in its group (`<client_id>-<number>`), copied
/// into `buf` like `mql_committed` copies metadata (`buf` may be NULL when
/// `buf_len` is 0; `*len_out`, when not NULL, gets the full length). Empty
/// when the consumer is not a group member (no group id, broadcast mode,
/// not subscribed, manual assignment, or closed). Allowed from a
/// rebalance callback.
///
/// Ownership: borrows every argument for the call; nothing to free.
///
/// # Safety
/// `consumer` is NULL or a live consumer; `buf` is NULL or valid for
/// writing `buf_len` bytes; `len_out` is NULL or valid for writing a
/// `size_t`.
#[no_mangle]
pub unsafe extern "C" fn mql_consumer_member_id(
    consumer: *mut mql_consumer,
    buf: *mut c_char,
    buf_len: usize,
    len_out: *mut usize,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let h = unsafe { arg_ref(consumer, "consumer") }?;
        let text = TextOut::new(buf, buf_len, len_out, "buf")?;
        let id = h.any("mql_consumer_member_id", |mut a| Ok(a.member_id()))?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe { text.write(id.as_bytes()) };
        Ok(())
    })
}

/// A snapshot of a consumer group (`mql_describe_group`): its members in
/// this process, what each owns, and the group's committed offsets. Read
/// it with the `mql_group_info_*` accessors; release it with
/// `mql_group_info_free`. Every string it returns stays valid until then.
/// Immutable: safe to read from several threads at once.
pub struct mql_group_info {
    name: CString,
    generation: u64,
    members: Vec<GroupMemberInfo>,
    committed: Vec<CommittedInfo>,
}

struct GroupMemberInfo {
    id: CString,
    partitions: Vec<(CString, u32)>,
}

struct CommittedInfo {
    topic: CString,
    partition: u32,
    offset: u64,
    metadata: CString,
    timestamp: i64,
}

impl From<GroupInfo> for mql_group_info {
    fn from(g: GroupInfo) -> Self {
        mql_group_info {
            name: c_text(g.name),
            generation: g.generation,
            members: g
                .members
                .into_iter()
                .map(|m| GroupMemberInfo {
                    id: c_text(m.id),
                    partitions: m
                        .partitions
                        .into_iter()
                        .map(|(t, p)| (c_text(t), p))
                        .collect(),
                })
                .collect(),
            committed: g
                .committed
                .into_iter()
                .map(|(t, p, c)| CommittedInfo {
                    topic: c_text(t),
                    partition: p,
                    offset: c.offset,
                    metadata: c_text(c.metadata),
                    timestamp: c.timestamp,
                })
                .collect(),
        }
    }
}

/// Describes consumer group `group`: its members in this process (ordered
/// by id; broadcast consumers are not members), the partitions each owns
/// now, and the group's committed offsets (for a broadcast consumer's own
/// offsets, describe `<group_id>+<client_id>`). A group nobody used is
/// empty.
///
/// Errors: `MQL_INVALID_ARGUMENT` (a name breaking the naming rules),
/// `MQL_CLOSED`, I/O errors (reading its committed offsets).
///
/// Ownership: on `MQL_OK`, `*out` is a new group info owned by the caller;
/// release it with `mql_group_info_free`.
///
/// # Safety
/// `broker` is NULL or a live broker; `group` is NULL or a NUL-terminated
/// string; `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn mql_describe_group(
    broker: *mut mql_broker,
    group: *const c_char,
    out: *mut *mut mql_group_info,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract (for all three).
        let b = unsafe { arg_ref(broker, "broker") }?;
        // SAFETY: as above.
        let group = unsafe { arg_str(group, "group") }?;
        let out = Out::new(out, "out")?;
        let info = mql_group_info::from(b.inner.describe_group(group)?);
        // SAFETY: `out` is valid for writes by the caller's contract.
        unsafe { out.write(into_handle(info)) };
        Ok(())
    })
}

/// Releases a group info. NULL does nothing.
///
/// Ownership: takes back the group info the caller owned; every string its
/// accessors returned dies with it.
///
/// # Safety
/// `info` is NULL or a live group info from `mql_describe_group`, not used
/// again.
#[no_mangle]
pub unsafe extern "C" fn mql_group_info_free(info: *mut mql_group_info) {
    // SAFETY: forwarded caller contract.
    guard_value((), || unsafe { free_handle(info) });
}

/// The group's name; NULL if `info` is NULL.
///
/// Ownership: owned by the group info, valid until `mql_group_info_free`.
///
/// # Safety
/// `info` is NULL or a live group info.
#[no_mangle]
pub unsafe extern "C" fn mql_group_info_name(info: *const mql_group_info) -> *const c_char {
    guard_value(ptr::null(), || {
        // SAFETY: forwarded caller contract.
        unsafe { arg_ref(info, "info") }.map_or(ptr::null(), |g| g.name.as_ptr())
    })
}

/// The group's generation: incremented at every rebalance in this process;
/// 0 if `info` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `info` is NULL or a live group info.
#[no_mangle]
pub unsafe extern "C" fn mql_group_info_generation(info: *const mql_group_info) -> u64 {
    guard_value(0, || {
        // SAFETY: forwarded caller contract.
        unsafe { arg_ref(info, "info") }.map_or(0, |g| g.generation)
    })
}

/// Number of members; 0 if `info` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `info` is NULL or a live group info.
#[no_mangle]
pub unsafe extern "C" fn mql_group_info_member_count(info: *const mql_group_info) -> usize {
    guard_value(0, || {
        // SAFETY: forwarded caller contract.
        unsafe { arg_ref(info, "info") }.map_or(0, |g| g.members.len())
    })
}

/// Member `index` (0-based, ordered by id): its id into `*id` and the
/// number of partitions it owns into `*partition_count`.
///
/// Errors: `MQL_INVALID_ARGUMENT` when `index` is not below
/// `mql_group_info_member_count`.
///
/// Ownership: the id is owned by the group info, valid until
/// `mql_group_info_free`.
///
/// # Safety
/// `info` is NULL or a live group info; `id` and `partition_count` are NULL
/// or valid for writes of their types.
#[no_mangle]
pub unsafe extern "C" fn mql_group_info_member(
    info: *const mql_group_info,
    index: usize,
    id: *mut *const c_char,
    partition_count: *mut usize,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let g = unsafe { arg_ref(info, "info") }?;
        let id = Out::new(id, "id")?;
        let count = Out::new(partition_count, "partition_count")?;
        let m = member(g, index)?;
        // SAFETY: both are valid for writes by the caller's contract.
        unsafe {
            id.write(m.id.as_ptr());
            count.write(m.partitions.len());
        }
        Ok(())
    })
}

fn member(g: &mql_group_info, index: usize) -> FfiResult<&GroupMemberInfo> {
    g.members.get(index).ok_or_else(|| {
        Failure::invalid(format!(
            "member index {index} is out of range (the group has {})",
            g.members.len()
        ))
    })
}

/// Partition `index` (0-based, ordered by topic then partition) of those
/// member `member` owns, into `*out`.
///
/// Errors: `MQL_INVALID_ARGUMENT` when an index is out of range.
///
/// Ownership: the topic string is owned by the group info, valid until
/// `mql_group_info_free`.
///
/// # Safety
/// `info` is NULL or a live group info; `out` is NULL or valid for writing
/// an `mql_topic_partition`.
#[no_mangle]
pub unsafe extern "C" fn mql_group_info_member_partition(
    info: *const mql_group_info,
    member_index: usize,
    index: usize,
    out: *mut mql_topic_partition,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let g = unsafe { arg_ref(info, "info") }?;
        let out = Out::new(out, "out")?;
        let m = member(g, member_index)?;
        let (t, p) = m.partitions.get(index).ok_or_else(|| {
            Failure::invalid(format!(
                "partition index {index} is out of range (member {member_index} owns {})",
                m.partitions.len()
            ))
        })?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe {
            out.write(mql_topic_partition {
                topic: t.as_ptr(),
                partition: *p,
            });
        };
        Ok(())
    })
}

/// Number of committed offsets of the group; 0 if `info` is NULL.
///
/// Ownership: returns a plain value; nothing to free.
///
/// # Safety
/// `info` is NULL or a live group info.
#[no_mangle]
pub unsafe extern "C" fn mql_group_info_committed_count(info: *const mql_group_info) -> usize {
    guard_value(0, || {
        // SAFETY: forwarded caller contract.
        unsafe { arg_ref(info, "info") }.map_or(0, |g| g.committed.len())
    })
}

/// Committed offset `index` (0-based, ordered by topic then partition) into
/// `*out`, with its metadata and commit time.
///
/// Errors: `MQL_INVALID_ARGUMENT` when `index` is not below
/// `mql_group_info_committed_count`.
///
/// Ownership: the strings in `*out` are owned by the group info, valid
/// until `mql_group_info_free`.
///
/// # Safety
/// `info` is NULL or a live group info; `out` is NULL or valid for writing
/// an `mql_committed_offset`.
#[no_mangle]
pub unsafe extern "C" fn mql_group_info_committed(
    info: *const mql_group_info,
    index: usize,
    out: *mut mql_committed_offset,
) -> mql_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let g = unsafe { arg_ref(info, "info") }?;
        let out = Out::new(out, "out")?;
        let c = g.committed.get(index).ok_or_else(|| {
            Failure::invalid(format!(
                "committed index {index} is out of range (the group has {})",
                g.committed.len()
            ))
        })?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe {
            out.write(mql_committed_offset {
                topic: c.topic.as_ptr(),
                partition: c.partition,
                offset: c.offset,
                metadata: c.metadata.as_ptr(),
                timestamp: c.timestamp,
            });
        };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_values_are_stable() {
        assert_eq!(mql_rebalance_event::MQL_REBALANCE_ASSIGN as i32, 1);
        assert_eq!(mql_rebalance_event::MQL_REBALANCE_REVOKE as i32, 2);
        assert_eq!(mql_status::MQL_COMMIT_FAILED as i32, 500);
    }
}
