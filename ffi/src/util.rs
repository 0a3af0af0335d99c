//! Checked conversions of C arguments: pointers, strings, buffers; and the
//! preamble macros exported functions check their arguments with
//! ([`arg!`], [`out!`], [`free!`]).

use std::ffi::{c_char, c_void, CStr};
use std::path::PathBuf;
use std::ptr::NonNull;

use crate::error::{mql_status, Failure, FfiResult};

/// Checks a pointer argument of an exported function and binds what it
/// points to, naming the argument in the error by its own name
/// (`stringify!`). Returns early from the body (with `?`) on a bad pointer:
///
/// - `arg!(ref p)`: `&T` ([`arg_ref`]); `arg!(mut p)`: `&mut T`
///   ([`arg_mut`]); `arg!(opt_ref p)`: `Option<&T>`, NULL allowed
///   ([`opt_ref`]);
/// - `arg!(str p)`: `&str` ([`arg_str`]); `arg!(opt_str p)`: `Option<&str>`
///   ([`opt_str`]); `arg!(path p)`: a `PathBuf` ([`arg_path`]);
/// - `arg!(bytes p, len)`: `Option<&[u8]>` ([`arg_bytes`]); `arg!(slice p,
///   n)`: `&[T]` ([`arg_slice`]);
/// - `arg!(ref p else fallback)`: `&T`, or returns `fallback` (from an
///   accessor's closure) when `p` is NULL or misaligned.
///
/// Every exported function that uses it documents, in its `# Safety`
/// section, that each pointer argument is NULL or valid as its checker
/// requires; that contract is what the one `unsafe` block here relies on.
macro_rules! arg {
    (@call $f:ident($($a:expr),*)) => {
        // SAFETY: the exported function this expands in states in its
        // `# Safety` section that the argument is NULL or valid as
        // `$f` requires (a live object used by nothing else meanwhile for
        // `arg_mut`, a NUL-terminated string for `arg_str`, readable memory
        // of the given length for `arg_bytes` and `arg_slice`, a handle not
        // used again for `free_handle`); `$f` checks NULL, alignment and
        // lengths itself.
        unsafe { $crate::util::$f($($a),*) }
    };
    (ref $p:ident else $fallback:expr) => {
        match $crate::util::arg!(@call arg_ref($p, stringify!($p))) {
            Ok(v) => v,
            Err(_) => return $fallback,
        }
    };
    (ref $p:ident) => { $crate::util::arg!(@call arg_ref($p, stringify!($p)))? };
    (mut $p:ident) => { $crate::util::arg!(@call arg_mut($p, stringify!($p)))? };
    (opt_ref $p:ident) => { $crate::util::arg!(@call opt_ref($p, stringify!($p)))? };
    (str $p:ident) => { $crate::util::arg!(@call arg_str($p, stringify!($p)))? };
    (opt_str $p:ident) => { $crate::util::arg!(@call opt_str($p, stringify!($p)))? };
    (path $p:ident) => { $crate::util::arg!(@call arg_path($p, stringify!($p)))? };
    (bytes $p:ident, $len:ident) => {
        $crate::util::arg!(@call arg_bytes($p, $len, stringify!($p)))?
    };
    (slice $p:ident, $n:ident) => {
        $crate::util::arg!(@call arg_slice($p, $n, stringify!($p)))?
    };
}
pub(crate) use arg;

/// Checks an out-parameter of an exported function before any work is done,
/// naming it in the error by its own name; returns early (with `?`) when it
/// is bad:
///
/// - `out!(p)`: an [`Out`], non-NULL and aligned;
/// - `out!(opt p)`: an `Option<Out>`, NULL allowed (the caller does not
///   want the result);
/// - `out!(array p, n)`: an `Option<OutArray>` of `n` elements, NULL
///   allowed.
macro_rules! out {
    (opt $p:ident) => {
        $crate::util::Out::optional($p, stringify!($p))?
    };
    (array $p:ident, $n:ident) => {
        $crate::util::OutArray::optional($p, $n, stringify!($p))?
    };
    ($p:ident) => {
        $crate::util::Out::new($p, stringify!($p))?
    };
}
pub(crate) use out;

/// The body of a `_free` function: takes back and drops the handle `p`
/// made by [`into_handle`] (NULL does nothing), a panic included.
macro_rules! free {
    ($p:ident) => {
        $crate::error::guard_value((), || $crate::util::arg!(@call free_handle($p)))
    };
}
pub(crate) use free;

