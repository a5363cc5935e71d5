//! The UAPI text form of a [`Change`] (a `set` body): the one parser and the one renderer.
//!
//! A body is `key=value` lines up to the first empty line. Device keys come first; each
//! `public_key` line opens a peer section that runs to the next one. Parsing stops at the first
//! bad line and returns what it read before it with the error, so the device can apply those
//! settings and then report the error, as wireguard-go does.

use crate::change::{AllowedIp, Change, DeviceSetting, Endpoint, PeerChange, PeerSetting};
use crate::error::IpcError;
use std::fmt;
use std::str::FromStr;
use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};

/// The lines of a body up to its first empty line, a trailing `\r` dropped from each (as
/// wireguard-go's line scanner drops it).
pub(crate) fn body_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .take_while(|l| !l.is_empty())
}

/// `key=value`, or the protocol error (`EPROTO`) of a line without `=`.
pub(crate) fn split_line(line: &str) -> Result<(&str, &str), IpcError> {
    line.split_once('=')
        .ok_or_else(|| IpcError::protocol(format!("failed to parse line {line:?}")))
}

/// An unsigned decimal as Go's `strconv.ParseUint(v, 10, bits)` reads it: digits only (no sign,
/// no spaces), in range.
pub(crate) fn decimal<T: FromStr>(v: &str) -> Option<T> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// The literal `true`, the only value the boolean keys accept.
fn expect_true(key: &str, value: &str) -> Result<(), IpcError> {
    if value == "true" {
        Ok(())
    } else {
        Err(IpcError::invalid(format!(
            "failed to set {key}, invalid value: {value}"
        )))
    }
}

pub(crate) fn public_key(value: &str) -> Result<PublicKey, IpcError> {
    PublicKey::from_hex(value)
        .map_err(|e| IpcError::invalid(format!("failed to get peer by public key: {e}")))
}

impl Change {
    /// Parses a `set` body, stopping at the first bad line: the settings before it and the
    /// error (`EPROTO` for a line without `=`, `EINVAL` for an unknown key or a bad value).
    ///
    /// The device (`vpn_device::Device::ipc_set`) applies the settings, then reports the
    /// error: what came before a bad line stays applied.
    pub fn parse_partial(text: &str) -> (Change, Option<IpcError>) {
        let mut change = Change::new();
        for line in body_lines(text) {
            if let Err(e) = parse_set_line(&mut change, line) {
                return (change, Some(e));
            }
        }
        (change, None)
    }
}

impl FromStr for Change {
    type Err = IpcError;

    /// Parses a whole `set` body; any bad line is an error.
    fn from_str(text: &str) -> Result<Change, IpcError> {
        match Change::parse_partial(text) {
            (change, None) => Ok(change),
            (_, Some(e)) => Err(e),
        }
    }
}

fn parse_set_line(change: &mut Change, line: &str) -> Result<(), IpcError> {
    let (key, value) = split_line(line)?;
    if key == "public_key" {
        change.push_peer(PeerChange::new(public_key(value)?));
        return Ok(());
    }
    match change.last_peer_mut() {
        None => {
            let s = device_setting(key, value)?;
            change.push_device(s);
        }
        Some(peer) => peer.push(peer_setting(key, value)?),
    }
    Ok(())
}

fn device_setting(key: &str, value: &str) -> Result<DeviceSetting, IpcError> {
    Ok(match key {
        "private_key" => DeviceSetting::PrivateKey(
            PrivateKey::from_hex(value)
                .map_err(|e| IpcError::invalid(format!("failed to set private_key: {e}")))?,
        ),
        "listen_port" => {
            DeviceSetting::ListenPort(decimal(value).ok_or_else(|| {
                IpcError::invalid(format!("failed to parse listen_port: {value}"))
            })?)
        }
        "fwmark" => DeviceSetting::Fwmark(
            decimal(value).ok_or_else(|| IpcError::invalid(format!("invalid fwmark: {value}")))?,
        ),
        "replace_peers" => {
            expect_true(key, value)?;
            DeviceSetting::ReplacePeers
        }
        _ => return Err(IpcError::invalid(format!("invalid UAPI device key: {key}"))),
    })
}

fn peer_setting(key: &str, value: &str) -> Result<PeerSetting, IpcError> {
    Ok(match key {
        "update_only" => {
            expect_true(key, value)?;
            PeerSetting::UpdateOnly
        }
        "remove" => {
            expect_true(key, value)?;
            PeerSetting::Remove
        }
        "preshared_key" => PeerSetting::PresharedKey(
            PresharedKey::from_hex(value)
                .map_err(|e| IpcError::invalid(format!("failed to set preshared key: {e}")))?,
        ),
        "endpoint" => PeerSetting::Endpoint(Endpoint::text(value)?),
        "persistent_keepalive_interval" => {
            PeerSetting::PersistentKeepaliveInterval(decimal(value).ok_or_else(|| {
                IpcError::invalid(format!(
                    "failed to set persistent keepalive interval: {value}"
                ))
            })?)
        }
        "replace_allowed_ips" => {
            expect_true(key, value)?;
            PeerSetting::ReplaceAllowedIps
        }
        "allowed_ip" => match value.strip_prefix('-') {
            Some(prefix) => PeerSetting::RemoveAllowedIp(prefix.parse::<AllowedIp>()?),
            None => PeerSetting::AllowedIp(value.parse::<AllowedIp>()?),
        },
        "protocol_version" => {
            if value != "1" {
                return Err(IpcError::invalid(format!(
                    "invalid protocol version: {value}"
                )));
            }
            PeerSetting::ProtocolVersion(1)
        }
        _ => return Err(IpcError::invalid(format!("invalid UAPI peer key: {key}"))),
    })
}

impl fmt::Display for DeviceSetting {
    /// The setting's `key=value` line, without the line break.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSetting::PrivateKey(k) => write!(f, "private_key={}", k.to_hex()),
            DeviceSetting::ListenPort(p) => write!(f, "listen_port={p}"),
            DeviceSetting::Fwmark(m) => write!(f, "fwmark={m}"),
            DeviceSetting::ReplacePeers => f.write_str("replace_peers=true"),
        }
    }
}

impl fmt::Display for PeerSetting {
    /// The setting's `key=value` line, without the line break.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerSetting::UpdateOnly => f.write_str("update_only=true"),
            PeerSetting::Remove => f.write_str("remove=true"),
            PeerSetting::PresharedKey(k) => write!(f, "preshared_key={}", k.to_hex()),
            PeerSetting::Endpoint(e) => write!(f, "endpoint={e}"),
            PeerSetting::PersistentKeepaliveInterval(s) => {
                write!(f, "persistent_keepalive_interval={s}")
            }
            PeerSetting::ReplaceAllowedIps => f.write_str("replace_allowed_ips=true"),
            PeerSetting::AllowedIp(ip) => write!(f, "allowed_ip={ip}"),
            PeerSetting::RemoveAllowedIp(ip) => write!(f, "allowed_ip=-{ip}"),
            PeerSetting::ProtocolVersion(v) => write!(f, "protocol_version={v}"),
        }
    }
}

impl fmt::Display for Change {
    /// The `set` body: one `key=value` line per setting, each ending in `\n`, no empty line
    /// (which would end the request early).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in self.device_settings() {
            writeln!(f, "{s}")?;
        }
        for p in self.peers() {
            writeln!(f, "public_key={}", p.public_key().to_hex())?;
            for s in p.settings() {
                writeln!(f, "{s}")?;
            }
        }
        Ok(())
    }
}
