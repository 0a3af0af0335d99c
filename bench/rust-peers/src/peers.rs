//! The peer crates, each in its default configuration unless a row says
//! otherwise: `commitlog`, `yaque`, `queue-file`, and `fjall` and `sled`
//! used as a queue (keys are the message index as a big-endian `u64`, so
//! the key order is the send order).
//!
//! Every consume row reads a backlog: the messages are written with the
//! peer's batch call, the store is closed and opened again, and only the
//! reading is timed.

use std::path::Path;

use crate::runner::{check, time, BenchError, Context, Ctx, Res, Tally, CONSUME_BATCH};

/// `commitlog` (a Kafka-like segmented log: append, read by offset).
pub mod commitlog {
    use super::*;
    use ::commitlog::message::{MessageBuf, MessageSet};
    use ::commitlog::{CommitLog, LogOptions, ReadLimit};

    /// Bytes of commitlog's per-message header.
    const HEADER: usize = 20;

    fn open(dir: &Path) -> Res<CommitLog> {
        CommitLog::new(LogOptions::new(dir)).ctx("CommitLog::new")
    }

    /// `n` calls of `append_msg`.
    pub fn one(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        let mut log = open(dir.path())?;
        time(|| {
            for i in 0..n {
                log.append_msg(ctx.payload(i)).ctx("append_msg")?;
            }
            Ok(())
        })
    }

    fn append_batches(log: &mut CommitLog, ctx: &Ctx, n: u64) -> Res<()> {
        let mut buf = MessageBuf::default();
        for (first, len) in ctx.batches(n) {
            buf.clear();
            for i in first..first + len as u64 {
                buf.push(ctx.payload(i))
                    .map_err(|e| BenchError(format!("MessageBuf::push: {e:?}")))?;
            }
            log.append(&mut buf).ctx("append")?;
        }
        Ok(())
    }

    /// `n` messages in `append` calls of a `MessageBuf` of `ctx.batch`.
    pub fn batch(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        let mut log = open(dir.path())?;
        time(|| append_batches(&mut log, ctx, n))
    }

    /// Reads the backlog (written in `MessageBuf`s of `ctx.batch`, or with
    /// `singles` one `append_msg` per message) with `read(offset,
    /// ReadLimit)`, about `CONSUME_BATCH` messages' worth of bytes per call.
    pub fn consume(ctx: &Ctx, n: u64, singles: bool) -> Res<f64> {
        let dir = ctx.dir()?;
        {
            let mut log = open(dir.path())?;
            if singles {
                for i in 0..n {
                    log.append_msg(ctx.payload(i)).ctx("append_msg")?;
                }
            } else {
                append_batches(&mut log, ctx, n)?;
            }
        }
        let log = open(dir.path())?;
        let limit = ReadLimit::max_bytes(CONSUME_BATCH * (ctx.size + HEADER));
        let mut tally = Tally::default();
        let secs = time(|| {
            let mut next = 0;
            while tally.count() < n {
                let buf = log.read(next, limit).ctx("read")?;
                let before = tally.count();
                for m in buf.iter() {
                    tally.add(m.payload());
                    next = m.offset() + 1;
                }
                check(tally.count() > before, || "read returned nothing".into())?;
            }
            Ok(())
        })?;
        tally.check(ctx, n)?;
        Ok(secs)
    }
}

/// `yaque` (a segmented on-disk queue with a sender and a receiver).
pub mod yaque {
    use super::*;
    use ::yaque::{Receiver, Sender, TryRecvError};

    fn sender(dir: &Path) -> Res<Sender> {
        Sender::open(dir.join("q")).ctx("Sender::open")
    }

    /// `n` calls of `try_send`.
    pub fn one(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        let mut tx = sender(dir.path())?;
        time(|| {
            for i in 0..n {
                tx.try_send(ctx.payload(i)).ctx("try_send")?;
            }
            Ok(())
        })
    }

    fn send_batches(tx: &mut Sender, ctx: &Ctx, n: u64) -> Res<()> {
        for (first, len) in ctx.batches(n) {
            tx.try_send_batch((first..first + len as u64).map(|i| ctx.payload(i)))
                .ctx("try_send_batch")?;
        }
        Ok(())
    }

    /// `n` messages in `try_send_batch` calls of `ctx.batch`.
    pub fn batch(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        let mut tx = sender(dir.path())?;
        time(|| send_batches(&mut tx, ctx, n))
    }

