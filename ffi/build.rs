//! Link settings of the C library.
//!
//! On Linux (and the BSDs) the shared library gets the SONAME
//! `libmqlite.so.<major>` (`libmqlite.so.0` for 0.x): programs linked
//! against it load the installed `libmqlite.so.0.1.0` through the
//! `libmqlite.so.0` symlink that `make install` creates, and a release that
//! breaks the ABI can be installed beside it under a new major number.
//!
//! A program linked against the build tree (`-Ltarget/release -lmqlite`)
//! then asks for `libmqlite.so.0` too, so this script also places that
//! symlink, pointing at `libmqlite.so`, in the profile directory.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if !(os == "linux" || os == "android" || os.ends_with("bsd")) {
        return;
    }
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".to_owned());
    let soname = format!("libmqlite.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    // OUT_DIR is <target>/<profile>/build/mqlite-ffi-<hash>/out.
    let out = std::env::var("OUT_DIR").unwrap_or_default();
    if let Some(profile_dir) = Path::new(&out).ancestors().nth(3) {
        link_in_build_tree(&profile_dir.join(&soname));
    }
}

#[cfg(unix)]
fn link_in_build_tree(link: &Path) {
    if link.symlink_metadata().is_err() {
        if let Err(e) = std::os::unix::fs::symlink("libmqlite.so", link) {
            println!("cargo:warning=could not create {}: {e}", link.display());
        }
    }
}

#[cfg(not(unix))]
fn link_in_build_tree(_link: &Path) {}
