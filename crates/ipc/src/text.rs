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
        let res = Change::parse_each(text, |part| {
            match part {
                Part::Device(s) => change.push_device(s),
                Part::Peer(p) => change.push_peer(p),
            }
            Ok(())
        });
        (change, res.err())
    }

    /// Parses a `set` body one part at a time, handing each to `apply` as soon as it is whole
    /// (a device setting at its line, a peer section at the next `public_key` line or the end),
    /// so a body of a hundred thousand peers never exists parsed all at once. Stops at the first
    /// bad line, after handing over what came before it (the section it cut short included),
    /// and returns its error; or at the first error `apply` returns, which it returns.
    pub fn parse_each(
        text: &str,
        mut apply: impl FnMut(Part) -> Result<(), IpcError>,
    ) -> Result<(), IpcError> {
        let mut peer: Option<PeerChange> = None;
        let mut bad_line = None;
        for line in body_lines(text) {
            match parse_part_line(&mut peer, line) {
                Ok(Some(part)) => apply(part)?,
                Ok(None) => {}
                Err(e) => {
                    bad_line = Some(e);
                    break;
                }
            }
        }
        if let Some(p) = peer {
            apply(Part::Peer(p))?;
        }
        bad_line.map_or(Ok(()), Err)
    }
}

/// One whole part of a `set` body, as [`Change::parse_each`] hands it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// A device setting (they come before the first peer section).
    Device(DeviceSetting),
    /// A peer section: its public key and settings.
    Peer(PeerChange),
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

