//! The power-loss model of the durability tests: which bytes of a file
//! survive when the power goes out, given how far it was synced.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

const PAGE: usize = 4096;
const SECTOR: usize = 512;

/// splitmix64's output function.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Per file, the byte up to which it is durable.
pub fn durable_marks(path: &Path) -> HashMap<PathBuf, u64> {
    let mut m: HashMap<PathBuf, u64> = HashMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return m;
    };
    for line in text.lines() {
        if let Some((p, end)) = line.split_once('\t') {
            if let Ok(end) = end.parse::<u64>() {
                let e = m.entry(PathBuf::from(p)).or_default();
                *e = (*e).max(end);
            }
        }
    }
    m
}

/// splitmix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        mix(self.0)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What power loss does to one file: pages past `durable` that differ from
/// `before` (what the file held when the child started) are kept, reverted,
/// torn (per 512-byte sector) or garbled where they changed. Returns how many pages were changed.
#[allow(clippy::needless_range_loop)] // byte positions matter here
pub fn lose_power(path: &Path, before: &[u8], durable: usize, rng: &mut Rng) -> usize {
    let Ok(mut now) = std::fs::read(path) else {
        return 0;
    };
    let mut changed = 0;
    let first_page = durable / PAGE * PAGE;
    let mut page = first_page;
    while page < now.len() {
        let end = (page + PAGE).min(now.len());
        // The old content of a byte past the durable end: what it held
        // before the child ran (zero where the file was shorter).
        let old = |i: usize| -> u8 { before.get(i).copied().unwrap_or(0) };
        let dirty = (page.max(durable)..end).any(|i| now[i] != old(i));
        if dirty {
            match rng.below(4) {
                0 => {} // the page reached the disk
                1 => {
                    for i in page.max(durable)..end {
                        now[i] = old(i);
                    }
                    changed += 1;
                }
                2 => {
                    let mut s = page;
                    while s < end {
                        let se = (s + SECTOR).min(end);
                        if rng.below(2) == 0 {
                            for i in s.max(durable)..se {
                                now[i] = old(i);
                            }
                        }
                        s = se;
                    }
                    changed += 1;
                }
                _ => {
                    // Garbage where the child wrote (a torn sector write);
                    // bytes it did not touch were already on disk.
                    for i in page.max(durable)..end {
                        if now[i] != old(i) {
                            now[i] = rng.next() as u8;
                        }
                    }
                    changed += 1;
                }
            }
        }
        page = end;
    }
    std::fs::write(path, &now).unwrap();
    changed
}
