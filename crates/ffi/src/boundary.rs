//! What every entry point does at the boundary: catch panics, read C strings, hand out
//! malloc'ed ones.

use std::ffi::{c_char, CStr};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`; a panic becomes `fallback` (and an error log line) instead of unwinding into C,
/// which would abort the host.
pub(crate) fn guard<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            tracing::error!("{what}: internal error caught at the C boundary: {msg}");
            fallback
        }
    }
}

/// Why a C string argument was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StrError {
    /// The pointer was NULL.
    Null,
    /// The bytes are not UTF-8.
    NotUtf8,
}

impl fmt::Display for StrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StrError::Null => "NULL string",
            StrError::NotUtf8 => "string is not UTF-8",
        })
    }
}

/// Borrows a C string argument as `&str`.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid and unmodified for `'a`
/// (the duration of the call that received it).
pub(crate) unsafe fn str_arg<'a>(p: *const c_char) -> Result<&'a str, StrError> {
    if p.is_null() {
        return Err(StrError::Null);
    }
    // SAFETY: not NULL, and the caller guarantees a NUL-terminated string valid for 'a.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|_| StrError::NotUtf8)
}

/// A copy of `s` in memory from `malloc`, NUL-terminated, that the C caller releases with
/// `free()`. NULL if `s` holds a NUL byte (it could not be read back whole) or malloc fails.
pub(crate) fn malloc_string(s: &str) -> *mut c_char {
    if s.as_bytes().contains(&0) {
        return std::ptr::null_mut();
    }
    // SAFETY: malloc with a non-zero size; the result is checked for NULL before use.
    let p = unsafe { libc::malloc(s.len() + 1) }.cast::<u8>();
    if p.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `p` points to s.len() + 1 writable bytes that nothing else references; the source
    // is `s`'s s.len() bytes, which cannot overlap a fresh allocation.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
        *p.add(s.len()) = 0;
    }
    p.cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn str_arg_refuses_null_and_invalid_utf8() {
        // SAFETY: NULL is allowed; the literals are NUL-terminated and static.
        unsafe {
            assert_eq!(str_arg(std::ptr::null()), Err(StrError::Null));
            assert_eq!(str_arg(c"\xff\xfe".as_ptr()), Err(StrError::NotUtf8));
            assert_eq!(str_arg(c"listen_port=1".as_ptr()), Ok("listen_port=1"));
        }
    }

    #[test]
    fn malloc_string_round_trips_and_refuses_interior_nul() {
        let p = malloc_string("private_key=00\n");
        assert!(!p.is_null());
        // SAFETY: `p` is a NUL-terminated malloc'ed string; freed exactly once below.
        unsafe {
            assert_eq!(CStr::from_ptr(p).to_str(), Ok("private_key=00\n"));
            libc::free(p.cast());
        }
        assert!(malloc_string("a\0b").is_null());
    }

    #[test]
    fn guard_turns_a_panic_into_the_fallback() {
        assert_eq!(guard("test", -1, || panic!("boom")), -1);
        assert_eq!(guard("test", -1, || 7), 7);
    }
}
