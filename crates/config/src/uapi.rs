//! Conversion to and from the UAPI text protocol (reference-behaviour §2.16).

use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;

use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};

use crate::error::ConfigError;
use crate::types::{Endpoint, IpPrefix};
use crate::{Config, Interface, Peer};

impl Config {
    /// The body of a UAPI `set` that makes the device match this file, as `wg setconf` sends
    /// it: device keys, `replace_peers=true`, then each peer with `replace_allowed_ips=true`.
    ///
    /// `resolve` turns an endpoint's host and port into an address (hostnames are looked up
    /// once, here, as `wg` does). The body has one `key=value` per line and no terminating
    /// blank line. Allowed IPs are sent masked, as the device stores them.
    pub fn to_uapi(
        &self,
        resolve: impl Fn(&str, u16) -> io::Result<SocketAddr>,
    ) -> Result<String, ConfigError> {
        let i = &self.interface;
        let mut out = String::new();
        // Writing to a String cannot fail; the results are ignored for that reason.
        let _ = writeln!(out, "private_key={}", i.private_key.to_hex());
        if let Some(port) = i.listen_port {
            let _ = writeln!(out, "listen_port={port}");
        }
        if let Some(mark) = i.fwmark {
            let _ = writeln!(out, "fwmark={mark}");
        }
        out.push_str("replace_peers=true\n");
        for p in &self.peers {
            let _ = writeln!(out, "public_key={}", p.public_key.to_hex());
            if let Some(psk) = &p.preshared_key {
                let _ = writeln!(out, "preshared_key={}", psk.to_hex());
            }
            if let Some(ep) = &p.endpoint {
                let addr = resolve(ep.host(), ep.port()).map_err(|e| {
                    ConfigError::new(
                        0,
                        format!("peer {}: cannot resolve endpoint `{ep}`: {e}", p.public_key),
                    )
                })?;
                let _ = writeln!(out, "endpoint={addr}");
            }
            if let Some(ka) = p.persistent_keepalive {
                let _ = writeln!(out, "persistent_keepalive_interval={ka}");
            }
            out.push_str("replace_allowed_ips=true\n");
            for ip in &p.allowed_ips {
                let _ = writeln!(out, "allowed_ip={}", ip.masked());
            }
        }
        Ok(out)
    }

    /// The running configuration from a UAPI `get` dump, with the wg-quick-only settings
    /// (addresses, DNS, MTU, table, hooks, SaveConfig) taken from `interface_extras`.
    ///
    /// Lines that are not understood (statistics, unknown keys, malformed values) are skipped:
    /// the dump comes from the daemon, and saving what can be read beats saving nothing. A
    /// dump without a private key keeps the one in `interface_extras`.
    pub fn from_uapi_get(dump: &str, interface_extras: &Interface) -> Config {
        let mut interface = interface_extras.clone();
        interface.listen_port = None;
        interface.fwmark = None;
        let mut peers: Vec<Peer> = Vec::new();
        for line in dump.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            if key == "public_key" {
                if let Ok(pk) = PublicKey::from_hex(value) {
                    peers.push(Peer::new(pk));
                }
                continue;
            }
            match peers.last_mut() {
                None => device_key(&mut interface, key, value),
                Some(peer) => peer_key(peer, key, value),
            }
        }
        Config { interface, peers }
    }
}

fn device_key(i: &mut Interface, key: &str, value: &str) {
    match key {
        "private_key" => {
            if let Ok(sk) = PrivateKey::from_hex(value) {
                if !sk.is_zero() {
                    i.private_key = sk;
                }
            }
        }
        "listen_port" => i.listen_port = value.parse().ok().filter(|&p| p != 0),
        "fwmark" => i.fwmark = value.parse().ok().filter(|&m| m != 0),
        _ => {}
    }
}

