//! Fuzzes vpn-proxy's HTTP proxy parser: no input may panic; a head parsed takes at most the
//! input; every prefix parses as "incomplete" or exactly as the whole does (the server reads
//! piece by piece); a request forwarded to an origin is itself a valid head with the
//! origin-form target, our Host first and `Connection` last, and no proxy headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vpn_proxy::http::{self, HttpError, ProxyRequest};

fuzz_target!(|data: &[u8]| {
    let whole = http::parse_head(data);
    for n in 0..data.len() {
        let part = http::parse_head(&data[..n]);
        assert!(
            part == Err(HttpError::Incomplete) || part == whole,
            "prefix {n}: {part:?}, whole: {whole:?}"
        );
    }
    let (head, used) = match whole {
        Ok(h) => h,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert!([400, 431].contains(&e.status()));
            return;
        }
    };
    assert!(used <= data.len() && used <= http::MAX_HEAD);
    for h in &head.headers {
        let _ = http::basic_credentials(&h.value);
    }
    let _ = http::is_authorized(&head, "user", "pass");
    match ProxyRequest::from_head(&head) {
        Ok(ProxyRequest::Connect { host, port }) => {
            assert_eq!(head.method, "CONNECT");
            assert!(!host.is_empty() && port != 0);
        }
        Ok(ProxyRequest::Forward {
            host,
            port,
            path,
            host_header,
        }) => {
            assert!(!host.is_empty() && port != 0);
            assert!(path.starts_with('/'));
            let out = http::origin_request(&head, &path, &host_header);
            let (fwd, n) = http::parse_head(&out).expect("the forwarded head parses");
            assert_eq!(n, out.len());
            assert_eq!(
                (&fwd.method, &fwd.target, &fwd.version),
                (&head.method, &path, &head.version)
            );
            assert!(
                fwd.headers[0].name == "Host" && fwd.headers[0].value == host_header.as_bytes()
            );
            assert_eq!(
                fwd.headers.last().map(|h| h.name.as_str()),
                Some("Connection")
            );
            assert!(fwd.header("proxy-authorization").is_none());
            assert!(fwd.header("proxy-connection").is_none());
        }
        Err(e) => assert_eq!(e.status(), 400),
    }
});