    /// Receives the backlog with `try_recv_batch_up_to(CONSUME_BATCH)`,
    /// committing each batch.
    pub fn consume(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        send_batches(&mut sender(dir.path())?, ctx, n)?;
        let mut rx = Receiver::open(dir.path().join("q")).ctx("Receiver::open")?;
        let mut tally = Tally::default();
        let secs = time(|| {
            while tally.count() < n {
                let got = match rx.try_recv_batch_up_to(CONSUME_BATCH) {
                    Ok(got) => got,
                    Err(TryRecvError::Io(e)) => return Err(e).ctx("try_recv_batch_up_to"),
                    Err(TryRecvError::QueueEmpty) => {
                        return Err(BenchError("the queue ran empty early".into()))
                    }
                };
                for v in got.iter() {
                    tally.add(v);
                }
                got.commit().ctx("commit")?;
            }
            Ok(())
        })?;
        tally.check(ctx, n)?;
        Ok(secs)
    }
}

/// `queue-file` (a ring-buffer FIFO in one file, Tape's QueueFile format).
pub mod queue_file {
    use super::*;
    use ::queue_file::QueueFile;

    fn open(dir: &Path, sync: bool) -> Res<QueueFile> {
        let mut q = QueueFile::open(dir.join("q")).ctx("QueueFile::open")?;
        q.set_sync_writes(sync);
        Ok(q)
    }

    /// `n` calls of `add` (`sync_writes` off).
    pub fn one(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        let mut q = open(dir.path(), false)?;
        time(|| {
            for i in 0..n {
                q.add(ctx.payload(i)).ctx("add")?;
            }
            Ok(())
        })
    }

    fn add_batches(q: &mut QueueFile, ctx: &Ctx, n: u64) -> Res<()> {
        for (first, len) in ctx.batches(n) {
            q.add_n((first..first + len as u64).map(|i| ctx.payload(i)))
                .ctx("add_n")?;
        }
        Ok(())
    }

    /// `n` messages in `add_n` calls of `ctx.batch`; with `sync`, the
    /// file's `sync_writes` is on (each `add_n` syncs before returning).
    pub fn batch(ctx: &Ctx, n: u64, sync: bool) -> Res<f64> {
        let dir = ctx.dir()?;
        let mut q = open(dir.path(), sync)?;
        time(|| add_batches(&mut q, ctx, n))
    }

    /// Takes the backlog `CONSUME_BATCH` at a time: read with `iter`, then
    /// `remove_n`.
    pub fn consume(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        add_batches(&mut open(dir.path(), false)?, ctx, n)?;
        let mut q = open(dir.path(), false)?;
        let mut tally = Tally::default();
        let secs = time(|| {
            while tally.count() < n {
                let before = tally.count();
                for v in q.iter().take(CONSUME_BATCH) {
                    tally.add(&v);
                }
                let k = (tally.count() - before) as usize;
                check(k > 0, || "the queue ran empty early".into())?;
                q.remove_n(k).ctx("remove_n")?;
            }
            Ok(())
        })?;
        tally.check(ctx, n)?;
        Ok(secs)
    }
}

/// `fjall` (an LSM-tree key-value store) used as a queue.
pub mod fjall {
    use super::*;
    use ::fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

    fn open(dir: &Path) -> Res<(Database, Keyspace)> {
        let db = Database::builder(dir).open().ctx("Database::open")?;
        let ks = db
            .keyspace("q", KeyspaceCreateOptions::default)
            .ctx("keyspace")?;
        Ok((db, ks))
    }

    /// `n` calls of `Keyspace::insert` (each written to the journal and
    /// handed to the OS: fjall's default `PersistMode::Buffer`).
    pub fn one(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        let (_db, ks) = open(dir.path())?;
        time(|| {
            for i in 0..n {
                ks.insert(i.to_be_bytes().as_slice(), ctx.payload(i))
                    .ctx("insert")?;
            }
            Ok(())
        })
    }

    fn write_batches(
        db: &Database,
        ks: &Keyspace,
        ctx: &Ctx,
        n: u64,
        mode: PersistMode,
    ) -> Res<()> {
        for (first, len) in ctx.batches(n) {
            let mut b = db.batch().durability(Some(mode));
            for i in first..first + len as u64 {
                b.insert(ks, i.to_be_bytes().as_slice(), ctx.payload(i));
            }
            b.commit().ctx("batch commit")?;
        }
        Ok(())
    }

    /// `n` messages in write batches of `ctx.batch`, each committed with
    /// durability `mode`.
    pub fn batch(ctx: &Ctx, n: u64, mode: PersistMode) -> Res<f64> {
        let dir = ctx.dir()?;
        let (db, ks) = open(dir.path())?;
        time(|| write_batches(&db, &ks, ctx, n, mode))
    }

