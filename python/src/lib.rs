//! Python module over the mqlite engine.