/// `p` as a shared reference: `MQL_NULL_ARGUMENT` when NULL,
/// `MQL_INVALID_ARGUMENT` when misaligned.
///
/// # Safety
/// `p` is NULL or points to a live `T` that nobody mutates during `'a`.
pub(crate) unsafe fn arg_ref<'a, T>(p: *const T, name: &str) -> FfiResult<&'a T> {
    if p.is_null() {
        return Err(Failure::null(name));
    }
    if !p.is_aligned() {
        return Err(Failure::invalid(format!("argument `{name}` is misaligned")));
    }
    // SAFETY: non-NULL and aligned, and by the caller's contract it points
    // to a live T not mutated during 'a.
    Ok(unsafe { &*p })
}

/// `p` as an exclusive reference: `MQL_NULL_ARGUMENT` when NULL,
/// `MQL_INVALID_ARGUMENT` when misaligned.
///
/// # Safety
/// `p` is NULL or points to a live `T` that nothing else uses during `'a`.
pub(crate) unsafe fn arg_mut<'a, T>(p: *mut T, name: &str) -> FfiResult<&'a mut T> {
    if p.is_null() {
        return Err(Failure::null(name));
    }
    if !p.is_aligned() {
        return Err(Failure::invalid(format!("argument `{name}` is misaligned")));
    }
    // SAFETY: non-NULL and aligned, and by the caller's contract it points
    // to a live T used by nothing else during 'a.
    Ok(unsafe { &mut *p })
}

/// Like [`arg_ref`], with NULL allowed (`None`).
///
/// # Safety
/// As [`arg_ref`].
pub(crate) unsafe fn opt_ref<'a, T>(p: *const T, name: &str) -> FfiResult<Option<&'a T>> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: forwarded caller contract.
        unsafe { arg_ref(p, name) }.map(Some)
    }
}

/// A checked out-parameter: non-NULL and aligned. Check every out-parameter
/// before doing any work, and [`Out::write`] only once everything succeeded.
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// Checks `p`: `MQL_NULL_ARGUMENT` when NULL, `MQL_INVALID_ARGUMENT`
    /// when misaligned.
    pub(crate) fn new(p: *mut T, name: &str) -> FfiResult<Out<T>> {
        let p = NonNull::new(p).ok_or_else(|| Failure::null(name))?;
        if !p.as_ptr().is_aligned() {
            return Err(Failure::invalid(format!("argument `{name}` is misaligned")));
        }
        Ok(Out(p))
    }

    /// Like [`Out::new`], with NULL allowed (`None`: the caller does not want
    /// the result).
    pub(crate) fn optional(p: *mut T, name: &str) -> FfiResult<Option<Out<T>>> {
        if p.is_null() {
            Ok(None)
        } else {
            Out::new(p, name).map(Some)
        }
    }

    /// Stores `value` without reading or dropping what was there.
    ///
    /// # Safety
    /// The pointer given to [`Out::new`] is valid for writes of a `T`.
    pub(crate) unsafe fn write(self, value: T) {
        // SAFETY: non-NULL and aligned (checked in `new`); valid for writes
        // by the caller's contract. `write` does not drop the old contents,
        // which may be uninitialised.
        unsafe { self.0.as_ptr().write(value) }
    }
}

/// A checked out-parameter array of `n` elements: non-NULL (when `n > 0`)
/// and aligned. Like [`Out`], check it before doing any work and
/// [`OutArray::write`] only once everything succeeded.
pub(crate) struct OutArray<T> {
    p: *mut T,
    n: usize,
}

impl<T: Copy> OutArray<T> {
    /// Checks `p` for `n` elements, with NULL allowed (`None`: the caller
    /// does not want the results); `MQL_INVALID_ARGUMENT` when misaligned
    /// or too large.
    pub(crate) fn optional(p: *mut T, n: usize, name: &str) -> FfiResult<Option<OutArray<T>>> {
        if p.is_null() {
            return Ok(None);
        }
        if !p.is_aligned() {
            return Err(Failure::invalid(format!("argument `{name}` is misaligned")));
        }
        if n.checked_mul(size_of::<T>())
            .is_none_or(|b| b > isize::MAX as usize)
        {
            return Err(Failure::invalid(format!(
                "argument `{name}`: count {n} is too large"
            )));
        }
        Ok(Some(OutArray { p, n }))
    }

