//! [`DeviceState`]: what a `get` returns, and the one parser and renderer of the dump.
//!
//! The dump lists the device keys that are set (`private_key`, then `listen_port` and `fwmark`
//! when non-zero), then every peer with its keys in a fixed order — `public_key`,
//! `preshared_key`, `protocol_version`, `endpoint` (if any), `last_handshake_time_sec`,
//! `last_handshake_time_nsec`, `tx_bytes`, `rx_bytes`, `persistent_keepalive_interval` — and
//! one `allowed_ip` line per prefix. `wg showconf` reads it in that order.

use crate::change::{AllowedIp, Endpoint};
use crate::error::IpcError;
use crate::text::{body_lines, decimal, public_key, split_line};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;
use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};

/// The device's configuration and per-peer statistics (the typed `get` dump).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceState {
    /// The private key, if one is set.
    pub private_key: Option<PrivateKey>,
    /// The port the bind listens on (0: none, not dumped).
    pub listen_port: u16,
    /// The firewall mark (0: none, not dumped).
    pub fwmark: u32,
    /// The peers, in the device's order.
    pub peers: Vec<PeerState>,
}

/// One peer of a [`DeviceState`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerState {
    /// The peer's public key.
    pub public_key: PublicKey,
    /// The preshared key (all zeros: none; always dumped).
    pub preshared_key: PresharedKey,
    /// The protocol version (always 1 from this device).
    pub protocol_version: u32,
    /// The current endpoint, if any.
    pub endpoint: Option<Endpoint>,
    /// Time of the last completed handshake since the Unix epoch; `None`: never.
    pub last_handshake_time: Option<Duration>,
    /// Bytes sent to the peer (UDP payloads, handshakes included).
    pub tx_bytes: u64,
    /// Bytes received from the peer.
    pub rx_bytes: u64,
    /// Seconds between persistent keepalives (0: off).
    pub persistent_keepalive_interval: u16,
    /// The peer's allowed IPs.
    pub allowed_ips: Vec<AllowedIp>,
}

impl PeerState {
    /// A peer with every other field zero or empty (protocol version 1).
    pub fn new(public_key: PublicKey) -> PeerState {
        PeerState {
            public_key,
            preshared_key: PresharedKey::zero(),
            protocol_version: 1,
            endpoint: None,
            last_handshake_time: None,
            tx_bytes: 0,
            rx_bytes: 0,
            persistent_keepalive_interval: 0,
            allowed_ips: Vec::new(),
        }
    }
}

impl DeviceState {
    /// An empty state: no key, no port, no mark, no peer.
    pub fn new() -> DeviceState {
        DeviceState::default()
    }
}