/// One line of a `set` body, with `peer` the section being read: a part that is now whole, if
/// any (a device setting; the previous section, closed by a `public_key` line).
fn parse_part_line(peer: &mut Option<PeerChange>, line: &str) -> Result<Option<Part>, IpcError> {
    let (key, value) = split_line(line)?;
    if key == "public_key" {
        let next = PeerChange::new(public_key(value)?);
        return Ok(peer.replace(next).map(Part::Peer));
    }
    match peer {
        None => Ok(Some(Part::Device(device_setting(key, value)?))),
        Some(p) => {
            p.push(peer_setting(key, value)?);
            Ok(None)
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{IpcErrorKind, IPC_ERROR_INVALID, IPC_ERROR_PROTOCOL};

    const PK: &str = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f";

    fn pk() -> PublicKey {
        PublicKey::from_hex(PK).unwrap()
    }

    fn ip(s: &str) -> AllowedIp {
        s.parse().unwrap()
    }

    #[test]
    fn every_bad_line_gets_its_errno() {
        let cases: Vec<(String, i64)> = vec![
            ("no equals sign".into(), IPC_ERROR_PROTOCOL),
            ("bogus_key=1".into(), IPC_ERROR_INVALID),
            ("private_key=zz".into(), IPC_ERROR_INVALID),
            ("private_key=00".into(), IPC_ERROR_INVALID),
            ("listen_port=65536".into(), IPC_ERROR_INVALID),
            ("listen_port=-1".into(), IPC_ERROR_INVALID),
            ("listen_port=+1".into(), IPC_ERROR_INVALID),
            ("listen_port=".into(), IPC_ERROR_INVALID),
            ("fwmark=x".into(), IPC_ERROR_INVALID),
            ("fwmark=4294967296".into(), IPC_ERROR_INVALID),
            ("replace_peers=yes".into(), IPC_ERROR_INVALID),
            ("public_key=abc".into(), IPC_ERROR_INVALID),
            (format!("public_key={PK}\nendpoint=a\rb"), IPC_ERROR_INVALID),
            (
                format!("public_key={PK}\npreshared_key=12"),
                IPC_ERROR_INVALID,
            ),
            (
                format!("public_key={PK}\npersistent_keepalive_interval=70000"),
                IPC_ERROR_INVALID,
            ),
            (
                format!("public_key={PK}\nallowed_ip=10.0.0.0/33"),
                IPC_ERROR_INVALID,
            ),
            (
                format!("public_key={PK}\nallowed_ip=10.0.0.0"),
                IPC_ERROR_INVALID,
            ),
            (
                format!("public_key={PK}\nallowed_ip=10.0.0.0/0008"),
                IPC_ERROR_INVALID,
            ),
            (format!("public_key={PK}\nallowed_ip=-"), IPC_ERROR_INVALID),
            (
                format!("public_key={PK}\nallowed_ip=--10.0.0.0/8"),
                IPC_ERROR_INVALID,
            ),
            (
                format!("public_key={PK}\nprotocol_version=2"),
                IPC_ERROR_INVALID,
            ),
            (
                format!("public_key={PK}\nreplace_allowed_ips=false"),
                IPC_ERROR_INVALID,
            ),
            (format!("public_key={PK}\nremove=1"), IPC_ERROR_INVALID),
            (
                format!("public_key={PK}\nupdate_only=maybe"),
                IPC_ERROR_INVALID,
            ),
            // Device keys are refused inside a peer section.
            (format!("public_key={PK}\nlisten_port=1"), IPC_ERROR_INVALID),
            (
                format!("public_key={PK}\nprivate_key={PK}"),
                IPC_ERROR_INVALID,
            ),
            (format!("public_key={PK}\nno equals"), IPC_ERROR_PROTOCOL),
        ];
        for (text, code) in cases {
            let e = text.parse::<Change>().expect_err(&text);
            assert_eq!(e.code(), code, "{text:?}: {e}");
        }
    }

    #[test]
    fn parsing_stops_at_the_first_bad_line_keeping_what_came_before() {
        let key = PrivateKey::from_bytes([3; 32]);
        let text = format!(
            "private_key={}\nfwmark=7\nbogus=1\nfwmark=8\n",
            key.to_hex()
        );
        let (change, err) = Change::parse_partial(&text);
        assert_eq!(err.unwrap().kind(), IpcErrorKind::Invalid);
        assert_eq!(change, Change::new().private_key(key).fwmark(7));

        // An error inside a peer section keeps the section and its settings before the error.
        let text = format!(
            "public_key={PK}\nallowed_ip=10.0.0.0/8\nallowed_ip=bad\nallowed_ip=10.1.0.0/16\n"
        );
        let (change, err) = Change::parse_partial(&text);
        assert!(err.is_some());
        assert_eq!(
            change,
            Change::new().peer(PeerChange::new(pk()).allowed_ip(ip("10.0.0.0/8")))
        );

        // A bad public key ends the change after the previous section.
        let text = format!("public_key={PK}\nremove=true\npublic_key=00\nremove=true\n");
        let (change, err) = Change::parse_partial(&text);
        assert!(err.is_some());
        assert_eq!(change, Change::new().peer(PeerChange::new(pk()).remove()));
    }

    #[test]
    fn minus_prefix_is_a_removal_of_that_prefix() {
        let text = format!("public_key={PK}\nallowed_ip=-10.1.2.3/16\nallowed_ip=fd00::/8\n");
        let change: Change = text.parse().unwrap();
        let settings = change.peers()[0].settings();
        assert_eq!(
            settings,
            [
                PeerSetting::RemoveAllowedIp(ip("10.1.2.3/16")),
                PeerSetting::AllowedIp(ip("fd00::/8")),
            ]
        );
        // Host bits are kept as written; the device masks.
        assert_eq!(change.to_string(), text);
    }

    #[test]
    fn peer_flags_parse_to_their_settings_in_order() {
        let text = format!(
            "public_key={PK}\nupdate_only=true\nreplace_allowed_ips=true\nremove=true\nprotocol_version=1\n"
        );
        let change: Change = text.parse().unwrap();
        assert_eq!(
            change.peers()[0].settings(),
            [
                PeerSetting::UpdateOnly,
                PeerSetting::ReplaceAllowedIps,
                PeerSetting::Remove,
                PeerSetting::ProtocolVersion(1),
            ]
        );
        assert!(format!("public_key={PK}\nupdate_only=True")
            .parse::<Change>()
            .is_err());
    }

    #[test]
    fn body_ends_at_the_first_empty_line_and_crlf_is_accepted() {
        let change: Change = "fwmark=1\r\nlisten_port=2\r\n\r\nbogus\n".parse().unwrap();
        assert_eq!(change, Change::new().fwmark(1).listen_port(2));
        assert!(Change::parse_partial("").0.is_empty());
        assert_eq!("\nfwmark=1".parse::<Change>().unwrap(), Change::new());
    }

    #[test]
    fn endpoint_is_kept_as_text_for_the_bind() {
        let text = format!("public_key={PK}\nendpoint=[fe80::1%eth0]:51820\n");
        let change: Change = text.parse().unwrap();
        match &change.peers()[0].settings()[0] {
            PeerSetting::Endpoint(e) => {
                assert_eq!(e.addr(), None);
                assert_eq!(e.to_text(), "[fe80::1%eth0]:51820");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(change.to_string(), text);
        assert!(Endpoint::text("1.2.3.4:5\nfwmark=1").is_err());
    }

    #[test]
    fn builder_renders_the_lines_wg_setconf_sends() {
        let key = PrivateKey::from_bytes([1; 32]);
        let change = Change::new()
            .private_key(key.clone())
            .listen_port(51820)
            .fwmark(32)
            .replace_peers()
            .peer(
                PeerChange::new(pk())
                    .preshared_key(PresharedKey::from_bytes([3; 32]))
                    .endpoint(std::net::SocketAddr::from(([198, 18, 0, 2], 51821)))
                    .persistent_keepalive_interval(25)
                    .replace_allowed_ips()
                    .allowed_ip(ip("100.64.0.0/24"))
                    .remove_allowed_ip(ip("fd00::2/128"))
                    .update_only()
                    .remove()
                    .protocol_version(1),
            );
        let want = format!(
            "private_key={}\nlisten_port=51820\nfwmark=32\nreplace_peers=true\n\
             public_key={PK}\npreshared_key={}\nendpoint=198.18.0.2:51821\n\
             persistent_keepalive_interval=25\nreplace_allowed_ips=true\n\
             allowed_ip=100.64.0.0/24\nallowed_ip=-fd00::2/128\nupdate_only=true\nremove=true\n\
             protocol_version=1\n",
            key.to_hex(),
            "03".repeat(32)
        );
        assert_eq!(change.to_string(), want);
        // An address endpoint comes back as text: the bind parses it.
        let back: Change = want.parse().unwrap();
        assert_eq!(back.to_string(), want);
    }
}