fn peer_key(p: &mut Peer, key: &str, value: &str) {
    match key {
        "preshared_key" => {
            p.preshared_key = PresharedKey::from_hex(value).ok().filter(|k| !k.is_zero());
        }
        "endpoint" => {
            p.endpoint = match value.parse::<SocketAddr>() {
                Ok(sa) => Some(Endpoint::from(sa)),
                Err(_) => value.parse().ok(),
            }
        }
        "persistent_keepalive_interval" => {
            p.persistent_keepalive = value.parse().ok().filter(|&n| n != 0);
        }
        "allowed_ip" => {
            if let Ok(ip) = value.parse::<IpPrefix>() {
                p.allowed_ips.push(ip);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    fn text() -> String {
        format!(
            "[Interface]\nPrivateKey = {}\nListenPort = 51820\nFwMark = 0x20\nAddress = 100.64.0.1/24\nMTU = 1400\nPostUp = echo %i\n\
             [Peer]\nPublicKey = {}\nPresharedKey = {}\nAllowedIPs = 100.64.0.2/24, fd00::2/128\nEndpoint = peer.test:51821\nPersistentKeepalive = 25\n\
             [Peer]\nPublicKey = {}\n",
            PrivateKey::from_bytes([1; 32]).to_base64(),
            PublicKey::from_bytes([2; 32]).to_base64(),
            PresharedKey::from_bytes([3; 32]).to_base64(),
            PublicKey::from_bytes([4; 32]).to_base64(),
        )
    }

    fn fake_dns(host: &str, port: u16) -> io::Result<SocketAddr> {
        match host {
            "peer.test" => Ok(SocketAddr::from(([198, 18, 0, 2], port))),
            _ => Err(io::Error::new(io::ErrorKind::NotFound, "no such host")),
        }
    }

    #[test]
    fn setconf_body() {
        let c = parse(&text()).unwrap();
        let body = c.to_uapi(fake_dns).unwrap();
        let expected = format!(
            "private_key={}\nlisten_port=51820\nfwmark=32\nreplace_peers=true\n\
             public_key={}\npreshared_key={}\nendpoint=198.18.0.2:51821\npersistent_keepalive_interval=25\nreplace_allowed_ips=true\nallowed_ip=100.64.0.0/24\nallowed_ip=fd00::2/128\n\
             public_key={}\nreplace_allowed_ips=true\n",
            PrivateKey::from_bytes([1; 32]).to_hex(),
            "02".repeat(32),
            "03".repeat(32),
            "04".repeat(32),
        );
        assert_eq!(body, expected);
        assert!(!body.contains("\n\n"));
    }

    #[test]
    fn unresolvable_endpoint_is_an_error() {
        let t = text().replace("peer.test", "nowhere.test");
        let e = parse(&t).unwrap().to_uapi(fake_dns).unwrap_err();
        assert!(
            e.to_string()
                .contains("cannot resolve endpoint `nowhere.test:51821`"),
            "{e}"
        );
    }

    #[test]
    fn from_get_dump() {
        let extras = parse(&text()).unwrap().interface;
        let dump = format!(
            "private_key={}\nlisten_port=40000\nfwmark=51820\n\
             public_key={}\npreshared_key={}\nprotocol_version=1\nendpoint=[fd00::9]:51821\nlast_handshake_time_sec=0\nlast_handshake_time_nsec=0\ntx_bytes=92\nrx_bytes=0\npersistent_keepalive_interval=0\nallowed_ip=0.0.0.0/0\nallowed_ip=::/0\n\
             public_key={}\npreshared_key={}\nprotocol_version=1\nendpoint=198.18.0.7:1\npersistent_keepalive_interval=15\nbogus\nallowed_ip=nonsense\n",
            PrivateKey::from_bytes([9; 32]).to_hex(),
            "05".repeat(32),
            "00".repeat(32),
            "06".repeat(32),
            "07".repeat(32),
        );
        let c = Config::from_uapi_get(&dump, &extras);
        assert_eq!(c.interface.private_key, PrivateKey::from_bytes([9; 32]));
        assert_eq!(c.interface.listen_port, Some(40000));
        assert_eq!(c.interface.fwmark, Some(51820));
        assert_eq!(c.interface.addresses, extras.addresses);
        assert_eq!(c.interface.mtu, Some(1400));
        assert_eq!(c.interface.post_up, ["echo %i"]);
        assert_eq!(c.peers.len(), 2);
        let a = &c.peers[0];
        assert_eq!(a.public_key, PublicKey::from_bytes([5; 32]));
        assert_eq!(a.preshared_key, None);
        assert_eq!(a.endpoint.as_ref().unwrap().to_string(), "[fd00::9]:51821");
        assert_eq!(a.persistent_keepalive, None);
        assert_eq!(a.allowed_ips.len(), 2);
        let b = &c.peers[1];
        assert_eq!(b.preshared_key, Some(PresharedKey::from_bytes([7; 32])));
        assert_eq!(b.persistent_keepalive, Some(15));
        assert!(b.allowed_ips.is_empty());

        // No private key in the dump: the file's stays; no port or mark: none saved.
        let c = Config::from_uapi_get("", &extras);
        assert_eq!(c.interface.private_key, extras.private_key);
        assert_eq!(c.interface.listen_port, None);
        assert_eq!(c.interface.fwmark, None);
        assert!(c.peers.is_empty());
    }
}
