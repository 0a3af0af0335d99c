//! C ABI over the mqlite engine.
