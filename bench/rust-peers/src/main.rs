//! mqlite's Rust API against the crates a Rust user would pick for a
//! persistent queue, and against raw baselines, measured in one run.
//!
//! ```sh
//! cd bench/rust-peers
//! cargo run --release -- --out ../../target/bench/rust-peers.json
//! cargo run --release -- --quick          # smoke test: tiny N, one run
//! cargo run --release -- --only fjall     # rows whose "group: system" match
//! ```
//!
//! This crate is a workspace of its own: the top-level `cargo test
//! --workspace` never builds it or its peers.
//!
//! For each message size (`--sizes`, default 100 and 1024 bytes) it fills
//! four groups of rows; rows of a group are compared with its reference, an
//! mqlite row, and the ratio is printed beside each row:
//!
//! * `produce S B, acks=1`: one message per call, nothing fsynced: mqlite
//!   `Producer::send` (the reference) and `send_borrowed`, one-record raw log
//!   appends, `commitlog::append_msg`, `yaque::try_send`, `queue-file::add`
//!   (`sync_writes` off), `fjall` and `sled` `insert` with big-endian `u64`
//!   keys, and the raw baselines: memcpy into a `Vec`, memcpy into a fresh
//!   memmap2-mapped file of the right size.
//! * `produce S B, acks=1, batches of B`: the same, `--batch` messages per
//!   call (`send_batch_with`, the reference, and `send_batch`, which also
//!   returns a `Vec` of metadata; raw log append of a batch;
//!   commitlog `append` of a `MessageBuf`; `try_send_batch`; `add_n`; fjall
//!   write batches; sled `apply_batch`).
//! * `produce S B, acks=all`: fsync before the ack, one sync per batch of
//!   `--batch`: mqlite `send_batch` with `acks=all` (the reference), `send`
//!   with `acks=all` from `--threads` threads (group commit), raw log append
//!   and flush, raw mmap and msync per batch, queue-file `add_n` with
//!   `sync_writes`, fjall batches committed with `PersistMode::SyncData`.
//!   yaque and commitlog have no sync call, and sled's `flush` is
//!   `sync_file_range` on Linux (no fsync): they are left out, with a
//!   printed note. Fewer messages (`--durable-n`, default N/50).
//! * `consume S B`: reading back a backlog written beforehand (untimed; the
//!   store is closed and reopened first), `500` messages per call: mqlite
//!   `Consumer::poll_batch` (the reference), `Consumer::poll` (owned
//!   messages), raw log scan, commitlog `read`, yaque
//!   `try_recv_batch_up_to` + commit, queue-file `iter` + `remove_n`, fjall
//!   and sled range scans from a cursor key, and a mapped file. Each reader
//!   folds every payload byte into a digest checked against what was
//!   written, so a lost or wrong message fails the row.
//! * `consume S B, one-record batches`: the same read of a backlog written
//!   one record per log batch (as `send` writes them, so a reader pays the
//!   per-batch work for each message): mqlite `poll_batch` (the reference),
//!   `poll` and the raw log scan; commitlog `read` of the same messages
//!   written by one `append_msg` each; and a buffered `read(2)` of a file
//!   of the same payload bytes (the baseline).
//!
//! The `acks=all` group's baseline beside raw msync is one `write(2)` of
//! each batch then `fdatasync` (what a durable batch costs at the least).
//!
//! mqlite's rows open their data directory in exclusive mode by name.
//! Each of its producer and consumer rows (not the raw log rows) is
//! followed by its shared-mode twin, "<row> (shared mode)": the same work
//! with the directory opened in shared mode, run interleaved with the
//! other rows of its group. `--exclusive-only` leaves the twins out.
//!
//! Every run uses fresh temporary directories (under `--tmp`). Figures are
//! medians of `--runs` runs, interleaved (run 1 of every row of a group,
//! then run 2, ...); the JSON keeps every run's rate, the min and max, the
//! 1-minute load average before and after, and the commit measured. A peer predicted (from a pilot run of N/50) to
//! take longer than `--budget` seconds per run is measured at a smaller N,
//! said in its row's note. Results go to `--out` in the shared bench format
//! (suite "rust"). Exits non-zero when any row failed.

#![deny(unsafe_code)]

mod baseline;
mod mq;
mod peers;
mod report;
mod runner;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fjall::PersistMode;
use mqlite::Acks;

use mq::Backlog;
use report::Report;
use runner::{Bench, Ctx, Group, Kind, RunOpts};

