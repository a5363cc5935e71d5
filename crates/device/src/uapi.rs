//! Applying a typed configuration change and reading the device's state: the device's half
//! of the UAPI protocol. The text is parsed and rendered by `vpn-ipc`, never here.
//!
//! `Device::configure` applies a [`Change`] in order and stops at the first error; what was
//! applied before stays applied, and the device stays usable (wireguard-go's
//! `IpcSetOperation`). `Device::ipc_set` parses the text first, without any device lock,
//! applies what parsed, then reports the parse error if there was one: the same result as
//! applying line by line.

use crate::peer::{Peer, PeerRef};
use crate::DeviceInner;
use std::io::{self, BufRead, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use vpn_ipc::serve::{self, Ended, Handler};
use vpn_ipc::{
    Change, DeviceSetting, DeviceState, IpcErrorKind, Part, PeerChange, PeerSetting, PeerState,
    Statistics,
};
use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};
use vpn_proto::noise::{Handshake, StaticIdentity};

pub use vpn_ipc::{
    IpcError, IPC_ERROR_INVALID, IPC_ERROR_IO, IPC_ERROR_PORT_IN_USE, IPC_ERROR_PROTOCOL,
    IPC_ERROR_UNKNOWN,
};

fn invalid(msg: impl Into<String>) -> IpcError {
    IpcError::invalid(msg)
}

fn port_in_use(msg: impl Into<String>) -> IpcError {
    IpcError::new(IpcErrorKind::PortInUse, msg)
}

/// The peer a section of the change is configuring.
struct Section {
    peer: Option<Arc<Peer>>,
    /// Created by this section (for `update_only`).
    created: bool,
    /// The key was our own public key, or `update_only`/`remove` discarded the peer: ignore
    /// the settings.
    dummy: bool,
    pka_turned_on: bool,
}

/// Applies a `set` body part by part as it parses (no parsed copy of a large body is kept), up
/// to the first bad line or failed setting, whose error is returned: what came before it stays
/// applied, as with wireguard-go.
pub(crate) fn ipc_set(dev: &Arc<DeviceInner>, text: &str) -> Result<(), IpcError> {
    let _ipc = dev.ipc_lock.lock();
    let res = Change::parse_each(text, |part| match part {
        Part::Device(s) => apply_device_setting(dev, &s),
        Part::Peer(p) => apply_peer(dev, &p),
    });
    log_failure(dev, res)
}

/// Applies `change` in order up to the first error, which is returned.
pub(crate) fn configure(dev: &Arc<DeviceInner>, change: &Change) -> Result<(), IpcError> {
    let _ipc = dev.ipc_lock.lock();
    let res = apply(dev, change);
    log_failure(dev, res)
}

fn log_failure(dev: &DeviceInner, res: Result<(), IpcError>) -> Result<(), IpcError> {
    if let Err(e) = &res {
        tracing::error!(device = %dev.name, "{e}");
    }
    res
}

fn apply(dev: &Arc<DeviceInner>, change: &Change) -> Result<(), IpcError> {
    for setting in change.device_settings() {
        apply_device_setting(dev, setting)?;
    }
    change.peers().iter().try_for_each(|p| apply_peer(dev, p))
}

/// One peer section; a section cut short by an error still ends as a section does (the peer is
/// started).
fn apply_peer(dev: &Arc<DeviceInner>, p: &PeerChange) -> Result<(), IpcError> {
    let mut section = begin_section(dev, p.public_key())?;
    let res = p
        .settings()
        .iter()
        .try_for_each(|s| apply_peer_setting(dev, &mut section, s));
    finish_section(dev, section);
    res
}

