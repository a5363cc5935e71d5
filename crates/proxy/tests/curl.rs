//! curl as the client of both proxies (skipped, saying so, where curl is not installed).

mod common;

use common::*;
use std::process::Command;
use vpn_proxy::{serve_http, serve_socks5, Credentials, HostNetwork};

/// Runs curl with `args` (no proxy settings from the environment); `None` if there is none.
fn curl(args: &[&str]) -> Option<(bool, String, String)> {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "10"])
        .args(args)
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env_remove("http_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output();
    match out {
        Ok(o) => Some((
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("skipped: curl is not on PATH");
            None
        }
        Err(e) => panic!("running curl: {e}"),
    }
}

#[test]
fn curl_through_socks5_with_remote_names() {
    let (origin, heads) = http_origin();
    let srv = serve_socks5(&HostNetwork, loopback(), host(), None, limits()).unwrap();
    let proxy = srv.local_addr().to_string();
    let url = format!("http://localhost:{}/socks", origin.port());
    let Some((ok, out, err)) = curl(&["--socks5-hostname", &proxy, &url]) else {
        return;
    };
    assert!(ok, "curl failed: {err}");
    assert_eq!(out, "hello from origin\n");
    assert!(heads
        .recv_timeout(WAIT)
        .unwrap()
        .starts_with("GET /socks HTTP/1.1\r\n"));
}

#[test]
fn curl_through_socks5_with_a_password() {
    let (origin, _heads) = http_origin();
    let auth = Credentials {
        username: "u".into(),
        password: "p w".into(),
    };
    let srv = serve_socks5(&HostNetwork, loopback(), host(), Some(auth), limits()).unwrap();
    let proxy = format!("socks5h://u:p%20w@{}", srv.local_addr());
    let url = format!("http://127.0.0.1:{}/", origin.port());
    let Some((ok, out, err)) = curl(&["--proxy", &proxy, &url]) else {
        return;
    };
    assert!(ok, "curl failed: {err}");
    assert_eq!(out, "hello from origin\n");
    let bad = format!("socks5h://u:nope@{}", srv.local_addr());
    let (ok, _, _) = curl(&["--proxy", &bad, &url]).unwrap();
    assert!(!ok, "a wrong password must fail");
}

#[test]
fn curl_through_the_http_proxy() {
    let (origin, heads) = http_origin();
    let srv = serve_http(&HostNetwork, loopback(), host(), None, limits()).unwrap();
    let proxy = format!("http://{}", srv.local_addr());
    let url = format!("http://localhost:{}/plain?x=1", origin.port());
    let Some((ok, out, err)) = curl(&["-x", &proxy, &url]) else {
        return;
    };
    assert!(ok, "curl failed: {err}");
    assert_eq!(out, "hello from origin\n");
    assert!(heads
        .recv_timeout(WAIT)
        .unwrap()
        .starts_with("GET /plain?x=1 HTTP/1.1\r\n"));

    // The same through a CONNECT tunnel.
    let (ok, out, err) = curl(&["-x", &proxy, "--proxytunnel", &url]).unwrap();
    assert!(ok, "curl failed: {err}");
    assert_eq!(out, "hello from origin\n");
}

#[test]
fn curl_with_http_proxy_credentials() {
    let (origin, _heads) = http_origin();
    let auth = Credentials {
        username: "u".into(),
        password: "pw".into(),
    };
    let srv = serve_http(&HostNetwork, loopback(), host(), Some(auth), limits()).unwrap();
    let proxy = format!("http://{}", srv.local_addr());
    let url = format!("http://127.0.0.1:{}/", origin.port());
    let Some((ok, out, err)) = curl(&["-x", &proxy, "--proxy-user", "u:pw", &url]) else {
        return;
    };
    assert!(ok, "curl failed: {err}");
    assert_eq!(out, "hello from origin\n");
    let (_, out, _) = curl(&["-x", &proxy, "-o", "/dev/null", "-w", "%{http_code}", &url]).unwrap();
    assert_eq!(out, "407");
}
