//! Python module over the mqlite engine: `mqlite._mqlite`, re-exported by the
//! pure-Python package `mqlite` (python/mqlite/).
//!
//! Calls that only touch memory (non-blocking sends, polls that find data)
//! keep the GIL: releasing it per call costs more than the call when another
//! Python thread is busy. Calls that wait (polls with a timeout, `acks="all"`
//! sends, flushes, opening and closing, topic changes) release it.
//!
//! The engine's threads never call Python: delivery reports and interceptor
//! acknowledgements are queued and run by Python threads (`callback.rs`),
//! and the engine's log records are queued for Python's `logging`, logger
//! `mqlite` (`log.rs`).
//!
//! Objects belong to the process that made them: in a child forked with
//! `os.fork()` they raise `mqlite.Closed` (`fork.rs`).
//!
//! `unsafe` is denied everywhere but in one place: lending the engine's
//! rebalance context to the calls a Python callback makes on its consumer
//! (`consumer/rebalance.rs`).
#![deny(unsafe_code)]

mod broker;
mod callback;
mod consumer;
mod data;
mod error;
mod fork;
mod info;
mod log;
mod message_id;
mod mirror;
mod processor;
mod producer;
mod share_consumer;
// Transactions.
mod transaction;
mod util;

use pyo3::prelude::*;

/// mqlite: an embeddable, in-process, persistent message-queue engine.
#[pymodule]
fn _mqlite(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MAX_TOPIC_NAME_LEN", mqlite::MAX_TOPIC_NAME_LEN)?;
    m.add_class::<broker::Broker>()?;
    m.add_class::<info::TopicInfo>()?;
    m.add_class::<info::PartitionInfo>()?;
    m.add_class::<producer::Producer>()?;
    m.add_class::<producer::RecordMetadata>()?;
    m.add_class::<producer::ProducerStats>()?;
    m.add_class::<callback::ProducerRecord>()?;
    m.add_class::<consumer::Consumer>()?;
    m.add_class::<consumer::Message>()?;
    m.add_class::<message_id::MessageId>()?;
    m.add_class::<consumer::ConsumerStats>()?;
    m.add_class::<share_consumer::ShareConsumer>()?;
    m.add_class::<share_consumer::ShareMessage>()?;
    m.add_class::<share_consumer::ShareConsumerStats>()?;
    m.add_class::<share_consumer::ShareBacklog>()?;
    m.add_class::<info::GroupInfo>()?;
    m.add_class::<mirror::Mirror>()?;
    m.add_class::<mirror::MirrorStats>()?;
    m.add_function(wrap_pyfunction!(mirror::mirror, m)?)?;
    m.add_function(wrap_pyfunction!(mirror::mirror_status, m)?)?;
    m.add_class::<processor::Processor>()?;
    m.add_class::<processor::ProcessorStats>()?;
    m.add_class::<transaction::Transaction>()?;
    m.add_function(wrap_pyfunction!(data::murmur2, m)?)?;
    m.add_function(wrap_pyfunction!(data::partition_for_key, m)?)?;
    error::register(m)?;
    fork::install(m)?;
    // Private (for tests): set as an attribute, so not in `__all__`.
    m.setattr("_log_level", wrap_pyfunction!(log::_log_level, m)?)?;
    log::install(m)?;
    Ok(())
}
