//! Progress bars on stderr, shown only when stderr is a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// What a bar counts.
#[derive(Clone, Copy)]
pub enum Unit {
    /// Bytes (shown as KiB, MiB, ...).
    Bytes,
    /// Messages.
    Messages,
}

/// A bar of `len` units labelled `what`, drawn on stderr when it is a
/// terminal; hidden (and free) otherwise, so piped output stays clean.
pub fn bar(len: u64, unit: Unit, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let template = match unit {
        Unit::Bytes => "{prefix} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
        Unit::Messages => "{prefix} [{bar:30}] {human_pos}/{human_len} messages ({eta} left)",
    };
    let style = ProgressStyle::with_template(template)
        .expect("a valid template")
        .progress_chars("=> ");
    ProgressBar::new(len)
        .with_style(style)
        .with_prefix(what.to_owned())
}
