//! The entry points with bad arguments (no TUN needed): every one answers with its error
//! value and nothing crashes. Tunnels on a real TUN are tested by the C host
//! (`tests/c_host.rs`).

use super::*;
use std::ffi::CStr;

/// Handles no test here ever creates.
const UNKNOWN: [c_int; 4] = [-1, i32::MIN, 4096, i32::MAX];

#[test]
fn turn_on_refuses_null_or_non_utf8_settings_and_bad_fds() {
    // SAFETY: NULL and static NUL-terminated literals are valid arguments.
    unsafe {
        assert_eq!(wgTurnOn(std::ptr::null(), 0), -1);
        assert_eq!(wgTurnOn(c"private_key=\xff".as_ptr(), 0), -1);
        assert_eq!(wgTurnOn(c"".as_ptr(), -1), -1);
        assert_eq!(wgTurnOn(c"".as_ptr(), i32::MIN), -1);
        // Not open (far above anything a test process holds).
        assert_eq!(wgTurnOn(c"".as_ptr(), 1 << 20), -1);
    }
}

#[test]
fn turn_on_refuses_an_fd_that_is_not_a_tun_and_leaves_it_open() {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open("/dev/null").unwrap();
    // SAFETY: a static NUL-terminated literal.
    assert_eq!(unsafe { wgTurnOn(c"".as_ptr(), f.as_raw_fd()) }, -1);
    // The caller's fd is still its own and open.
    assert!(f.metadata().is_ok());
}

#[test]
fn unknown_handles_get_error_values() {
    for h in UNKNOWN {
        // SAFETY: a static NUL-terminated literal.
        assert_eq!(unsafe { wgSetConfig(h, c"listen_port=1\n".as_ptr()) }, -1);
        assert!(wgGetConfig(h).is_null());
        assert_eq!(wgGetSocketV4(h), -1);
        assert_eq!(wgGetSocketV6(h), -1);
        wgTurnOff(h);
        wgBumpSockets(h);
        wgDisableSomeRoamingForBrokenMobileSemantics(h);
    }
}

#[test]
fn memory_budget_is_zero_or_at_least_a_mebibyte() {
    let min = vpn_device::MIN_MEMORY_BUDGET;
    assert_eq!(memory_budget(0), Ok(0));
    assert_eq!(memory_budget(min as i64), Ok(min));
    assert_eq!(memory_budget(16 << 20), Ok(16 << 20));
    for bad in [-1, i64::MIN, 1, min as i64 - 1] {
        assert!(memory_budget(bad).is_err(), "{bad}");
    }
}

/// The only test here that sets the budget (the tests run in parallel in one process).
#[test]
fn a_refused_memory_budget_leaves_the_setting_as_it_was() {
    assert_eq!(wgSetMemoryBudget(16 << 20), 0);
    assert_eq!(wgSetMemoryBudget(-1), -22);
    assert_eq!(wgSetMemoryBudget(4096), -22);
    assert_eq!(MEMORY_BUDGET.load(Ordering::Relaxed), 16 << 20);
    assert_eq!(wgSetMemoryBudget(0), 0);
    assert_eq!(MEMORY_BUDGET.load(Ordering::Relaxed), 0);
    assert_eq!(
        wgSetMemoryBudget(vpn_device::DEFAULT_MEMORY_BUDGET as i64),
        0
    );
}

#[test]
fn version_is_a_static_string() {
    let v = wgVersion();
    assert!(!v.is_null());
    // SAFETY: a static NUL-terminated string.
    let s = unsafe { CStr::from_ptr(v) }.to_str().unwrap();
    assert_eq!(s, env!("CARGO_PKG_VERSION"));
    assert_eq!(wgVersion(), v, "the same string every time");
}

/// Frees a string from the library and returns it.
fn take(p: *mut c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated malloc'ed string from the library, freed exactly once here.
    unsafe {
        let s = CStr::from_ptr(p).to_string_lossy().into_owned();
        libc::free(p.cast());
        Some(s)
    }
}

const CONFIG: &CStr = c"[Interface]
PrivateKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=
Address = 100.64.0.2/24
DNS = 100.64.0.1

[Peer]
PublicKey = xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=
Endpoint = 198.18.0.1:51820
AllowedIPs = 0.0.0.0/0
";

#[test]
fn network_settings_come_back_as_json_and_errors_as_an_error_object() {
    // SAFETY: NUL-terminated static strings and NULL are valid arguments.
    let (ok, bad, utf8, null) = unsafe {
        (
            take(wgNetworkSettings(CONFIG.as_ptr())).unwrap(),
            take(wgNetworkSettings(c"[Interface]\nPrivateKey = x\n".as_ptr())).unwrap(),
            take(wgNetworkSettings(c"[Interface]\xff".as_ptr())).unwrap(),
            take(wgNetworkSettings(std::ptr::null())),
        )
    };
    let v: serde_json::Value = serde_json::from_str(&ok).unwrap();
    assert_eq!(v["ipv4"]["addresses"][0]["address"], "100.64.0.2");
    assert_eq!(v["ipv4"]["excluded_routes"][0]["destination"], "198.18.0.1");
    assert!(v["uapi"]
        .as_str()
        .unwrap()
        .contains("endpoint=198.18.0.1:51820"));
    let e: serde_json::Value = serde_json::from_str(&bad).unwrap();
    assert!(e["error"].as_str().unwrap().starts_with("line 2:"), "{bad}");
    let e: serde_json::Value = serde_json::from_str(&utf8).unwrap();
    assert_eq!(e["error"], "string is not UTF-8");
    assert_eq!(null, None);
}

#[test]
fn uapi_from_config_is_the_settings_text_or_null() {
    // SAFETY: NUL-terminated static strings and NULL are valid arguments.
    let (ok, bad, null) = unsafe {
        (
            take(wgUapiFromConfig(CONFIG.as_ptr())).unwrap(),
            take(wgUapiFromConfig(c"[Peer]\n".as_ptr())),
            take(wgUapiFromConfig(std::ptr::null())),
        )
    };
    assert!(ok.starts_with("private_key="), "{ok}");
    assert!(
        ok.contains("replace_allowed_ips=true\nallowed_ip=0.0.0.0/0\n"),
        "{ok}"
    );
    assert_eq!((bad, null), (None, None));
}

#[test]
fn no_utun_fd_off_apple_systems() {
    assert_eq!(wgFindUtunFd(), -1);
}

/// What the test logger received.
static LINES: parking_lot::Mutex<Vec<(c_int, String)>> = parking_lot::Mutex::new(Vec::new());

unsafe extern "C" fn record(context: *mut c_void, level: c_int, msg: *const c_char) {
    assert_eq!(context as usize, 0x5eed);
    // SAFETY: the library passes a NUL-terminated line valid during the call.
    let s = unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned();
    LINES.lock().push((level, s));
}

#[test]
fn the_logger_gets_lines_with_wireguardkit_levels() {
    // SAFETY: `record` may be called from any thread with this context for the whole test run.
    unsafe { wgSetLogger(0x5eed as *mut c_void, Some(record)) };
    tracing::error!("ffi logger test: an error line");
    tracing::debug!("ffi logger test: a verbose line");
    let lines = LINES.lock().clone();
    let find = |needle: &str| {
        lines
            .iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(lvl, l)| (*lvl, l.ends_with('\n')))
    };
    assert_eq!(find("an error line"), Some((logger::LEVEL_ERROR, false)));
    assert_eq!(find("a verbose line"), Some((logger::LEVEL_VERBOSE, false)));
}