fn apply_device_setting(dev: &Arc<DeviceInner>, setting: &DeviceSetting) -> Result<(), IpcError> {
    match setting {
        DeviceSetting::PrivateKey(k) => dev.set_private_key(Some(k.clone())),
        DeviceSetting::ListenPort(port) => {
            dev.net.lock().port = *port;
            dev.bind_update()
                .map_err(|e| port_in_use(format!("failed to set listen_port: {e}")))?;
        }
        DeviceSetting::Fwmark(mark) => {
            dev.set_fwmark(*mark)
                .map_err(|e| port_in_use(format!("failed to update fwmark: {e}")))?;
        }
        DeviceSetting::ReplacePeers => dev.remove_all_peers(),
        other => return Err(invalid(format!("unsupported device setting: {other}"))),
    }
    Ok(())
}

fn begin_section(dev: &Arc<DeviceInner>, pk: &PublicKey) -> Result<Section, IpcError> {
    let section = |peer, created, dummy| Section {
        peer,
        created,
        dummy,
        pka_turned_on: false,
    };
    let own = dev
        .identity
        .read()
        .identity
        .as_ref()
        .map(|i| *i.public_key());
    if own.as_ref() == Some(pk) {
        return Ok(section(None, false, true));
    }
    if let Some(p) = dev.peers.read().by_key.get(pk) {
        return Ok(section(Some(p.clone()), false, false));
    }
    // Lock order: identity before peers (see device.rs).
    let id = dev.identity.read();
    let hs = match id.identity.as_ref() {
        Some(i) => Handshake::new(i, *pk, PresharedKey::zero()),
        // No private key yet: precompute against a placeholder; setting the key recomputes.
        None => Handshake::new(
            &StaticIdentity::new(PrivateKey::from_bytes([0; 32])),
            *pk,
            PresharedKey::zero(),
        ),
    };
    let mut peers = dev.peers.write();
    drop(id);
    if peers.by_key.len() >= vpn_proto::consts::MAX_PEERS {
        return Err(invalid("too many peers"));
    }
    let peer = Peer::new(dev, *pk, hs);
    peers.by_key.insert(*pk, peer.clone());
    peers.order.push(*pk);
    Ok(section(Some(peer), true, false))
}

