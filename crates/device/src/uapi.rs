//! The cross-platform configuration protocol (UAPI) that `wg` speaks (§2.16 of the reference).
//!
//! `set` applies `key=value` lines in order and stops at the first error; what was applied before
//! stays applied, and the device stays usable. `get` dumps the configuration in the order
//! `wg showconf` expects.

use crate::peer::{Peer, PeerRef};
use crate::DeviceInner;
use std::fmt::{self, Write as _};
use std::io::{self, BufRead, Write};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};
use vpn_proto::noise::{Handshake, StaticIdentity};

/// `-EIO`: the request could not be read or written.
pub const IPC_ERROR_IO: i64 = -5;
/// `-EPROTO`: a line without `=`, or an unknown operation.
pub const IPC_ERROR_PROTOCOL: i64 = -71;
/// `-EINVAL`: an unknown key or a bad value.
pub const IPC_ERROR_INVALID: i64 = -22;
/// `-EADDRINUSE`: the listen port could not be bound.
pub const IPC_ERROR_PORT_IN_USE: i64 = -98;
/// Anything else.
pub const IPC_ERROR_UNKNOWN: i64 = -55;

/// A failed UAPI request: the code printed as `errno=` and a message for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpcError {
    /// Negative errno as wireguard-go reports it.
    pub code: i64,
    /// What went wrong.
    pub message: String,
}