    /// Reads the backlog with range scans from a cursor key, `CONSUME_BATCH`
    /// items per scan (nothing is deleted).
    pub fn consume(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        {
            let (db, ks) = open(dir.path())?;
            write_batches(&db, &ks, ctx, n, PersistMode::Buffer)?;
        }
        let (_db, ks) = open(dir.path())?;
        let mut tally = Tally::default();
        let secs = time(|| {
            let mut cursor = 0u64;
            while tally.count() < n {
                let before = tally.count();
                for item in ks.range(cursor.to_be_bytes()..).take(CONSUME_BATCH) {
                    let (k, v) = item.into_inner().ctx("range")?;
                    tally.add(&v);
                    cursor = key_after(&k)?;
                }
                check(tally.count() > before, || {
                    "the range ran empty early".into()
                })?;
            }
            Ok(())
        })?;
        tally.check(ctx, n)?;
        Ok(secs)
    }
}

/// `sled` (a B-tree key-value store) used as a queue.
pub mod sled {
    use super::*;
    use ::sled::{Batch, Db};

    /// Opens the database, waiting (up to 5 s) for the lock file while a
    /// `Db` just dropped still holds it: sled's flusher thread lets go of it
    /// a moment after the drop (the consume rows write, drop and reopen).
    /// sled 0.34 reports a held lock as an `Other` I/O error whose message
    /// says so (the `WouldBlock` is only in the text).
    fn open(dir: &Path) -> Res<Db> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let locked = |e: &std::io::Error| {
            e.kind() == std::io::ErrorKind::WouldBlock
                || e.to_string().contains("could not acquire lock")
        };
        loop {
            match ::sled::open(dir) {
                Err(::sled::Error::Io(e)) if locked(&e) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                res => return res.ctx("sled::open"),
            }
        }
    }

    /// `n` calls of `insert`.
    pub fn one(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        let db = open(dir.path())?;
        time(|| {
            for i in 0..n {
                db.insert(i.to_be_bytes(), ctx.payload(i)).ctx("insert")?;
            }
            Ok(())
        })
    }

    fn apply_batches(db: &Db, ctx: &Ctx, n: u64) -> Res<()> {
        for (first, len) in ctx.batches(n) {
            let mut b = Batch::default();
            for i in first..first + len as u64 {
                b.insert(i.to_be_bytes().as_slice(), ctx.payload(i));
            }
            db.apply_batch(b).ctx("apply_batch")?;
        }
        Ok(())
    }

    /// `n` messages in `apply_batch` calls of `ctx.batch`.
    pub fn batch(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        let db = open(dir.path())?;
        time(|| apply_batches(&db, ctx, n))
    }

    /// Reads the backlog with range scans from a cursor key, `CONSUME_BATCH`
    /// items per scan (nothing is deleted).
    pub fn consume(ctx: &Ctx, n: u64) -> Res<f64> {
        let dir = ctx.dir()?;
        apply_batches(&open(dir.path())?, ctx, n)?;
        let db = open(dir.path())?;
        let mut tally = Tally::default();
        let secs = time(|| {
            let mut cursor = 0u64;
            while tally.count() < n {
                let before = tally.count();
                for item in db.range(cursor.to_be_bytes()..).take(CONSUME_BATCH) {
                    let (k, v) = item.ctx("range")?;
                    tally.add(&v);
                    cursor = key_after(&k)?;
                }
                check(tally.count() > before, || {
                    "the range ran empty early".into()
                })?;
            }
            Ok(())
        })?;
        tally.check(ctx, n)?;
        Ok(secs)
    }

    #[cfg(test)]
    mod tests {
        /// A database still locked by another handle is opened once that
        /// handle lets go (sled's error for a held lock is `Other`).
        #[test]
        fn open_waits_for_the_lock() {
            let dir = tempfile::tempdir().unwrap();
            let first = ::sled::open(dir.path()).unwrap();
            assert!(::sled::open(dir.path()).is_err(), "the lock is held");
            let release = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(200));
                drop(first);
            });
            super::open(dir.path()).unwrap();
            release.join().unwrap();
        }
    }
}

/// The key after `k`, a big-endian `u64`.
fn key_after(k: &[u8]) -> Res<u64> {
    let k: [u8; 8] = k
        .try_into()
        .map_err(|_| BenchError(format!("a key of {} bytes", k.len())))?;
    Ok(u64::from_be_bytes(k) + 1)
}
