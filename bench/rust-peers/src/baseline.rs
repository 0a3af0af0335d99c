//! Raw baselines: the bare cost of putting the payload bytes somewhere, the
//! ceiling no queue can beat.

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::{BufReader, Read, Write};
use std::path::Path;

use memmap2::MmapMut;

use crate::runner::{time, Context, Ctx, Res, Tally};

/// Appends `n` payloads into a `Vec` allocated with room for all of them
/// (its pages are faulted in by the copies, as a fresh file's are).
pub fn memcpy(ctx: &Ctx, n: u64) -> Res<f64> {
    let mut buf: Vec<u8> = Vec::with_capacity(n as usize * ctx.size);
    let secs = time(|| {
        for i in 0..n {
            buf.extend_from_slice(ctx.payload(i));
        }
        Ok(())
    })?;
    black_box(&buf);
    Ok(secs)
}

fn create(path: &Path, len: u64) -> Res<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .ctx("creating the mapped file")?;
    f.set_len(len).ctx("sizing the mapped file")?;
    Ok(f)
}

#[allow(unsafe_code)]
fn map(f: &File) -> Res<MmapMut> {
    // SAFETY: the file was created by this process in its own temporary
    // directory; nothing else truncates or writes it while it is mapped.
    unsafe { MmapMut::map_mut(f) }.ctx("mapping the file")
}

/// Copies `n` payloads one after the other into a fresh file of exactly
/// their size, mapped with memmap2 (page faults included, no msync); with
/// `sync`, msyncs the range written by each batch before the next.
pub fn mmap_write(ctx: &Ctx, n: u64, sync: bool) -> Res<f64> {
    let dir = ctx.dir()?;
    let s = ctx.size;
    let f = create(&dir.path().join("raw"), n * s as u64)?;
    let mut m = map(&f)?;
    time(|| {
        for (first, len) in ctx.batches(n) {
            let start = first as usize * s;
            for i in 0..len {
                let at = start + i * s;
                m[at..at + s].copy_from_slice(ctx.payload(first + i as u64));
            }
            if sync {
                m.flush_range(start, len * s).ctx("msync")?;
            }
        }
        Ok(())
    })
}

/// Reads `n` payloads back from a mapped file written (untimed) the same
/// way, record by record, every byte into the digest.
pub fn mmap_read(ctx: &Ctx, n: u64) -> Res<f64> {
    let dir = ctx.dir()?;
    let s = ctx.size;
    let path = dir.path().join("raw");
    {
        let f = create(&path, n * s as u64)?;
        let mut m = map(&f)?;
        for i in 0..n as usize {
            m[i * s..(i + 1) * s].copy_from_slice(ctx.payload(i as u64));
        }
        m.flush().ctx("msync")?;
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .ctx("opening the mapped file")?;
    let m = map(&f)?;
    let mut tally = Tally::default();
    let secs = time(|| {
        for rec in m.chunks_exact(s) {
            tally.add(rec);
        }
        Ok(())
    })?;
    tally.check(ctx, n)?;
    Ok(secs)
}

/// Writes `n` payloads to a fresh file, one write(2) of each batch of
/// `ctx.batch` (copied into one buffer first) followed by an fdatasync:
/// the bare cost of a durable batch.
pub fn write_fdatasync(ctx: &Ctx, n: u64) -> Res<f64> {
    let dir = ctx.dir()?;
    let mut f = create(&dir.path().join("raw"), 0)?;
    let mut buf: Vec<u8> = Vec::with_capacity(ctx.batch * ctx.size);
    time(|| {
        for (first, len) in ctx.batches(n) {
            buf.clear();
            for i in first..first + len as u64 {
                buf.extend_from_slice(ctx.payload(i));
            }
            f.write_all(&buf).ctx("write")?;
            f.sync_data().ctx("fdatasync")?;
        }
        Ok(())
    })
}

/// Reads `n` payloads back from a file of exactly their bytes (written
/// untimed, closed and opened again) through a 64 KiB `BufReader`: read(2)
/// of big blocks, each record copied out of the buffer and into the digest.
pub fn file_read(ctx: &Ctx, n: u64) -> Res<f64> {
    let dir = ctx.dir()?;
    let s = ctx.size;
    let path = dir.path().join("raw");
    {
        let mut f = create(&path, 0)?;
        let mut w = std::io::BufWriter::new(&mut f);
        for i in 0..n {
            w.write_all(ctx.payload(i)).ctx("write")?;
        }
        w.flush().ctx("write")?;
    }
    let f = File::open(&path).ctx("opening the file")?;
    let mut r = BufReader::with_capacity(64 << 10, f);
    let mut rec = vec![0u8; s];
    let mut tally = Tally::default();
    let secs = time(|| {
        for _ in 0..n {
            r.read_exact(&mut rec).ctx("read")?;
            tally.add(&rec);
        }
        Ok(())
    })?;
    tally.check(ctx, n)?;
    Ok(secs)
}
