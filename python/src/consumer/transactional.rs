//! What a transaction takes from a consumer: its positions for
//! `Transaction.send_offsets()`.

use pyo3::prelude::*;

use super::Consumer;

impl Consumer {
    /// Adds this consumer's positions, for its group, to `t` (the engine's
    /// `Transaction::send_offsets`), without the GIL for a consumer with a
    /// group.
    pub(crate) fn send_offsets_into(
        &self,
        py: Python<'_>,
        t: &mqlite::Transaction,
    ) -> PyResult<()> {
        self.with_engine(py, "send_offsets", |c| t.send_offsets(c))
    }
}