fn apply_peer_setting(
    dev: &Arc<DeviceInner>,
    s: &mut Section,
    setting: &PeerSetting,
) -> Result<(), IpcError> {
    match setting {
        PeerSetting::UpdateOnly => {
            if s.created {
                if let Some(p) = s.peer.take() {
                    dev.remove_peer(&p.public_key);
                }
                s.dummy = true;
            }
        }
        PeerSetting::Remove => {
            if let Some(p) = s.peer.take() {
                dev.remove_peer(&p.public_key);
            }
            s.dummy = true;
        }
        // Values are checked even for a dummy section, so errors are reported the same way.
        PeerSetting::PresharedKey(k) => {
            if let Some(p) = live(s) {
                p.handshake.lock().hs.set_preshared_key(k.clone());
            }
        }
        PeerSetting::Endpoint(endpoint) => {
            let text = endpoint.to_text();
            let ep = dev
                .bind
                .parse_endpoint(&text)
                .map_err(|e| invalid(format!("failed to set endpoint {text}: {e}")))?;
            if let Some(p) = live(s) {
                let mut e = p.endpoint.lock();
                e.ep = Some(ep);
                e.clear_src_on_tx = false;
            }
        }
        PeerSetting::PersistentKeepaliveInterval(secs) => {
            if let Some(p) = live(s) {
                let old = p.set_persistent_keepalive(*secs);
                s.pka_turned_on = old == 0 && *secs != 0;
            }
        }
        PeerSetting::ReplaceAllowedIps => {
            if let Some(p) = live(s) {
                dev.allowed_ips.write().remove_by_value(&PeerRef(p.clone()));
            }
        }
        PeerSetting::AllowedIp(ip) => {
            if let Some(p) = live(s) {
                dev.allowed_ips
                    .write()
                    .insert(ip.addr(), ip.cidr(), PeerRef(p.clone()))
                    .map_err(|e| invalid(format!("failed to set allowed ip: {e}")))?;
            }
        }
        PeerSetting::RemoveAllowedIp(ip) => {
            if let Some(p) = live(s) {
                dev.allowed_ips
                    .write()
                    .remove(ip.addr(), ip.cidr(), &PeerRef(p.clone()));
            }
        }
        PeerSetting::ProtocolVersion(v) => {
            if *v != 1 {
                return Err(invalid(format!("invalid protocol version: {v}")));
            }
        }
        other => return Err(invalid(format!("unsupported peer setting: {other}"))),
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

/// The device's configuration and per-peer statistics, peers in creation order.
pub(crate) fn state(dev: &Arc<DeviceInner>) -> DeviceState {
    let _ipc = dev.ipc_lock.lock();
    let mut st = DeviceState::new();
    st.private_key = dev
        .identity
        .read()
        .identity
        .as_ref()
        .map(|i| i.private_key().clone());
    {
        let n = dev.net.lock();
        st.listen_port = n.port;
        st.fwmark = n.fwmark;
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
        let mut ps = PeerState::new(p.public_key);
        ps.preshared_key = p.handshake.lock().hs.preshared_key().clone();
        ps.endpoint = p.endpoint.lock().ep.map(|ep| ep.dst.into());
        let nanos = p.last_handshake_nanos.load(Ordering::Relaxed);
        ps.last_handshake_time = (nanos != 0).then(|| Duration::from_nanos(nanos));
        (ps.rx_bytes, ps.tx_bytes) = p.rx_tx_bytes();
        ps.persistent_keepalive_interval = p.persistent_keepalive();
        ps.allowed_ips = table
            .prefixes_of(&PeerRef(p.clone()))
            .into_iter()
            .filter_map(|(addr, cidr)| vpn_ipc::AllowedIp::new(addr, cidr))
            .collect();
        st.peers.push(ps);
    }
    st
}

/// The device's pipeline counters as the `device` group.
pub(crate) fn statistics(dev: &DeviceInner) -> Statistics {
    device_group(&dev.stats.snapshot())
}

fn device_group(s: &crate::Stats) -> Statistics {
    let mut st = Statistics::new();
    st.push_group("device", s.fields());
    st
}

/// The requests of one connection, answered by a device.
struct DeviceHandler<'a>(&'a Arc<DeviceInner>);

impl Handler for DeviceHandler<'_> {
    fn set(&self, body: &str) -> Result<(), IpcError> {
        ipc_set(self.0, body)
    }

    fn get(&self) -> Result<String, IpcError> {
        Ok(state(self.0).to_string())
    }
}

/// Serves UAPI requests from `r`, answering on `w`, until EOF or an unknown operation.
pub(crate) fn handle<R: BufRead, W: Write>(
    dev: &Arc<DeviceInner>,
    mut r: R,
    mut w: W,
) -> io::Result<()> {
    if let Ended::UnknownOperation(op) = serve::serve(&DeviceHandler(dev), &mut r, &mut w)? {
        tracing::error!(device = %dev.name, "invalid UAPI operation: {op:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stats;

    /// Every field of `Stats` (as its `Debug` output names them) is a `device.` counter, so a
    /// counter added to the device cannot silently go missing from `vpn show`.
    #[test]
    fn every_counter_is_a_device_statistic() {
        let s = Stats {
            drop_replay: 7,
            ..Stats::default()
        };
        let st = device_group(&s);
        assert_eq!(st.get("device.drop_replay"), Some(7));
        let dbg = format!("{s:?}");
        let inner = dbg.trim_start_matches("Stats {").trim_end_matches('}');
        let names: Vec<&str> = inner
            .split(',')
            .filter_map(|f| f.split(':').next())
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        for name in &names {
            assert!(
                st.get(&format!("device.{name}")).is_some(),
                "{name} missing"
            );
        }
        assert_eq!(st.iter().count(), names.len());
    }
}
