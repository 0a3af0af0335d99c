//! Interceptors (Kafka's `ProducerInterceptor`, RocketMQ's
//! `SendMessageHook`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::{Record, RecordMetadata};
use crate::error::Error;

/// Sees every record before it is sent, and every delivery report.
///
/// A failing interceptor (an `Err` or a panic) is logged and skipped: the
/// record goes on as it was.
pub trait ProducerInterceptor: Send + Sync {
    /// Called before the partition is chosen. Return `Ok(Some(record))` to
    /// send a changed record instead, `Ok(None)` to keep it as it is.
    fn on_send(&self, record: &Record) -> Result<Option<Record>, String> {
        let _ = record;
        Ok(None)
    }

    /// Called once per record when it is done: its metadata or its error.
    fn on_acknowledgement(&self, result: Result<&RecordMetadata, &Error>) {
        let _ = result;
    }
}

/// Runs every interceptor's `on_send` over `record`.
pub(crate) fn run_on_send(list: &[Arc<dyn ProducerInterceptor>], mut record: Record) -> Record {
    for i in list {
        match catch_unwind(AssertUnwindSafe(|| i.on_send(&record))) {
            Ok(Ok(Some(changed))) => record = changed,
            Ok(Ok(None)) => {}
            Ok(Err(e)) => ::log::warn!("producer interceptor on_send failed, skipped: {e}"),
            Err(_) => ::log::warn!("producer interceptor on_send panicked, skipped"),
        }
    }
    record
}

/// Runs every interceptor's `on_acknowledgement`.
pub(crate) fn run_on_ack(
    list: &[Arc<dyn ProducerInterceptor>],
    result: Result<&RecordMetadata, &Error>,
) {
    for i in list {
        if catch_unwind(AssertUnwindSafe(|| i.on_acknowledgement(result))).is_err() {
            ::log::warn!("producer interceptor on_acknowledgement panicked, skipped");
        }
    }
}