impl fmt::Display for DeviceState {
    /// The `get` dump without the `errno=` trailer, keys in the order `wg` expects.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(k) = &self.private_key {
            writeln!(f, "private_key={}", k.to_hex())?;
        }
        if self.listen_port != 0 {
            writeln!(f, "listen_port={}", self.listen_port)?;
        }
        if self.fwmark != 0 {
            writeln!(f, "fwmark={}", self.fwmark)?;
        }
        for p in &self.peers {
            writeln!(f, "public_key={}", p.public_key.to_hex())?;
            writeln!(f, "preshared_key={}", p.preshared_key.to_hex())?;
            writeln!(f, "protocol_version={}", p.protocol_version)?;
            if let Some(ep) = &p.endpoint {
                writeln!(f, "endpoint={ep}")?;
            }
            let hs = p.last_handshake_time.unwrap_or_default();
            writeln!(f, "last_handshake_time_sec={}", hs.as_secs())?;
            writeln!(f, "last_handshake_time_nsec={}", hs.subsec_nanos())?;
            writeln!(f, "tx_bytes={}", p.tx_bytes)?;
            writeln!(f, "rx_bytes={}", p.rx_bytes)?;
            writeln!(
                f,
                "persistent_keepalive_interval={}",
                p.persistent_keepalive_interval
            )?;
            for ip in &p.allowed_ips {
                writeln!(f, "allowed_ip={ip}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for DeviceState {
    type Err = IpcError;

    /// Parses a `get` dump (without the `errno=` trailer; an empty line ends it). Keys this
    /// model does not know are skipped, so a newer daemon's additions do not break readers; a
    /// line without `=` (`EPROTO`) or a bad value of a known key (`EINVAL`) is an error.
    fn from_str(text: &str) -> Result<DeviceState, IpcError> {
        let mut state = DeviceState::new();
        for line in body_lines(text) {
            let (key, value) = split_line(line)?;
            if key == "public_key" {
                state.peers.push(PeerState::new(public_key(value)?));
                continue;
            }
            match state.peers.last_mut() {
                None => device_key(&mut state, key, value)?,
                Some(p) => peer_key(p, key, value)?,
            }
        }
        Ok(state)
    }
}

fn number<T: FromStr>(key: &str, value: &str) -> Result<T, IpcError> {
    decimal(value).ok_or_else(|| IpcError::invalid(format!("bad value in dump: {key}={value}")))
}

fn device_key(state: &mut DeviceState, key: &str, value: &str) -> Result<(), IpcError> {
    match key {
        "private_key" => {
            state.private_key = Some(
                PrivateKey::from_hex(value)
                    .map_err(|e| IpcError::invalid(format!("bad private_key in dump: {e}")))?,
            )
        }
        "listen_port" => state.listen_port = number(key, value)?,
        "fwmark" => state.fwmark = number(key, value)?,
        _ => {}
    }
    Ok(())
}

/// Replaces the seconds or the nanoseconds of a handshake time; a zero time is "never".
fn handshake_time(
    old: Option<Duration>,
    secs: Option<u64>,
    nanos: Option<u32>,
) -> Option<Duration> {
    let old = old.unwrap_or_default();
    let t = Duration::new(
        secs.unwrap_or(old.as_secs()),
        nanos.unwrap_or(old.subsec_nanos()),
    );
    (!t.is_zero()).then_some(t)
}

fn peer_key(p: &mut PeerState, key: &str, value: &str) -> Result<(), IpcError> {
    match key {
        "preshared_key" => {
            p.preshared_key = PresharedKey::from_hex(value)
                .map_err(|e| IpcError::invalid(format!("bad preshared_key in dump: {e}")))?
        }
        "protocol_version" => p.protocol_version = number(key, value)?,
        "endpoint" => p.endpoint = Some(Endpoint::from_dump(value)?),
        "last_handshake_time_sec" => {
            p.last_handshake_time =
                handshake_time(p.last_handshake_time, Some(number(key, value)?), None)
        }
        "last_handshake_time_nsec" => {
            let nanos: u32 = number(key, value)?;
            if nanos >= 1_000_000_000 {
                return Err(IpcError::invalid(format!(
                    "bad value in dump: {key}={value}"
                )));
            }
            p.last_handshake_time = handshake_time(p.last_handshake_time, None, Some(nanos))
        }
        "tx_bytes" => p.tx_bytes = number(key, value)?,
        "rx_bytes" => p.rx_bytes = number(key, value)?,
        "persistent_keepalive_interval" => p.persistent_keepalive_interval = number(key, value)?,
        "allowed_ip" => p.allowed_ips.push(value.parse()?),
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{IPC_ERROR_INVALID, IPC_ERROR_PROTOCOL};
    use std::net::SocketAddr;

    fn peer(n: u8) -> PeerState {
        PeerState::new(PublicKey::from_bytes([n; 32]))
    }

    #[test]
    fn get_dump_has_the_keys_in_wg_order() {
        let key = PrivateKey::from_bytes([9; 32]);
        let mut st = DeviceState::new();
        st.private_key = Some(key.clone());
        st.listen_port = 51820;
        st.fwmark = 0;
        let mut a = peer(1);
        a.preshared_key = PresharedKey::from_bytes([2; 32]);
        a.endpoint = Some(SocketAddr::from(([0xfd00, 0, 0, 0, 0, 0, 0, 9], 51821)).into());
        a.last_handshake_time = Some(Duration::new(937, 5));
        a.tx_bytes = 92;
        a.rx_bytes = 148;
        a.persistent_keepalive_interval = 25;
        a.allowed_ips = vec![
            "100.64.0.2/32".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ];
        st.peers = vec![a, peer(3)];
        let want = format!(
            "private_key={}\nlisten_port=51820\n\
             public_key={}\npreshared_key={}\nprotocol_version=1\nendpoint=[fd00::9]:51821\n\
             last_handshake_time_sec=937\nlast_handshake_time_nsec=5\ntx_bytes=92\nrx_bytes=148\n\
             persistent_keepalive_interval=25\nallowed_ip=100.64.0.2/32\nallowed_ip=fd00::/8\n\
             public_key={}\npreshared_key={}\nprotocol_version=1\n\
             last_handshake_time_sec=0\nlast_handshake_time_nsec=0\ntx_bytes=0\nrx_bytes=0\n\
             persistent_keepalive_interval=0\n",
            key.to_hex(),
            "01".repeat(32),
            "02".repeat(32),
            "03".repeat(32),
            "00".repeat(32),
        );
        assert_eq!(st.to_string(), want);
        assert_eq!(want.parse::<DeviceState>().unwrap(), st);
        // Nothing set: nothing dumped.
        assert_eq!(DeviceState::new().to_string(), "");
    }

    #[test]
    fn get_parse_skips_unknown_keys_and_refuses_bad_values() {
        let dump = format!(
            "listen_port=1\nfuture_key=x\npublic_key={}\nendpoint=peer.example:1\nlast_handshake_time_nsec=7\nfuture=y\n",
            "05".repeat(32)
        );
        let st: DeviceState = dump.parse().unwrap();
        assert_eq!(st.listen_port, 1);
        let p = &st.peers[0];
        assert_eq!(p.endpoint.as_ref().unwrap().addr(), None);
        assert_eq!(p.endpoint.as_ref().unwrap().to_text(), "peer.example:1");
        assert_eq!(p.last_handshake_time, Some(Duration::new(0, 7)));
        let pk = format!("public_key={}\n", "05".repeat(32));
        for (bad, code) in [
            ("no equals\n".to_owned(), IPC_ERROR_PROTOCOL),
            ("private_key=zz\n".to_owned(), IPC_ERROR_INVALID),
            ("listen_port=70000\n".to_owned(), IPC_ERROR_INVALID),
            ("public_key=1\n".to_owned(), IPC_ERROR_INVALID),
            (format!("{pk}rx_bytes=-1\n"), IPC_ERROR_INVALID),
            (
                format!("{pk}last_handshake_time_nsec=1000000000\n"),
                IPC_ERROR_INVALID,
            ),
            (
                format!("{pk}last_handshake_time_sec=18446744073709551616\n"),
                IPC_ERROR_INVALID,
            ),
            (format!("{pk}allowed_ip=10.0.0.0/40\n"), IPC_ERROR_INVALID),
        ] {
            let e = bad.parse::<DeviceState>().expect_err(&bad);
            assert_eq!(e.code(), code, "{bad:?}");
        }
    }

    #[test]
    fn zero_handshake_time_is_never() {
        let dump = format!(
            "public_key={}\nlast_handshake_time_sec=0\nlast_handshake_time_nsec=0\n",
            "05".repeat(32)
        );
        let st: DeviceState = dump.parse().unwrap();
        assert_eq!(st.peers[0].last_handshake_time, None);
        let dump = dump.replace("sec=0\n", "sec=u64::MAX\n");
        assert!(dump.parse::<DeviceState>().is_err());
        let max = format!(
            "public_key={}\nlast_handshake_time_sec={}\nlast_handshake_time_nsec=999999999\n",
            "05".repeat(32),
            u64::MAX
        );
        let st: DeviceState = max.parse().unwrap();
        assert_eq!(
            st.peers[0].last_handshake_time,
            Some(Duration::new(u64::MAX, 999_999_999))
        );
    }
}
