//! Checking what C passes in: NULL pointers, strings, sizes, output pointers.

use std::ffi::{c_char, CStr};

use crate::status::{fail, Result, LOWTIDE_ERR_INVALID, LOWTIDE_ERR_NULL};

/// Largest buffer a caller may pass (a size beyond it is a bug on the caller's side, e.g. a
/// negative length cast to `size_t`).
pub(crate) const MAX_BUFFER: usize = 1 << 31;

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that lives for the call.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return fail(LOWTIDE_ERR_NULL, format!("{what} is NULL"));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .or_else(|e| fail(LOWTIDE_ERR_INVALID, format!("{what} is not UTF-8: {e}")))
}

/// An optional string argument (NULL: `None`).
///
/// # Safety
/// As [`str_arg`].
pub(crate) unsafe fn opt_str_arg<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    unsafe { str_arg(p, what) }.map(Some)
}

/// A byte buffer argument of `len` bytes (`p` may be NULL only when `len` is 0).
///
/// # Safety
/// `p` points to `len` readable bytes that live for the call.
pub(crate) unsafe fn bytes_arg<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a [u8]> {
    check_len(len, what)?;
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return fail(
            LOWTIDE_ERR_NULL,
            format!("{what} is NULL with length {len}"),
        );
    }
    // SAFETY: non-NULL, `len` bounded, readable per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

pub(crate) fn check_len(len: usize, what: &str) -> Result<()> {
    if len > MAX_BUFFER {
        return fail(
            LOWTIDE_ERR_INVALID,
            format!("{what} length {len} is absurd (allowed 0..={MAX_BUFFER})"),
        );
    }
    Ok(())
}

/// Writes `value` through an output pointer.
///
/// # Safety
/// `p` is NULL or points to writable memory for a `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, value: T, what: &str) -> Result<()> {
    if p.is_null() {
        return fail(LOWTIDE_ERR_NULL, format!("{what} is NULL"));
    }
    // SAFETY: non-NULL and writable per the caller's contract.
    unsafe { p.write(value) };
    Ok(())
}

/// Fails with `LOWTIDE_ERR_NULL` if `p` is NULL (checked before any work is done).
pub(crate) fn non_null<T>(p: *const T, what: &str) -> Result<()> {
    if p.is_null() {
        return fail(LOWTIDE_ERR_NULL, format!("{what} is NULL"));
    }
    Ok(())
}

/// Copies `s` into a caller's buffer of `cap` bytes as a NUL-terminated string.
///
/// # Safety
/// `buf` is NULL or points to `cap` writable bytes.
pub(crate) unsafe fn write_str(buf: *mut c_char, cap: usize, s: &str, what: &str) -> Result<()> {
    non_null(buf, what)?;
    check_len(cap, what)?;
    if s.len() + 1 > cap {
        return fail(
            crate::status::LOWTIDE_ERR_BUFFER_TOO_SMALL,
            format!("{what} needs {} bytes, has {cap}", s.len() + 1),
        );
    }
    // SAFETY: `buf` holds `cap` > s.len() bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(())
}
