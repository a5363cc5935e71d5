//! The UAPI text protocol: round trips, every error path, and the output `wg showconf` reads.

#![forbid(unsafe_code)]

use std::io::{BufReader, Cursor};
use std::sync::Arc;
use vpn_conn::memory::MemoryNetwork;
use vpn_device::uapi::{IPC_ERROR_INVALID, IPC_ERROR_PORT_IN_USE, IPC_ERROR_PROTOCOL};
use vpn_device::{Device, Logger};
use vpn_ipc::{AllowedIp, Change, Endpoint, PeerChange};
use vpn_tests::{private_key, wait_for};
use vpn_tun::memory::MemoryTun;

fn device(net: &MemoryNetwork) -> Device {
    let (tun, _h) = MemoryTun::new("uapi0", 1420, 1);
    let dev = Device::new(
        Arc::new(tun),
        Arc::new(net.bind("198.18.1.1".parse().unwrap(), 1)),
        Logger::new("uapi"),
    );
    // The memory TUN reports "up" at creation; take the device down so no handshake traffic
    // changes the counters under the test.
    wait_for(std::time::Duration::from_secs(5), || dev.is_up());
    dev.down().unwrap();
    dev
}

#[test]
fn round_trip_with_hundreds_of_peers_and_thousands_of_allowed_ips() {
    let net = MemoryNetwork::new();
    let dev = device(&net);
    let own = private_key();
    let mut cfg = format!(
        "private_key={}\nfwmark=51820\nreplace_peers=true\n",
        own.to_hex()
    );
    let mut expect_peers = Vec::new();
    for p in 0..300u32 {
        let k = private_key().public_key();
        let psk = [p as u8; 32]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        cfg += &format!(
            "public_key={}\npreshared_key={psk}\nendpoint=198.18.{}.{}:{}\npersistent_keepalive_interval={}\nreplace_allowed_ips=true\n",
            k.to_hex(),
            p / 250,
            p % 250 + 1,
            10000 + p,
            p % 30
        );
        let mut ips = Vec::new();
        for i in 0..10u32 {
            // Distinct per peer (an overlap would move the prefix: last writer wins).
            let ip = format!("10.{}.{}.{}/28", p / 256, p % 256, (i * 16) ^ 0x50);
            let ip = if i == 9 {
                format!("fd00:{p:x}:1::/64")
            } else {
                ip
            };
            if !ips.contains(&ip) {
                cfg += &format!("allowed_ip={ip}\n");
                ips.push(ip);
            }
        }
        expect_peers.push((k, psk, ips));
    }
    dev.ipc_set(&cfg).unwrap();
    let out = dev.ipc_get().unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("private_key={}", own.to_hex()));
    // The memory TUN reports "up" at creation, so the device is up with a random port.
    assert!(lines[1].starts_with("listen_port="), "{}", lines[1]);
    assert_eq!(lines[2], "fwmark=51820");
    // Each peer: the fields in wireguard-go's order, then its allowed IPs in insertion order.
    let mut i = 3;
    for (k, psk, ips) in &expect_peers {
        assert_eq!(lines[i], format!("public_key={}", k.to_hex()));
        assert_eq!(lines[i + 1], format!("preshared_key={psk}"));
        assert_eq!(lines[i + 2], "protocol_version=1");
        assert!(lines[i + 3].starts_with("endpoint=198.18."));
        assert_eq!(lines[i + 4], "last_handshake_time_sec=0");
        assert_eq!(lines[i + 5], "last_handshake_time_nsec=0");
        assert_eq!(lines[i + 6], "tx_bytes=0");
        assert_eq!(lines[i + 7], "rx_bytes=0");
        assert!(lines[i + 8].starts_with("persistent_keepalive_interval="));
        i += 9;
        for ip in ips {
            assert_eq!(lines[i], format!("allowed_ip={ip}"));
            i += 1;
        }
    }
    assert_eq!(i, lines.len());
    // Applying the dump again changes nothing (setconf after showconf).
    let again: String = out
        .lines()
        .filter(|l| {
            !l.starts_with("last_handshake")
                && !l.starts_with("tx_bytes")
                && !l.starts_with("rx_bytes")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    dev.ipc_set(&format!("replace_peers=true\n{again}"))
        .unwrap();
    assert_eq!(dev.ipc_get().unwrap(), out);
}

#[test]
fn every_error_path_reports_and_leaves_the_device_usable() {
    let net = MemoryNetwork::new();
    let dev = device(&net);
    let pk = private_key().public_key().to_hex();
    let cases: Vec<(String, i64)> = vec![
        ("no equals sign".into(), IPC_ERROR_PROTOCOL),
        ("bogus_key=1".into(), IPC_ERROR_INVALID),
        ("private_key=zz".into(), IPC_ERROR_INVALID),
        ("private_key=00".into(), IPC_ERROR_INVALID),
        ("listen_port=65536".into(), IPC_ERROR_INVALID),
        ("listen_port=-1".into(), IPC_ERROR_INVALID),
        ("fwmark=x".into(), IPC_ERROR_INVALID),
        ("replace_peers=yes".into(), IPC_ERROR_INVALID),
        ("public_key=abc".into(), IPC_ERROR_INVALID),
        (
            format!("public_key={pk}\nendpoint=nowhere"),
            IPC_ERROR_INVALID,
        ),
        (
            format!("public_key={pk}\nendpoint=1.2.3.4"),
            IPC_ERROR_INVALID,
        ),
        (
            format!("public_key={pk}\npreshared_key=12"),
            IPC_ERROR_INVALID,
        ),
        (
            format!("public_key={pk}\npersistent_keepalive_interval=70000"),
            IPC_ERROR_INVALID,
        ),
        (
            format!("public_key={pk}\nallowed_ip=10.0.0.0/33"),
            IPC_ERROR_INVALID,
        ),
        (
            format!("public_key={pk}\nallowed_ip=10.0.0.0"),
            IPC_ERROR_INVALID,
        ),
        (format!("public_key={pk}\nallowed_ip=-"), IPC_ERROR_INVALID),
        (
            format!("public_key={pk}\nprotocol_version=2"),
            IPC_ERROR_INVALID,
        ),
        (
            format!("public_key={pk}\nreplace_allowed_ips=false"),
            IPC_ERROR_INVALID,
        ),
        (format!("public_key={pk}\nremove=1"), IPC_ERROR_INVALID),
        (
            format!("public_key={pk}\nupdate_only=maybe"),
            IPC_ERROR_INVALID,
        ),
        (format!("public_key={pk}\nlisten_port=1"), IPC_ERROR_INVALID),
        (
            format!("public_key={pk}\nprivate_key={pk}"),
            IPC_ERROR_INVALID,
        ),
    ];
    for (cfg, code) in cases {
        let e = dev.ipc_set(&cfg).expect_err(&cfg);
        assert_eq!(e.code(), code, "{cfg}: {e}");
    }
    // A port in use: another bind on the same network address holds it.
    let squatter = net.bind("198.18.1.1".parse().unwrap(), 1);
    use vpn_conn::Bind;
    let (_f, port) = squatter.open(0).unwrap();
    dev.up().unwrap();
    let e = dev.ipc_set(&format!("listen_port={port}")).unwrap_err();
    assert_eq!(e.code(), IPC_ERROR_PORT_IN_USE);
    // Processing stopped at the first error, but what came before stayed applied.
    let key = private_key();
    let e = dev
        .ipc_set(&format!(
            "private_key={}\nfwmark=7\nbogus=1\nfwmark=8\n",
            key.to_hex()
        ))
        .unwrap_err();
    assert_eq!(e.code(), IPC_ERROR_INVALID);
    let out = dev.ipc_get().unwrap();
    assert!(out.contains(&format!("private_key={}", key.to_hex())));
    assert!(out.contains("fwmark=7\n"));
    // Still usable.
    dev.ipc_set("listen_port=0\n").unwrap();
    assert!(dev.listen_port() != 0);
}

#[test]
fn peer_section_semantics() {
    let net = MemoryNetwork::new();
    let dev = device(&net);
    let own = private_key();
    dev.ipc_set(&format!("private_key={}", own.to_hex()))
        .unwrap();
    let p1 = private_key().public_key().to_hex();
    let p2 = private_key().public_key().to_hex();
    // update_only on an unknown peer is a no-op; on a known one it updates.
    dev.ipc_set(&format!(
        "public_key={p1}\nupdate_only=true\nallowed_ip=10.0.0.0/8\n"
    ))
    .unwrap();
    assert!(!dev.ipc_get().unwrap().contains(&p1));
    dev.ipc_set(&format!(
        "public_key={p1}\nallowed_ip=10.0.0.0/8\nallowed_ip=10.1.2.3/16\n"
    ))
    .unwrap();
    dev.ipc_set(&format!(
        "public_key={p1}\nupdate_only=true\npersistent_keepalive_interval=25\n"
    ))
    .unwrap();
    let out = dev.ipc_get().unwrap();
    assert!(out.contains("persistent_keepalive_interval=25"));
    assert!(
        out.contains("allowed_ip=10.1.0.0/16"),
        "masked on insert:\n{out}"
    );
    // -prefix removes only that prefix, and only from its owner.
    dev.ipc_set(&format!("public_key={p2}\nallowed_ip=-10.0.0.0/8\n"))
        .unwrap();
    assert!(dev.ipc_get().unwrap().contains("allowed_ip=10.0.0.0/8"));
    dev.ipc_set(&format!("public_key={p1}\nallowed_ip=-10.0.0.0/8\n"))
        .unwrap();
    let out = dev.ipc_get().unwrap();
    assert!(!out.contains("allowed_ip=10.0.0.0/8"));
    // Moving a prefix to another peer: last writer wins.
    dev.ipc_set(&format!("public_key={p2}\nallowed_ip=10.1.0.0/16\n"))
        .unwrap();
    let out = dev.ipc_get().unwrap();
    let p2_part = &out[out.find(&p2).unwrap()..];
    assert!(p2_part.contains("allowed_ip=10.1.0.0/16"));
    assert_eq!(out.matches("allowed_ip=10.1.0.0/16").count(), 1);
    // Our own public key selects a dummy peer: nothing is created.
    dev.ipc_set(&format!(
        "public_key={}\nallowed_ip=10.9.0.0/16\n",
        own.public_key().to_hex()
    ))
    .unwrap();
    assert!(!dev.ipc_get().unwrap().contains(&own.public_key().to_hex()));
    // remove=true deletes the peer and its allowed IPs; the rest of the section is ignored.
    dev.ipc_set(&format!(
        "public_key={p2}\nremove=true\nallowed_ip=10.5.0.0/16\n"
    ))
    .unwrap();
    let out = dev.ipc_get().unwrap();
    assert!(!out.contains(&p2) && !out.contains("10.5.0.0"));
    // A private key equal to a peer's public key removes that peer.
    let k = private_key();
    dev.ipc_set(&format!("public_key={}\n", k.public_key().to_hex()))
        .unwrap();
    dev.ipc_set(&format!("private_key={}\n", k.to_hex()))
        .unwrap();
    assert!(!dev
        .ipc_get()
        .unwrap()
        .contains(&format!("public_key={}", k.public_key().to_hex())));
    // The private key is reported back clamped.
    let mut raw = [0xffu8; 32];
    raw[0] = 0xff;
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    dev.ipc_set(&format!("private_key={hex}\n")).unwrap();
    let out = dev.ipc_get().unwrap();
    assert!(
        out.starts_with(
            "private_key=f8ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"
        ),
        "{out}"
    );
    // All zeros clears it.
    dev.ipc_set(&format!("private_key={}\n", "0".repeat(64)))
        .unwrap();
    assert!(!dev.ipc_get().unwrap().contains("private_key="));
}

#[test]
fn framing_of_a_uapi_connection() {
    let net = MemoryNetwork::new();
    let dev = device(&net);
    let key = private_key();
    let req = format!(
        "set=1\nprivate_key={}\nfwmark=3\n\nget=1\n\nset=1\nbad\n\nget=1\n\n",
        key.to_hex()
    );
    let mut out = Vec::new();
    dev.ipc_handle(BufReader::new(Cursor::new(req.into_bytes())), &mut out)
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    // The port of the bind opened while the device was up is kept (as wireguard-go keeps it).
    let expect_get = format!(
        "private_key={}\nlisten_port={}\nfwmark=3\nerrno=0\n\n",
        key.to_hex(),
        dev.listen_port()
    );
    assert_eq!(
        out,
        format!("errno=0\n\n{expect_get}errno=-71\n\n{expect_get}")
    );
    // An unknown operation ends the connection without an answer.
    let mut out = Vec::new();
    dev.ipc_handle(
        BufReader::new(Cursor::new(b"bogus=1\n\nget=1\n\n".to_vec())),
        &mut out,
    )
    .unwrap();
    assert!(out.is_empty());
}

fn prefix(s: &str) -> AllowedIp {
    s.parse().unwrap()
}

#[test]
fn typed_change_applies_in_order_up_to_the_first_error() {
    let net = MemoryNetwork::new();
    let dev = device(&net);
    let own = private_key();
    let (p1, p2) = (private_key().public_key(), private_key().public_key());
    let change = Change::new()
        .private_key(own.clone())
        .fwmark(7)
        // Our own public key: a dummy section, nothing is created.
        .peer(PeerChange::new(own.public_key()).allowed_ip(prefix("10.9.0.0/16")))
        .peer(
            PeerChange::new(p1)
                .allowed_ip(prefix("10.0.0.0/8"))
                // The bind refuses this endpoint: the change stops here.
                .endpoint(Endpoint::text("nowhere").unwrap())
                .allowed_ip(prefix("10.1.0.0/16")),
        )
        .peer(PeerChange::new(p2));
    let e = dev.configure(&change).unwrap_err();
    assert_eq!(e.code(), IPC_ERROR_INVALID, "{e}");
    let st = dev.state();
    assert_eq!(st.private_key.as_ref(), Some(&own));
    assert_eq!(st.fwmark, 7);
    assert_eq!(st.peers.len(), 1, "{st:?}");
    assert_eq!(st.peers[0].public_key, p1);
    assert_eq!(st.peers[0].allowed_ips, [prefix("10.0.0.0/8")]);
    // update_only on an unknown peer changes nothing; remove deletes.
    dev.configure(
        &Change::new().peer(
            PeerChange::new(p2)
                .update_only()
                .persistent_keepalive_interval(5),
        ),
    )
    .unwrap();
    dev.configure(&Change::new().peer(PeerChange::new(p1).remove()))
        .unwrap();
    assert!(dev.state().peers.is_empty());
}

#[test]
fn set_text_and_its_typed_change_have_the_same_effect() {
    let net = MemoryNetwork::new();
    let (text_dev, typed_dev) = (device(&net), device(&net));
    let (p1, p2) = (private_key().public_key(), private_key().public_key());
    let text = format!(
        "private_key={}\nfwmark=9\npublic_key={}\nendpoint=198.18.0.9:1\nallowed_ip=10.0.0.0/8\n\
         allowed_ip=10.2.0.0/16\nallowed_ip=-10.0.0.0/8\npersistent_keepalive_interval=25\n\
         public_key={}\nreplace_allowed_ips=true\nallowed_ip=fd00::/8\nallowed_ip=bad\nallowed_ip=fd01::/16\n",
        private_key().to_hex(),
        p1.to_hex(),
        p2.to_hex()
    );
    let text_err = text_dev.ipc_set(&text).unwrap_err();
    let (change, parse_err) = Change::parse_partial(&text);
    typed_dev.configure(&change).unwrap();
    assert_eq!(parse_err.as_ref(), Some(&text_err));
    let (a, b) = (text_dev.state(), typed_dev.state());
    assert_eq!(
        (&a.private_key, a.fwmark, &a.peers),
        (&b.private_key, b.fwmark, &b.peers)
    );
    assert_eq!(a.peers[0].allowed_ips, [prefix("10.2.0.0/16")]);
    assert_eq!(a.peers[1].allowed_ips, [prefix("fd00::/8")]);
}