impl IpcError {
    fn new(code: i64, message: impl Into<String>) -> IpcError {
        IpcError {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for IpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IPC error {}: {}", self.code, self.message)
    }
}

impl std::error::Error for IpcError {}

fn invalid(msg: impl Into<String>) -> IpcError {
    IpcError::new(IPC_ERROR_INVALID, msg)
}

/// The peer a `set` section is configuring.
struct Section {
    peer: Option<Arc<Peer>>,
    /// Created by this section (for `update_only`).
    created: bool,
    /// The key was our own public key, or `update_only` discarded it: ignore the settings.
    dummy: bool,
    pka_turned_on: bool,
}

pub(crate) fn ipc_set(dev: &Arc<DeviceInner>, config: &str) -> Result<(), IpcError> {
    let _ipc = dev.ipc_lock.lock();
    let mut section: Option<Section> = None;
    let res = (|| {
        for line in config.lines() {
            if line.is_empty() {
                break;
            }
            let (key, value) = line.split_once('=').ok_or_else(|| {
                IpcError::new(IPC_ERROR_PROTOCOL, format!("failed to parse line {line:?}"))
            })?;
            if key == "public_key" {
                if let Some(s) = section.take() {
                    finish_section(dev, s);
                }
                section = Some(begin_section(dev, value)?);
                continue;
            }
            match section.as_mut() {
                None => set_device_key(dev, key, value)?,
                Some(s) => set_peer_key(dev, s, key, value)?,
            }
        }
        Ok(())
    })();
    if let Some(s) = section.take() {
        finish_section(dev, s);
    }
    if let Err(e) = &res {
        tracing::error!(device = %dev.name, "{e}");
    }
    res
}

fn set_device_key(dev: &Arc<DeviceInner>, key: &str, value: &str) -> Result<(), IpcError> {
    match key {
        "private_key" => {
            let k = PrivateKey::from_hex(value)
                .map_err(|e| invalid(format!("failed to set private_key: {e}")))?;
            dev.set_private_key(Some(k));
        }
        "listen_port" => {
            let port: u16 = value
                .parse()
                .map_err(|e| invalid(format!("failed to parse listen_port: {e}")))?;
            dev.net.lock().port = port;
            dev.bind_update().map_err(|e| {
                IpcError::new(
                    IPC_ERROR_PORT_IN_USE,
                    format!("failed to set listen_port: {e}"),
                )
            })?;
        }
        "fwmark" => {
            let mark: u32 = value
                .parse()
                .map_err(|e| invalid(format!("invalid fwmark: {e}")))?;
            dev.set_fwmark(mark).map_err(|e| {
                IpcError::new(
                    IPC_ERROR_PORT_IN_USE,
                    format!("failed to update fwmark: {e}"),
                )
            })?;
        }
        "replace_peers" => {
            if value != "true" {
                return Err(invalid(format!(
                    "failed to set replace_peers, invalid value: {value}"
                )));
            }
            dev.remove_all_peers();
        }
        _ => return Err(invalid(format!("invalid UAPI device key: {key}"))),
    }
    Ok(())
}

fn begin_section(dev: &Arc<DeviceInner>, value: &str) -> Result<Section, IpcError> {
    let pk = PublicKey::from_hex(value)
        .map_err(|e| invalid(format!("failed to get peer by public key: {e}")))?;
    let own = dev
        .identity
        .read()
        .identity
        .as_ref()
        .map(|i| *i.public_key());
    if own == Some(pk) {
        return Ok(Section {
            peer: None,
            created: false,
            dummy: true,
            pka_turned_on: false,
        });
    }
    if let Some(p) = dev.peers.read().by_key.get(&pk) {
        return Ok(Section {
            peer: Some(p.clone()),
            created: false,
            dummy: false,
            pka_turned_on: false,
        });
    }
    // Lock order: identity before peers (see device.rs).
    let id = dev.identity.read();
    let hs = match id.identity.as_ref() {
        Some(i) => Handshake::new(i, pk, PresharedKey::zero()),
        // No private key yet: precompute against a placeholder; setting the key recomputes.
        None => Handshake::new(
            &StaticIdentity::new(PrivateKey::from_bytes([0; 32])),
            pk,
            PresharedKey::zero(),
        ),
    };
    let mut peers = dev.peers.write();
    drop(id);
    if peers.by_key.len() >= vpn_proto::consts::MAX_PEERS {
        return Err(invalid("too many peers"));
    }
    let peer = Peer::new(dev, pk, hs);
    peers.by_key.insert(pk, peer.clone());
    peers.order.push(pk);
    Ok(Section {
        peer: Some(peer),
        created: true,
        dummy: false,
        pka_turned_on: false,
    })
}

fn set_peer_key(
    dev: &Arc<DeviceInner>,
    s: &mut Section,
    key: &str,
    value: &str,
) -> Result<(), IpcError> {
    let parse_true = |what: &str| {
        if value == "true" {
            Ok(())
        } else {
            Err(invalid(format!(
                "failed to set {what}, invalid value: {value}"
            )))
        }
    };
    match key {
        "update_only" => {
            parse_true("update_only")?;
            if s.created {
                if let Some(p) = s.peer.take() {
                    dev.remove_peer(&p.public_key);
                }
                s.dummy = true;
            }
            return Ok(());
        }
        "remove" => {
            parse_true("remove")?;
            if let Some(p) = s.peer.take() {
                dev.remove_peer(&p.public_key);
            }
            s.dummy = true;
            return Ok(());
        }
        _ => {}
    }
    // Validate values even for a dummy section, so errors are reported the same way.
    match key {
        "preshared_key" => {
            let k = PresharedKey::from_hex(value)
                .map_err(|e| invalid(format!("failed to set preshared key: {e}")))?;
            if let Some(p) = live(s) {
                p.handshake.lock().hs.set_preshared_key(k);
            }
        }
        "endpoint" => {
            let ep = dev
                .bind
                .parse_endpoint(value)
                .map_err(|e| invalid(format!("failed to set endpoint {value}: {e}")))?;
            if let Some(p) = live(s) {
                let mut e = p.endpoint.lock();
                e.ep = Some(ep);
                e.clear_src_on_tx = false;
            }
        }
        "persistent_keepalive_interval" => {
            let secs: u16 = value.parse().map_err(|e| {
                invalid(format!("failed to set persistent keepalive interval: {e}"))
            })?;
            if let Some(p) = live(s) {
                let old = p
                    .persistent_keepalive
                    .swap(u32::from(secs), Ordering::Relaxed);
                s.pka_turned_on = old == 0 && secs != 0;
            }
        }
        "replace_allowed_ips" => {
            parse_true("replace_allowed_ips")?;
            if let Some(p) = live(s) {
                dev.allowed_ips.write().remove_by_value(&PeerRef(p.clone()));
            }
        }
        "allowed_ip" => {
            let (remove, prefix) = match value.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, value),
            };
            let (addr, cidr) = parse_prefix(prefix)
                .ok_or_else(|| invalid(format!("failed to set allowed ip: {value}")))?;
            if let Some(p) = live(s) {
                let mut table = dev.allowed_ips.write();
                if remove {
                    table.remove(addr, cidr, &PeerRef(p.clone()));
                } else {
                    table
                        .insert(addr, cidr, PeerRef(p.clone()))
                        .map_err(|e| invalid(format!("failed to set allowed ip: {e}")))?;
                }
            }
        }
        "protocol_version" => {
            if value != "1" {
                return Err(invalid(format!("invalid protocol version: {value}")));
            }
        }
        _ => return Err(invalid(format!("invalid UAPI peer key: {key}"))),
    }
    Ok(())
}

fn live(s: &Section) -> Option<&Arc<Peer>> {
    if s.dummy {
        None
    } else {
        s.peer.as_ref()
    }
}

