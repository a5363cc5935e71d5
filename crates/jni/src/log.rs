//! Where the tunnel's log lines go: on Android, logcat under the Go library's tag,
#![cfg_attr(not(target_os = "android"), allow(dead_code))]
//! `WireGuard/GoBackend/<ifname>` (the interface name the app passed to `wgTurnOn`); anywhere
//! else, the process's `tracing` subscriber, or standard error if it has none.
//!
//! Installed on the first `wgTurnOn`. A process that already has a global subscriber keeps it.

use std::fmt::{self, Write as _};
use std::sync::Once;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

static INSTALL: Once = Once::new();

/// The tag of lines that name no device.
const TAG: &str = "WireGuard/GoBackend";

/// Installs the log sink once per process.
pub(crate) fn init() {
    INSTALL.call_once(|| {
        if install().is_err() {
            tracing::debug!("the process already has a log subscriber; it keeps the log");
        }
    });
}

#[cfg(target_os = "android")]
fn install() -> Result<(), tracing::subscriber::SetGlobalDefaultError> {
    use tracing_subscriber::layer::SubscriberExt;
    let subscriber = tracing_subscriber::registry()
        .with(Logcat::new(logcat::write))
        .with(tracing_subscriber::filter::LevelFilter::DEBUG);
    tracing::subscriber::set_global_default(subscriber)
}

#[cfg(not(target_os = "android"))]
fn install() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init()
}

/// A line for logcat: its priority (`android/log.h`'s `ANDROID_LOG_*`), tag and text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Line {
    pub(crate) priority: i32,
    pub(crate) tag: String,
    pub(crate) text: String,
}

/// Logcat's priority for a `tracing` level.
fn priority(level: &Level) -> i32 {
    match *level {
        Level::ERROR => 6,
        Level::WARN => 5,
        Level::INFO => 4,
        Level::DEBUG => 3,
        Level::TRACE => 2,
    }
}

/// A `tracing` layer that turns each event into a [`Line`] for `sink`.
pub(crate) struct Logcat<F> {
    sink: F,
}

impl<F: Fn(&Line)> Logcat<F> {
    pub(crate) fn new(sink: F) -> Self {
        Logcat { sink }
    }
}

impl<S: Subscriber, F: Fn(&Line) + 'static> Layer<S> for Logcat<F> {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let tag = match fields.device {
            Some(d) => format!("{TAG}/{d}"),
            None => TAG.to_owned(),
        };
        (self.sink)(&Line {
            priority: priority(event.metadata().level()),
            tag,
            text: fields.text,
        });
    }
}

/// An event's message and other fields; `device` becomes the tag.
#[derive(Default)]
struct Fields {
    device: Option<String>,
    text: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "device" => self.device = Some(format!("{value:?}")),
            "message" => {
                let rest = std::mem::take(&mut self.text);
                let _ = write!(self.text, "{value:?}{rest}");
            }
            name => {
                let _ = write!(self.text, " {name}={value:?}");
            }
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "device" => self.device = Some(value.to_owned()),
            _ => self.record_debug(field, &value),
        }
    }
}

#[cfg(target_os = "android")]
mod logcat {
    use super::Line;
    use std::ffi::{c_char, c_int, CString};

    #[link(name = "log")]
    extern "C" {
        fn __android_log_write(prio: c_int, tag: *const c_char, text: *const c_char) -> c_int;
    }

    /// Writes one line to logcat (NUL bytes, which C strings cannot hold, become spaces).
    pub(super) fn write(line: &Line) {
        let c = |s: &str| CString::new(s.replace('\0', " ")).unwrap_or_default();
        let (tag, text) = (c(&line.tag), c(&line.text));
        // SAFETY: both are NUL-terminated strings alive for the call; liblog copies them.
        unsafe { __android_log_write(line.priority, tag.as_ptr(), text.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn lines_are_tagged_with_the_device_and_carry_their_fields() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = lines.clone();
        let subscriber = tracing_subscriber::registry().with(Logcat::new(move |l: &Line| {
            seen.lock()
                .unwrap()
                .push((l.priority, l.tag.clone(), l.text.clone()))
        }));
        tracing::subscriber::with_default(subscriber, || {
            let name = "mytunnel";
            tracing::info!(device = %name, "interface up");
            tracing::error!(device = "wg0", peer = 3, "handshake failed");
            tracing::debug!("no device here");
        });
        assert_eq!(
            *lines.lock().unwrap(),
            vec![
                (
                    4,
                    "WireGuard/GoBackend/mytunnel".to_owned(),
                    "interface up".to_owned()
                ),
                (
                    6,
                    "WireGuard/GoBackend/wg0".to_owned(),
                    "handshake failed peer=3".to_owned()
                ),
                (
                    3,
                    "WireGuard/GoBackend".to_owned(),
                    "no device here".to_owned()
                ),
            ]
        );
    }
}
