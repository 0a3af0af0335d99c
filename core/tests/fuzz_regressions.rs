//! Replays every input under `fuzz/regressions/<target>/` (inputs that once
//! made a fuzz target fail, kept after the fix) through the same checks the
//! fuzz targets run, plus a few hand-made inputs, on every `make test`.
#![allow(clippy::unwrap_used)]

#[path = "common/fuzz_checks.rs"]
mod fuzz_checks;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let mut n = 0;
    // A target with no kept input yet has no directory (git keeps none).
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_file() && p.extension().is_none_or(|x| x != "md") {
            println!("replaying {}", p.display());
            check(&std::fs::read(&p).expect("read input"));
            n += 1;
        }
    }
    n
}

#[test]
fn batch_decode_regressions() {
    replay("batch_decode", fuzz_checks::batch_decode);
    fuzz_checks::batch_decode(&[]);
    fuzz_checks::batch_decode(&[1; 200]);
    fuzz_checks::batch_decode(&[0; 200]);
    // Compact batches (`magic` 2), sealed by the check: with and without
    // producer fields, and with every flag byte.
    for flags in [0u8, 0x20, 0x3f, 0x40, 0xff] {
        let mut b = vec![1u8; 48];
        b[17] = 2; // after the mode byte: the batch's byte 16, `magic`
        b[18] = flags;
        fuzz_checks::batch_decode(&b);
    }
    fuzz_checks::batch_decode(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/batch_decode/compact"),
        )
        .unwrap(),
    );
}

#[test]
fn segment_recovery_regressions() {
    replay("segment_recovery", fuzz_checks::segment_recovery);
    fuzz_checks::segment_recovery(&[0]);
    fuzz_checks::segment_recovery(&[2; 300]);
    fuzz_checks::segment_recovery(&[3; 300]);
}

#[test]
fn index_load_regressions() {
    replay("index_load", fuzz_checks::index_load);
    for pick in 0..8u8 {
        fuzz_checks::index_load(&[pick]);
        fuzz_checks::index_load(&[pick, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 2, 3]);
    }
}
