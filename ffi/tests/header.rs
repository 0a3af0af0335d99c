//! Checks that the committed `include/mqlite.h` is exactly what the pinned
//! cbindgen generates from this crate, so the header can never drift from
//! the library. With `MQLITE_UPDATE_HEADER=1` (what `make header` sets) it
//! rewrites the header instead.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn header_path() -> PathBuf {
    manifest_dir().join("..").join("include").join("mqlite.h")
}

fn config() -> cbindgen::Config {
    let path = manifest_dir().join("cbindgen.toml");
    cbindgen::Config::from_file(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn generate() -> String {
    let bindings = cbindgen::Builder::new()
        .with_crate(manifest_dir())
        .with_config(config())
        .generate()
        .expect("cbindgen could not generate the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the generated header is UTF-8")
}

fn first_difference(want: &str, have: &str) -> String {
    for (i, (w, h)) in want.lines().zip(have.lines()).enumerate() {
        if w != h {
            return format!(
                "first difference at line {}:\n  generated: {w}\n  committed: {h}",
                i + 1
            );
        }
    }
    format!(
        "one is a prefix of the other ({} generated lines, {} committed)",
        want.lines().count(),
        have.lines().count()
    )
}

fn display(p: &Path) -> String {
    p.canonicalize()
        .unwrap_or_else(|_| p.to_owned())
        .display()
        .to_string()
}

#[test]
fn header_is_up_to_date() {
    let generated = generate();
    let path = header_path();
    if std::env::var_os("MQLITE_UPDATE_HEADER").is_some_and(|v| v == "1") {
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        if old == generated {
            eprintln!("{} is already up to date", display(&path));
        } else {
            std::fs::write(&path, &generated)
                .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
            eprintln!("updated {}", display(&path));
        }
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}\nGenerate it with `make header` \
             (MQLITE_UPDATE_HEADER=1 cargo test -p mqlite-ffi --test header).",
            display(&path)
        )
    });
    assert!(
        committed == generated,
        "{} is stale: it differs from what cbindgen generates from ffi/src.\n{}\n\
         Regenerate it with `make header` (MQLITE_UPDATE_HEADER=1 cargo test -p mqlite-ffi \
         --test header) and commit the result.",
        display(&path),
        first_difference(&generated, &committed)
    );
}

/// `major * 1000000 + minor * 1000 + patch` of the crate version, computed
/// here independently of the library's own `mql_version_number`.
fn version_number() -> u32 {
    let part = |s: &str| -> u32 { s.parse().expect("a decimal version part") };
    part(env!("CARGO_PKG_VERSION_MAJOR")) * 1_000_000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 1_000
        + part(env!("CARGO_PKG_VERSION_PATCH"))
}

/// The version #defines in cbindgen.toml must follow the crate version.
#[test]
fn version_defines_match_the_crate() {
    let text = config().after_includes.unwrap_or_default();
    let want = [
        format!(
            "#define MQLITE_VERSION_MAJOR {}",
            env!("CARGO_PKG_VERSION_MAJOR")
        ),
        format!(
            "#define MQLITE_VERSION_MINOR {}",
            env!("CARGO_PKG_VERSION_MINOR")
        ),
        format!(
            "#define MQLITE_VERSION_PATCH {}",
            env!("CARGO_PKG_VERSION_PATCH")
        ),
        format!("#define MQLITE_VERSION \"{}\"", env!("CARGO_PKG_VERSION")),
        format!("#define MQLITE_VERSION_NUMBER {}", version_number()),
    ];
    for line in want {
        assert!(
            text.lines().any(|l| l.trim() == line),
            "ffi/cbindgen.toml's after_includes lacks `{line}`: update the version #defines \
             there to the crate version {}, then run `make header`",
            env!("CARGO_PKG_VERSION")
        );
    }
}