/// Command-line flags.
#[derive(Debug, Parser)]
#[command(about = "mqlite's Rust API against persistent-queue crates and raw baselines")]
struct Args {
    /// Messages per row [default: 1000000; 2000 with --quick].
    #[arg(long)]
    n: Option<u64>,
    /// Payload sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1024")]
    sizes: Vec<usize>,
    /// Runs per row; figures are medians [default: 3; 1 with --quick].
    #[arg(long)]
    runs: Option<usize>,
    /// Write the results as JSON (shared bench format, suite "rust").
    #[arg(long)]
    out: Option<PathBuf>,
    /// Only rows whose "group: system" contains this text (any case; `a|b`: either).
    #[arg(long)]
    only: Option<String>,
    /// Smoke test: tiny N and one run unless --n / --runs say otherwise.
    #[arg(long)]
    quick: bool,
    /// Messages per batch in the batched and acks=all rows.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Messages per row of the acks=all groups [default: N/50, at least
    /// two batches].
    #[arg(long)]
    durable_n: Option<u64>,
    /// Sender threads of the acks=all group-commit row.
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// Seconds a peer's run may take before its N is scaled down.
    #[arg(long, default_value_t = 30.0)]
    budget: f64,
    /// Directory for the temporary data directories [default: the system's
    /// temporary directory].
    #[arg(long)]
    tmp: Option<PathBuf>,
    /// Leaves out the shared-mode twins of mqlite's producer and consumer
    /// rows (each measured with the data directory in exclusive mode, then
    /// again in shared mode).
    #[arg(long)]
    exclusive_only: bool,
    /// Runs every row in this process instead of each run in a fresh one
    /// (quicker to start, but rows then weigh on each other).
    #[arg(long)]
    in_process: bool,
    /// Internal: runs the row "GROUP<TAB>SYSTEM" once over --n messages of
    /// the one --sizes size and prints `secs=S` (how each run is isolated).
    #[arg(long = "child-run", hide = true)]
    child_run: Option<String>,
}