fn finish_section(dev: &Arc<DeviceInner>, s: Section) {
    let Some(p) = live(&s) else { return };
    if s.created && dev.broken_roaming.load(Ordering::Acquire) {
        let mut e = p.endpoint.lock();
        if e.ep.is_some() {
            e.disable_roaming = true;
        }
    }
    if dev.is_up() {
        p.start();
        if s.pka_turned_on {
            p.send_keepalive();
        }
        p.send_staged();
    }
}

/// `10.0.0.0/8`, `fd00::/8` (the address need not be masked).
pub fn parse_prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (a, c) = s.split_once('/')?;
    let addr: IpAddr = a.parse().ok()?;
    if c.is_empty() || c.len() > 3 || !c.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let cidr: u8 = c.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (cidr <= max).then_some((addr, cidr))
}

pub(crate) fn ipc_get(dev: &Arc<DeviceInner>) -> String {
    let _ipc = dev.ipc_lock.lock();
    let mut out = String::new();
    {
        let id = dev.identity.read();
        if let Some(i) = &id.identity {
            let _ = writeln!(out, "private_key={}", i.private_key().to_hex());
        }
    }
    {
        let n = dev.net.lock();
        if n.port != 0 {
            let _ = writeln!(out, "listen_port={}", n.port);
        }
        if n.fwmark != 0 {
            let _ = writeln!(out, "fwmark={}", n.fwmark);
        }
    }
    let peers: Vec<Arc<Peer>> = {
        let p = dev.peers.read();
        p.order
            .iter()
            .filter_map(|k| p.by_key.get(k).cloned())
            .collect()
    };
    let table = dev.allowed_ips.read();
    for p in peers {
        let _ = writeln!(out, "public_key={}", p.public_key.to_hex());
        let _ = writeln!(
            out,
            "preshared_key={}",
            p.handshake.lock().hs.preshared_key().to_hex()
        );
        out.push_str("protocol_version=1\n");
        if let Some(ep) = p.endpoint.lock().ep {
            let _ = writeln!(out, "endpoint={}", ep.dst_to_string());
        }
        let nanos = p.last_handshake_nanos.load(Ordering::Relaxed);
        let _ = writeln!(out, "last_handshake_time_sec={}", nanos / 1_000_000_000);
        let _ = writeln!(out, "last_handshake_time_nsec={}", nanos % 1_000_000_000);
        let (rx, tx) = p.rx_tx_bytes();
        let _ = writeln!(out, "tx_bytes={tx}");
        let _ = writeln!(out, "rx_bytes={rx}");
        let _ = writeln!(
            out,
            "persistent_keepalive_interval={}",
            p.persistent_keepalive.load(Ordering::Relaxed)
        );
        for (addr, cidr) in table.prefixes_of(&PeerRef(p.clone())) {
            let _ = writeln!(out, "allowed_ip={addr}/{cidr}");
        }
    }
    out
}

/// Serves UAPI requests from `r`, answering on `w`, until EOF or an unknown operation.
pub(crate) fn handle<R: BufRead, W: Write>(
    dev: &Arc<DeviceInner>,
    mut r: R,
    mut w: W,
) -> io::Result<()> {
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let op = line.trim_end_matches('\n');
        let status = match op {
            "set=1" => {
                let mut body = String::new();
                loop {
                    let mut l = String::new();
                    if r.read_line(&mut l)? == 0 || l == "\n" {
                        break;
                    }
                    body.push_str(&l);
                }
                ipc_set(dev, &body)
            }
            "get=1" => {
                let mut blank = String::new();
                r.read_line(&mut blank)?;
                if blank != "\n" {
                    Err(IpcError::new(
                        IPC_ERROR_PROTOCOL,
                        "get=1 must be followed by an empty line",
                    ))
                } else {
                    w.write_all(ipc_get(dev).as_bytes())?;
                    Ok(())
                }
            }
            _ => {
                tracing::error!(device = %dev.name, "invalid UAPI operation: {op:?}");
                return Ok(());
            }
        };
        match status {
            Ok(()) => w.write_all(b"errno=0\n\n")?,
            Err(e) => write!(w, "errno={}\n\n", e.code)?,
        }
        w.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::parse_prefix;

    #[test]
    fn prefixes() {
        assert_eq!(
            parse_prefix("10.1.2.3/8"),
            Some(("10.1.2.3".parse().unwrap(), 8))
        );
        assert_eq!(parse_prefix("fd00::/128").unwrap().1, 128);
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "fd00::/129",
            "x/1",
            "10.0.0.0/",
            "10.0.0.0/+1",
            "10.0.0.0/0001",
        ] {
            assert!(parse_prefix(bad).is_none(), "{bad}");
        }
    }
}