    /// Stores `values` (exactly the `n` elements given to
    /// [`OutArray::optional`]; fewer or more is a bug, reported as a panic
    /// that the panic boundary turns into `MQL_PANIC`).
    ///
    /// # Safety
    /// The pointer given to [`OutArray::optional`] is valid for writes of
    /// `n` `T`s, not overlapping `values`.
    pub(crate) unsafe fn write(self, values: &[T]) {
        assert_eq!(values.len(), self.n, "out-parameter array length");
        // SAFETY: non-NULL and aligned (checked in `optional`); valid for
        // writes of `n` elements and not overlapping `values` by the
        // caller's contract; `values` holds exactly `n`. T is Copy, so
        // nothing needs dropping.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.p, self.n) }
    }
}

/// A NUL-terminated UTF-8 string argument: `MQL_NULL_ARGUMENT` when NULL,
/// `MQL_INVALID_UTF8` when not UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays unchanged
/// during `'a`.
pub(crate) unsafe fn arg_str<'a>(p: *const c_char, name: &str) -> FfiResult<&'a str> {
    if p.is_null() {
        return Err(Failure::null(name));
    }
    // SAFETY: non-NULL, and NUL-terminated and unchanged during 'a by the
    // caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|e| {
        Failure::new(
            mql_status::MQL_INVALID_UTF8,
            format!(
                "argument `{name}` is not valid UTF-8 (bad byte at position {})",
                e.valid_up_to()
            ),
        )
    })
}

/// A path argument. On Unix any bytes are accepted (a path is an OS string,
/// not necessarily UTF-8); elsewhere it must be UTF-8.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn arg_path(p: *const c_char, name: &str) -> FfiResult<PathBuf> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        if p.is_null() {
            return Err(Failure::null(name));
        }
        // SAFETY: non-NULL and NUL-terminated by the caller's contract.
        let bytes = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    }
    #[cfg(not(unix))]
    {
        // SAFETY: forwarded caller contract.
        unsafe { arg_str(p, name) }.map(PathBuf::from)
    }
}

/// Like [`arg_str`], with NULL allowed (`None`).
///
/// # Safety
/// As [`arg_str`].
pub(crate) unsafe fn opt_str<'a>(p: *const c_char, name: &str) -> FfiResult<Option<&'a str>> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: forwarded caller contract.
        unsafe { arg_str(p, name) }.map(Some)
    }
}

/// A byte buffer `(p, len)`. NULL is `None` (allowed only with `len == 0`,
/// otherwise `MQL_NULL_ARGUMENT`); non-NULL with `len == 0` is an empty
/// slice.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes that stay unchanged during
/// `'a`.
pub(crate) unsafe fn arg_bytes<'a>(
    p: *const c_void,
    len: usize,
    name: &str,
) -> FfiResult<Option<&'a [u8]>> {
    if p.is_null() {
        return if len == 0 {
            Ok(None)
        } else {
            Err(Failure::null(name))
        };
    }
    if len > isize::MAX as usize {
        return Err(Failure::invalid(format!(
            "argument `{name}`: length {len} is too large"
        )));
    }
    // SAFETY: non-NULL, u8 needs no alignment, the length fits isize, and by
    // the caller's contract the memory is readable and unchanged during 'a.
    Ok(Some(unsafe {
        std::slice::from_raw_parts(p.cast::<u8>(), len)
    }))
}

/// A C array `(p, n)` of `T`. NULL is allowed only with `n == 0`.
///
/// # Safety
/// `p` is NULL or points to `n` live, initialised `T`s unchanged during
/// `'a`.
pub(crate) unsafe fn arg_slice<'a, T>(p: *const T, n: usize, name: &str) -> FfiResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::null(name));
    }
    if !p.is_aligned() {
        return Err(Failure::invalid(format!("argument `{name}` is misaligned")));
    }
    if n.checked_mul(size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Failure::invalid(format!(
            "argument `{name}`: count {n} is too large"
        )));
    }
    // SAFETY: non-NULL, aligned, the byte size fits isize, and by the
    // caller's contract the elements are live and unchanged during 'a.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Moves `value` to the heap and hands ownership to C.
pub(crate) fn into_handle<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}

