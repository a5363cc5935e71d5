//! What every native method does at the JVM boundary: catch panics, leave no exception
//! pending, read and make Java strings.

use jni::objects::JString;
use jni::sys::jstring;
use jni::JNIEnv;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`; a panic becomes `fallback` (and an error line in the log) instead of unwinding
/// into the JVM, which would abort the app. Whatever way `f` ends, no Java exception is left
/// pending: the Java caller expects a return value, not a throw.
pub(crate) fn guard<'l, T>(
    env: &mut JNIEnv<'l>,
    what: &str,
    fallback: T,
    f: impl FnOnce(&mut JNIEnv<'l>) -> T,
) -> T {
    let out = match catch_unwind(AssertUnwindSafe(|| f(env))) {
        Ok(v) => v,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            tracing::error!("{what}: internal error caught at the JNI boundary: {msg}");
            fallback
        }
    };
    clear_exception(env, what);
    out
}

/// Clears a pending exception a failed JNI call raised (an `OutOfMemoryError` from
/// `NewStringUTF`, say), logging it.
fn clear_exception(env: &mut JNIEnv<'_>, what: &str) {
    if env.exception_check().unwrap_or(false) {
        tracing::error!("{what}: a Java exception was raised and cleared");
        let _ = env.exception_clear();
    }
}

/// Why a Java string argument was refused.
#[derive(Debug)]
pub(crate) enum StringError {
    /// The reference was null.
    Null,
    /// The JVM could not hand over its characters.
    Jni(jni::errors::Error),
}

impl fmt::Display for StringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StringError::Null => f.write_str("null string"),
            StringError::Jni(e) => write!(f, "unable to read the string: {e}"),
        }
    }
}

/// The characters of a `java.lang.String` argument.
pub(crate) fn string(env: &mut JNIEnv<'_>, s: &JString<'_>) -> Result<String, StringError> {
    if s.is_null() {
        return Err(StringError::Null);
    }
    env.get_string(s)
        .map(String::from)
        .map_err(StringError::Jni)
}

/// A new `java.lang.String` for the caller, or null (logged) if the JVM cannot make one.
pub(crate) fn new_string(env: &mut JNIEnv<'_>, s: &str) -> jstring {
    match env.new_string(s) {
        Ok(j) => j.into_raw(),
        Err(e) => {
            tracing::error!("unable to make a Java string: {e}");
            std::ptr::null_mut()
        }
    }
}
