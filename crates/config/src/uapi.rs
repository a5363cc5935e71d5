//! Conversion to and from the typed UAPI model (`vpn-ipc`), which owns the text.

use std::io;
use std::net::SocketAddr;

use vpn_ipc::{AllowedIp, Change, DeviceState, PeerChange};

use crate::error::ConfigError;
use crate::types::{Endpoint, IpPrefix};
use crate::{Config, Interface, Peer};

impl Config {
    /// The change that makes the device match this file, as `wg setconf` sends it: device
    /// keys, `replace_peers`, then each peer with `replace_allowed_ips` and its allowed IPs.
    /// The proxy and forwarding sections play no part.
    ///
    /// `resolve` turns an endpoint's host and port into an address (hostnames are looked up
    /// once, here, as `wg` does). Allowed IPs are sent masked, as the device stores them.
    pub fn to_change(
        &self,
        resolve: impl Fn(&str, u16) -> io::Result<SocketAddr>,
    ) -> Result<Change, ConfigError> {
        let i = &self.interface;
        let mut change = Change::new().private_key(i.private_key.clone());
        if let Some(port) = i.listen_port {
            change = change.listen_port(port);
        }
        if let Some(mark) = i.fwmark {
            change = change.fwmark(mark);
        }
        change = change.replace_peers();
        for p in &self.peers {
            let mut peer = PeerChange::new(p.public_key);
            if let Some(psk) = &p.preshared_key {
                peer = peer.preshared_key(psk.clone());
            }
            if let Some(ep) = &p.endpoint {
                let addr = resolve(ep.host(), ep.port()).map_err(|e| {
                    ConfigError::new(
                        0,
                        format!("peer {}: cannot resolve endpoint `{ep}`: {e}", p.public_key),
                    )
                })?;
                peer = peer.endpoint(addr);
            }
            if let Some(ka) = p.persistent_keepalive {
                peer = peer.persistent_keepalive_interval(ka);
            }
            peer = peer.replace_allowed_ips();
            for ip in &p.allowed_ips {
                let m = ip.masked();
                // An IpPrefix's length is always within its family's width.
                if let Some(a) = AllowedIp::new(m.addr(), m.prefix_len()) {
                    peer = peer.allowed_ip(a);
                }
            }
            change = change.peer(peer);
        }
        Ok(change)
    }

    /// The body of a UAPI `set` for [`to_change`](Self::to_change): one `key=value` per line
    /// and no terminating blank line.
    pub fn to_uapi(
        &self,
        resolve: impl Fn(&str, u16) -> io::Result<SocketAddr>,
    ) -> Result<String, ConfigError> {
        Ok(self.to_change(resolve)?.to_string())
    }

    /// The running configuration from a device's state (a parsed `get` dump), with the
    /// wg-quick-only settings (addresses, DNS, MTU, table, hooks, SaveConfig) taken from
    /// `interface_extras`.
    ///
    /// A state without a private key keeps the one in `interface_extras`; zero values (port,
    /// mark, preshared key, keepalive) are "not set". The result has none of the proxy and
    /// forwarding sections; [`with_device_state`](Self::with_device_state) keeps a file's.
    pub fn from_state(state: &DeviceState, interface_extras: &Interface) -> Config {
        let mut interface = interface_extras.clone();
        if let Some(sk) = state.private_key.as_ref().filter(|k| !k.is_zero()) {
            interface.private_key = sk.clone();
        }
        interface.listen_port = Some(state.listen_port).filter(|&p| p != 0);
        interface.fwmark = Some(state.fwmark).filter(|&m| m != 0);
        let peers = state
            .peers
            .iter()
            .map(|ps| {
                let mut p = Peer::new(ps.public_key);
                p.preshared_key = Some(ps.preshared_key.clone()).filter(|k| !k.is_zero());
                p.endpoint = ps.endpoint.as_ref().and_then(|e| match e.addr() {
                    Some(sa) => Some(Endpoint::from(sa)),
                    None => e.to_text().parse().ok(),
                });
                p.persistent_keepalive = Some(ps.persistent_keepalive_interval).filter(|&n| n != 0);
                p.allowed_ips = ps
                    .allowed_ips
                    .iter()
                    .filter_map(|a| IpPrefix::new(a.addr(), a.cidr()))
                    .collect();
                p
            })
            .collect();
        let mut config = Config::new(interface);
        config.peers = peers;
        config
    }

    /// This file with its device half replaced by `state`, as SaveConfig writes it: what
    /// [`from_state`](Self::from_state) builds from this file's [`Interface`], with this
    /// file's proxy and forwarding sections kept.
    pub fn with_device_state(&self, state: &DeviceState) -> Config {
        Config {
            socks5: self.socks5.clone(),
            http: self.http.clone(),
            local_forwards: self.local_forwards.clone(),
            remote_forwards: self.remote_forwards.clone(),
            ..Config::from_state(state, &self.interface)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;
    use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};

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
             public_key={}\npreshared_key={}\nprotocol_version=1\nendpoint=198.18.0.7:1\npersistent_keepalive_interval=15\nunknown_key=1\n",
            PrivateKey::from_bytes([9; 32]).to_hex(),
            "05".repeat(32),
            "00".repeat(32),
            "06".repeat(32),
            "07".repeat(32),
        );
        let c = Config::from_state(&dump.parse().unwrap(), &extras);
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
        let c = Config::from_state(&DeviceState::new(), &extras);
        assert_eq!(c.interface.private_key, extras.private_key);
        assert_eq!(c.interface.listen_port, None);
        assert_eq!(c.interface.fwmark, None);
        assert!(c.peers.is_empty());
    }
}