/// The child side of [`runner::CHILD_FLAG`]: one run of one row.
fn child_run(args: &Args, row: &str) -> ExitCode {
    let (group_name, system) = row.split_once('\t').unwrap_or((row, ""));
    let n = args.n.unwrap_or(1);
    let size = args.sizes.first().copied().unwrap_or(100);
    let batch = args.batch.max(1);
    let threads = args.threads.max(1);
    let tmp = args.tmp.clone().unwrap_or_else(std::env::temp_dir);
    let ctx = Ctx::new(size, batch, threads, tmp);
    let found = groups(size, n, n, batch, threads, true)
        .into_iter()
        .filter(|g| g.name == group_name)
        .flat_map(|g| g.benches)
        .find(|b| b.system == system);
    let Some(bench) = found else {
        eprintln!("error: no row {group_name:?} / {system:?}");
        return ExitCode::FAILURE;
    };
    match (bench.run)(&ctx, n) {
        Ok(secs) => {
            println!("secs={secs}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

const NO_FSYNC: &str = "no fsync";

/// The groups of rows of one message size; with `twins`, mqlite's
/// producer and consumer rows are each followed by their shared-mode twin.
fn groups(
    size: usize,
    n: u64,
    durable_n: u64,
    batch: usize,
    threads: usize,
    twins: bool,
) -> Vec<Group> {
    use peers::{commitlog, fjall, queue_file, sled, yaque};
    use Kind::{Baseline, Mqlite, Peer};
    let mq_acks1 = "acks=1: in the segment's shared memory map (page cache), no fsync; \
                    survives a crash of the process";
    let fjall_buffer =
        "journal handed to the OS per write (PersistMode::Buffer, fjall's default), no fsync";
    let sled_cache = "sled's own cache, written to its log by a background flush every 500 ms \
                      (default): a crash of the process can lose the last 500 ms";
    let baselines = || {
        vec![
            Bench::new(
                "memcpy into a Vec",
                "none (process memory)",
                Baseline,
                baseline::memcpy,
            ),
            Bench::new(
                "raw memmap2 write",
                format!("page cache (fresh mapped file), {NO_FSYNC}"),
                Baseline,
                |c, n| baseline::mmap_write(c, n, false),
            ),
        ]
    };

    let mut one = vec![
        Bench::new("mqlite send", mq_acks1, Mqlite, |c, n| {
            mq::send(c, n, Acks::One)
        })
        .reference()
        .shared_twin(),
        Bench::new("mqlite send_borrowed", mq_acks1, Mqlite, mq::send_borrowed).shared_twin(),
        Bench::new(
            "mqlite raw log append (1 per call)",
            mq_acks1,
            Mqlite,
            |c, n| mq::raw_append(c, n, 1, false),
        ),
        Bench::new(
            "commitlog append_msg",
            format!("write(2) per append into the page cache, {NO_FSYNC}"),
            Peer,
            commitlog::one,
        ),
        Bench::new(
            "yaque try_send",
            format!("BufWriter flushed per send (write(2) into the page cache), {NO_FSYNC}"),
            Peer,
            yaque::one,
        ),
        Bench::new(
            "queue-file add",
            format!("sync_writes off: write(2) into the page cache, {NO_FSYNC}"),
            Peer,
            queue_file::one,
        ),
        Bench::new("fjall insert", fjall_buffer, Peer, fjall::one),
        Bench::new("sled insert", sled_cache, Peer, sled::one),
    ];
    one.extend(baselines());

    let mut batched = vec![
        Bench::new(
            "mqlite send_batch_with",
            format!(
                "{mq_acks1}; each record's metadata handed to a closure, not returned in a Vec"
            ),
            Mqlite,
            |c, n| mq::send_batch_with(c, n, Acks::One),
        )
        .reference()
        .shared_twin(),
        Bench::new("mqlite send_batch", mq_acks1, Mqlite, |c, n| {
            mq::send_batch(c, n, Acks::One)
        })
        .shared_twin(),
        Bench::new(
            "mqlite raw log append (batch)",
            mq_acks1,
            Mqlite,
            move |c, n| mq::raw_append(c, n, c.batch, false),
        ),
        Bench::new(
            "commitlog append (MessageBuf)",
            format!("one write(2) per batch into the page cache, {NO_FSYNC}"),
            Peer,
            commitlog::batch,
        ),
        Bench::new(
            "yaque try_send_batch",
            format!("BufWriter flushed per batch into the page cache, {NO_FSYNC}"),
            Peer,
            yaque::batch,
        ),
        Bench::new(
            "queue-file add_n",
            format!("sync_writes off: write(2) into the page cache, {NO_FSYNC}"),
            Peer,
            |c, n| queue_file::batch(c, n, false),
        ),
        Bench::new(
            "fjall write batch",
            "journal handed to the OS per batch (durability PersistMode::Buffer), no fsync",
            Peer,
            |c, n| fjall::batch(c, n, PersistMode::Buffer),
        ),
        Bench::new("sled apply_batch", sled_cache, Peer, sled::batch),
    ];
    batched.extend(baselines());

    let durable = vec![
        Bench::new(
            "mqlite send_batch",
            format!("acks=all: one msync (syncs data like fdatasync) per send_batch of {batch}"),
            Mqlite,
            |c, n| mq::send_batch(c, n, Acks::All),
        )
        .reference()
        .shared_twin(),
        Bench::new(
            &format!("mqlite send, {threads} threads"),
            format!(
                "acks=all: each send waits for its flush; {threads} concurrent senders \
                 share flushes (group commit)"
            ),
            Mqlite,
            mq::send_threads,
        )
        .shared_twin(),
        Bench::new(
            "mqlite raw log append + flush",
            format!("append of {batch} then flush (msync) per batch"),
            Mqlite,
            |c, n| mq::raw_append(c, n, c.batch, true),
        ),
        Bench::new(
            "raw memmap2 write + msync",
            format!("memcpy then msync of the range written, per batch of {batch}"),
            Baseline,
            |c, n| baseline::mmap_write(c, n, true),
        ),
        Bench::new(
            "queue-file add_n, sync_writes",
            format!("sync_writes on: add_n of {batch} syncs (fdatasync) before returning"),
            Peer,
            |c, n| queue_file::batch(c, n, true),
        ),
        Bench::new(
            "fjall write batch, SyncData",
            format!("batch of {batch} committed with durability PersistMode::SyncData (fdatasync of the journal)"),
            Peer,
            |c, n| fjall::batch(c, n, PersistMode::SyncData),
        ),
        Bench::new(
            "raw write(2) + fdatasync",
            format!("one write(2) of each batch of {batch} into a file, then fdatasync"),
            Baseline,
            baseline::write_fdatasync,
        ),
    ];

    let consume = vec![
        Bench::new(
            "mqlite poll_batch",
            "standalone consumer assigned the partition, 500 per poll, read by reference \
             from one MessageBatch; zero-copy values; position in memory (no commit)",
            Mqlite,
            |c, n| mq::poll_batch(c, n, Backlog::Batches),
        )
        .reference()
        .shared_twin(),
        Bench::new(
            "mqlite poll",
            "the same, as owned Messages (a reference count each)",
            Mqlite,
            |c, n| mq::poll(c, n, Backlog::Batches),
        )
        .shared_twin(),
        Bench::new(
            "mqlite raw log scan",
            "log-level scan, every batch's CRC checked, no consumer",
            Mqlite,
            |c, n| mq::raw_scan(c, n, Backlog::Batches),
        ),
        Bench::new(
            "commitlog read",
            "read(offset, ReadLimit) of 500 messages' bytes, copied into a MessageBuf; \
             position kept by the caller",
            Peer,
            |c, n| commitlog::consume(c, n, false),
        ),
        Bench::new(
            "yaque try_recv_batch_up_to + commit",
            "500 per call, committed; yaque saves the read position every 250 reads (default)",
            Peer,
            yaque::consume,
        ),
        Bench::new(
            "queue-file iter + remove_n",
            "iter().take(500) then remove_n (header rewritten, no fsync)",
            Peer,
            queue_file::consume,
        ),
        Bench::new(
            "fjall range scan",
            "range from a cursor key, 500 per scan; keys not deleted",
            Peer,
            fjall::consume,
        ),
        Bench::new(
            "sled range scan",
            "range from a cursor key, 500 per scan; keys not deleted",
            Peer,
            sled::consume,
        ),
        Bench::new(
            "raw memmap2 read",
            "reading a mapped file record by record",
            Baseline,
            baseline::mmap_read,
        ),
    ];

    let singles = vec![
        Bench::new(
            "mqlite poll_batch",
            "a log of one-record batches (as send writes them); otherwise as in \
             the consume group",
            Mqlite,
            |c, n| mq::poll_batch(c, n, Backlog::Singles),
        )
        .reference()
        .shared_twin(),
        Bench::new(
            "mqlite poll",
            "the same, as owned Messages",
            Mqlite,
            |c, n| mq::poll(c, n, Backlog::Singles),
        )
        .shared_twin(),
        Bench::new(
            "mqlite raw log scan",
            "log-level scan of the one-record batches, every batch's CRC checked",
            Mqlite,
            |c, n| mq::raw_scan(c, n, Backlog::Singles),
        ),
        Bench::new(
            "commitlog read",
            "the same messages written by one append_msg each; read(offset, ReadLimit) \
             of 500 messages' bytes",
            Peer,
            |c, n| commitlog::consume(c, n, true),
        ),
        Bench::new(
            "raw read(2), 64 KiB BufReader",
            "a file of the payloads back to back, read record by record",
            Baseline,
            baseline::file_read,
        ),
    ];

    vec![
        Group {
            name: format!("produce {size} B, acks=1"),
            n,
            note: None,
            left_out: Vec::new(),
            benches: runner::with_shared_twins(one, twins),
        },
        Group {
            name: format!("produce {size} B, acks=1, batches of {batch}"),
            n,
            note: None,
            left_out: Vec::new(),
            benches: runner::with_shared_twins(batched, twins),
        },
        Group {
            name: format!("produce {size} B, acks=all"),
            n: durable_n,
            note: Some(format!(
                "N = {durable_n} in every row of this group (one sync per batch of {batch})"
            )),
            left_out: vec![
                "yaque: its Sender has no sync call (it only flushes its BufWriter to the OS)"
                    .into(),
                "commitlog: CommitLog::flush msyncs the index only; the segment file is \
                 never fsynced (File::flush is a no-op)"
                    .into(),
                "sled: Db::flush writes its log with sync_file_range on Linux, which neither \
                 flushes the disk's cache nor commits metadata (sled fsyncs only from its \
                 background flusher, every 500 ms)"
                    .into(),
            ],
            benches: runner::with_shared_twins(durable, twins),
        },
        Group {
            name: format!("consume {size} B"),
            n,
            note: None,
            left_out: Vec::new(),
            benches: runner::with_shared_twins(consume, twins),
        },
        Group {
            name: format!("consume {size} B, one-record batches"),
            n,
            note: None,
            left_out: vec![
                "yaque, queue-file, fjall, sled: they keep no batches (each message is its \
                 own entry), so their consume rows above already read one message per entry"
                    .into(),
            ],
            benches: runner::with_shared_twins(singles, twins),
        },
    ]
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(row) = &args.child_run {
        return child_run(&args, row);
    }
    let n = args.n.unwrap_or(if args.quick { 2_000 } else { 1_000_000 });
    let runs = args.runs.unwrap_or(if args.quick { 1 } else { 3 }).max(1);
    let batch = args.batch.max(1);
    let durable_n = args
        .durable_n
        .unwrap_or(n / 50)
        .max(2 * batch as u64)
        .min(n.max(2 * batch as u64));
    let threads = args.threads.max(1);
    let tmp = args.tmp.clone().unwrap_or_else(std::env::temp_dir);
    let opts = RunOpts {
        runs,
        only: args.only.clone(),
        budget: args.budget,
        isolate: !args.in_process,
    };

    let command = std::iter::once(
        "cargo run --release --manifest-path bench/rust-peers/Cargo.toml --".to_owned(),
    )
    .chain(std::env::args().skip(1))
    .collect::<Vec<_>>()
    .join(" ");
    let mut report = Report::new(runs, command);
    println!(
        "mqlite Rust peers: N = {n}, sizes {:?}, {runs} run(s) per row (medians), batch {batch}",
        args.sizes
    );
    println!(
        "machine: {}, {} cores, kernel {}, {}",
        report.machine.cpu,
        report.machine.cores,
        report.machine.kernel,
        report.machine.rustc.as_deref().unwrap_or("rustc ?")
    );
    let mut failures = Vec::new();
    for &size in &args.sizes {
        let ctx = Ctx::new(size, batch, threads, tmp.clone());
        for group in groups(size, n, durable_n, batch, threads, !args.exclusive_only) {
            failures.extend(runner::run_group(&ctx, &group, &opts, &mut report));
        }
    }

    if let Some(out) = &args.out {
        if let Err(e) = report.write(out) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        println!("\nwrote {} rows to {}", report.rows.len(), out.display());
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("\n{} row(s) failed:", failures.len());
        for f in &failures {
            eprintln!("  {f}");
        }
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every mqlite producer and consumer row is followed by its
    /// shared-mode twin (never a reference); raw log rows and the others
    /// have none; `twins = false` leaves them all out.
    #[test]
    fn shared_mode_twins_follow_the_api_rows() {
        for g in groups(100, 10, 10, 10, 2, true) {
            let names: Vec<&str> = g.benches.iter().map(|b| b.system.as_str()).collect();
            for (i, b) in g.benches.iter().enumerate() {
                if let Some(of) = b.system.strip_suffix(" (shared mode)") {
                    assert_eq!(names[i - 1], of, "{}", g.name);
                    assert!(!b.reference && b.kind == Kind::Mqlite);
                    assert!(!of.contains("raw"));
                } else if b.kind == Kind::Mqlite && !b.system.contains("raw") {
                    assert_eq!(
                        names.get(i + 1).copied(),
                        Some(format!("{} (shared mode)", b.system).as_str()),
                        "{}",
                        g.name
                    );
                }
            }
        }
        let none = groups(100, 10, 10, 10, 2, false)
            .into_iter()
            .flat_map(|g| g.benches)
            .filter(|b| b.system.ends_with("(shared mode)"))
            .count();
        assert_eq!(none, 0);
    }

    /// Odd runs measure the rows as listed; even runs put each twin
    /// before its row and leave the other rows where they are, and a twin
    /// whose row is left out where it is.
    #[test]
    fn twins_swap_places_with_their_rows_on_even_runs() {
        let g = groups(100, 10, 10, 10, 2, true)
            .into_iter()
            .find(|g| {
                g.benches.iter().any(|b| b.is_twin)
                    && g.benches.iter().any(|b| b.kind != Kind::Mqlite)
            })
            .expect("a group with twins and peers");
        let rows: Vec<&Bench> = g.benches.iter().collect();
        let names = |rows: &[&Bench], run| -> Vec<String> {
            runner::run_order(rows, run)
                .into_iter()
                .map(|i| rows[i].system.clone())
                .collect()
        };
        let listed: Vec<String> = rows.iter().map(|b| b.system.clone()).collect();
        assert_eq!(names(&rows, 1), listed);
        assert_eq!(names(&rows, 3), listed);
        let even = names(&rows, 2);
        assert_eq!(even.len(), listed.len());
        for (i, b) in rows.iter().enumerate() {
            if b.is_twin {
                assert_eq!(even[i - 1], b.system);
                assert_eq!(even[i], listed[i - 1]);
            } else if !b.shared_twin {
                assert_eq!(even[i], b.system);
            }
        }
        // Without its row, a twin that follows another row stays where
        // it is.
        let t = (2..rows.len())
            .find(|&t| rows[t].is_twin)
            .expect("a twin after the first pair");
        let mut cut = rows.clone();
        cut.remove(t - 1);
        assert_eq!(names(&cut, 2)[t - 1], rows[t].system);
    }
}