/// Takes back and drops a handle made by [`into_handle`]; NULL is a no-op.
///
/// # Safety
/// `p` is NULL or came from [`into_handle`] of the same `T` and was not
/// freed yet; nothing uses it afterwards.
pub(crate) unsafe fn free_handle<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: by the caller's contract `p` came from Box::into_raw and
        // is released exactly once.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// A checked text out-parameter: a caller's buffer `(buf, buf_len)` and an
/// optional length out-parameter, filled like `snprintf`. `buf` may be NULL
/// only with `buf_len == 0` (the caller wants the length only).
pub(crate) struct TextOut {
    buf: *mut c_char,
    buf_len: usize,
    len_out: Option<Out<usize>>,
}

impl TextOut {
    /// Checks the parameters: `MQL_NULL_ARGUMENT` for a NULL `buf` with a
    /// length, `MQL_INVALID_ARGUMENT` for a misaligned `len_out` or a
    /// length too large.
    pub(crate) fn new(
        buf: *mut c_char,
        buf_len: usize,
        len_out: *mut usize,
        name: &str,
    ) -> FfiResult<TextOut> {
        if buf.is_null() && buf_len > 0 {
            return Err(Failure::null(name));
        }
        if buf_len > isize::MAX as usize {
            return Err(Failure::invalid(format!(
                "argument `{name}`: length {buf_len} is too large"
            )));
        }
        let len_out = Out::optional(len_out, &format!("{name}_len"))?;
        Ok(TextOut {
            buf,
            buf_len,
            len_out,
        })
    }

    /// Copies as much of `text` as fits in front of a NUL (all of it when
    /// `buf_len > text.len()`; nothing, not even the NUL, when `buf_len`
    /// is 0) and stores `text.len()` (without the NUL) in the length
    /// out-parameter: the text was cut short when that is at least
    /// `buf_len`.
    ///
    /// # Safety
    /// `buf` is NULL or valid for writes of `buf_len` bytes, not
    /// overlapping `text`; the length out-parameter is valid for writes.
    pub(crate) unsafe fn write(self, text: &[u8]) {
        if self.buf_len > 0 {
            let n = text.len().min(self.buf_len - 1);
            // SAFETY: `buf` is non-NULL (checked in `new` since buf_len > 0)
            // and valid for `buf_len` bytes by the caller's contract; n + 1
            // <= buf_len; u8 and c_char need no alignment; no overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), self.buf.cast::<u8>(), n);
                self.buf.add(n).write(0);
            }
        }
        if let Some(out) = self.len_out {
            // SAFETY: valid for writes by the caller's contract.
            unsafe { out.write(text.len()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_out(buf: &mut [u8], text: &str) -> usize {
        let mut len = usize::MAX;
        let out = TextOut::new(buf.as_mut_ptr().cast(), buf.len(), &raw mut len, "buf").unwrap();
        // SAFETY: `buf` and `len` are valid for writes.
        unsafe { out.write(text.as_bytes()) };
        len
    }

    #[test]
    fn text_out_copies_like_snprintf() {
        let mut buf = [b'x'; 8];
        assert_eq!(text_out(&mut buf, "abc"), 3);
        assert_eq!(&buf[..4], b"abc\0");
        assert_eq!(text_out(&mut buf, "abcdefghij"), 10);
        assert_eq!(&buf, b"abcdefg\0");
        let mut one = [b'x'; 1];
        assert_eq!(text_out(&mut one, "abc"), 3);
        assert_eq!(one, [0]);
        assert_eq!(text_out(&mut [], "abc"), 3);
        // A NULL buffer needs length 0.
        let mut len = 0;
        assert!(TextOut::new(std::ptr::null_mut(), 0, &raw mut len, "buf").is_ok());
        let e = TextOut::new(std::ptr::null_mut(), 4, &raw mut len, "buf")
            .err()
            .unwrap();
        assert_eq!(e.status, mql_status::MQL_NULL_ARGUMENT);
        // The length out-parameter is optional.
        let mut buf = [b'x'; 4];
        let out = TextOut::new(buf.as_mut_ptr().cast(), 4, std::ptr::null_mut(), "buf").unwrap();
        // SAFETY: `buf` is valid for writes.
        unsafe { out.write(b"hi") };
        assert_eq!(&buf[..3], b"hi\0");
    }
}
