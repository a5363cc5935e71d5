//! [`Change`]: a configuration change as a list of settings, in the order they apply.
//!
//! The order matters and is kept: wireguard-go applies a `set` line by line and stops at the
//! first error, so `fwmark=7` before a listen port that cannot be bound stays applied, and
//! `replace_allowed_ips` before `allowed_ip` lines differs from after them.

use crate::error::IpcError;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};

/// A peer's endpoint: an address, or the text the device's bind parses.
///
/// A `set` keeps the text as written (`Bind::parse_endpoint` decides what it means, as in
/// wireguard-go); a `get` dump yields an address when the text is one. Text never holds a line
/// break, so a rendered change always parses back to itself. Two endpoints are equal when
/// their UAPI text is: an address and the same address written as text are one endpoint.
#[derive(Clone, Debug)]
pub struct Endpoint(EndpointRepr);

#[derive(Clone, Debug)]
enum EndpointRepr {
    Addr(SocketAddr),
    Text(String),
}

impl Endpoint {
    /// Endpoint text for the bind to parse (`198.18.0.1:51820`, `[fd00::1]:51820`, or whatever
    /// a custom bind understands). Refused if it holds a line break.
    pub fn text(text: impl Into<String>) -> Result<Endpoint, IpcError> {
        let text = text.into();
        if text.contains(['\n', '\r']) {
            return Err(IpcError::invalid(format!(
                "failed to set endpoint {text:?}: line break in value"
            )));
        }
        Ok(Endpoint(EndpointRepr::Text(text)))
    }

    /// The address, if this endpoint is one (text is not parsed here).
    pub fn addr(&self) -> Option<SocketAddr> {
        match &self.0 {
            EndpointRepr::Addr(a) => Some(*a),
            EndpointRepr::Text(_) => None,
        }
    }

    /// The text form as UAPI carries it (`[ipv6]:port` for IPv6 addresses).
    pub fn to_text(&self) -> String {
        self.to_string()
    }

    /// A dump's endpoint: an address when it parses as one, the text otherwise.
    pub(crate) fn from_dump(text: &str) -> Result<Endpoint, IpcError> {
        match text.parse::<SocketAddr>() {
            Ok(a) => Ok(Endpoint::from(a)),
            Err(_) => Endpoint::text(text),
        }
    }
}

impl PartialEq for Endpoint {
    fn eq(&self, other: &Endpoint) -> bool {
        self.to_text() == other.to_text()
    }
}

impl Eq for Endpoint {}

impl std::hash::Hash for Endpoint {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.to_text().hash(state);
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(addr: SocketAddr) -> Endpoint {
        Endpoint(EndpointRepr::Addr(addr))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            EndpointRepr::Addr(a) => write!(f, "{a}"),
            EndpointRepr::Text(t) => f.write_str(t),
        }
    }
}

/// An allowed-IP prefix, `10.0.0.0/8` or `fd00::/8`. Host bits are kept as given; the device
/// masks them when it stores the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AllowedIp {
    addr: IpAddr,
    cidr: u8,
}

impl AllowedIp {
    /// `None` if `cidr` exceeds the family's width (32 or 128).
    pub fn new(addr: IpAddr, cidr: u8) -> Option<AllowedIp> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (cidr <= max).then_some(AllowedIp { addr, cidr })
    }

    /// The address as given.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn cidr(&self) -> u8 {
        self.cidr
    }
}

impl FromStr for AllowedIp {
    type Err = IpcError;

    /// `addr/len` with a decimal length of at most three digits (no sign, as `wg` writes it).
    fn from_str(s: &str) -> Result<AllowedIp, IpcError> {
        let bad = || IpcError::invalid(format!("failed to set allowed ip: {s}"));
        let (a, c) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        if c.is_empty() || c.len() > 3 || !c.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let cidr: u8 = c.parse().map_err(|_| bad())?;
        AllowedIp::new(addr, cidr).ok_or_else(bad)
    }
}

impl fmt::Display for AllowedIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.cidr)
    }
}

/// One device-level setting of a [`Change`] (allowed only before the first peer).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceSetting {
    /// `private_key`: the device's key; the all-zero key clears it.
    PrivateKey(PrivateKey),
    /// `listen_port`: the port to re-open the bind on (0: any).
    ListenPort(u16),
    /// `fwmark`: the mark on outgoing packets (0: none).
    Fwmark(u32),
    /// `replace_peers=true`: remove every peer.
    ReplacePeers,
}

/// One setting of a [`PeerChange`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerSetting {
    /// `update_only=true`: if the peer did not exist, the section changes nothing.
    UpdateOnly,
    /// `remove=true`: remove the peer; the rest of the section is ignored.
    Remove,
    /// `preshared_key`: the peer's preshared key (all zeros: none).
    PresharedKey(PresharedKey),
    /// `endpoint`: where to send to until the peer roams.
    Endpoint(Endpoint),
    /// `persistent_keepalive_interval`: seconds between keepalives (0: off).
    PersistentKeepaliveInterval(u16),
    /// `replace_allowed_ips=true`: remove every allowed IP of the peer.
    ReplaceAllowedIps,
    /// `allowed_ip=<prefix>`: route the prefix to the peer.
    AllowedIp(AllowedIp),
    /// `allowed_ip=-<prefix>`: remove exactly this prefix if it belongs to the peer.
    RemoveAllowedIp(AllowedIp),
    /// `protocol_version`: only 1 exists; anything else is refused when applied.
    ProtocolVersion(u32),
}

/// The settings of one peer, selected (or created) by its public key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerChange {
    public_key: PublicKey,
    settings: Vec<PeerSetting>,
}

impl PeerChange {
    /// A section for the peer with `public_key`, with no settings yet (applying it creates the
    /// peer if it does not exist).
    pub fn new(public_key: PublicKey) -> PeerChange {
        PeerChange {
            public_key,
            settings: Vec::new(),
        }
    }

    /// The peer's public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public_key
    }

    /// The settings, in the order they apply.
    pub fn settings(&self) -> &[PeerSetting] {
        &self.settings
    }

    /// Appends `setting`.
    pub fn push(&mut self, setting: PeerSetting) {
        self.settings.push(setting);
    }

    /// Appends `setting` (builder form).
    pub fn with(mut self, setting: PeerSetting) -> PeerChange {
        self.push(setting);
        self
    }

    /// Only update the peer if it exists.
    pub fn update_only(self) -> PeerChange {
        self.with(PeerSetting::UpdateOnly)
    }

    /// Remove the peer.
    pub fn remove(self) -> PeerChange {
        self.with(PeerSetting::Remove)
    }

    /// Set the preshared key.
    pub fn preshared_key(self, key: PresharedKey) -> PeerChange {
        self.with(PeerSetting::PresharedKey(key))
    }

    /// Set the endpoint (a `SocketAddr` converts into an [`Endpoint`]).
    pub fn endpoint(self, endpoint: impl Into<Endpoint>) -> PeerChange {
        self.with(PeerSetting::Endpoint(endpoint.into()))
    }

    /// Set the persistent keepalive interval in seconds (0: off).
    pub fn persistent_keepalive_interval(self, secs: u16) -> PeerChange {
        self.with(PeerSetting::PersistentKeepaliveInterval(secs))
    }

    /// Remove every allowed IP of the peer (before adding the new set).
    pub fn replace_allowed_ips(self) -> PeerChange {
        self.with(PeerSetting::ReplaceAllowedIps)
    }

    /// Add an allowed IP.
    pub fn allowed_ip(self, ip: AllowedIp) -> PeerChange {
        self.with(PeerSetting::AllowedIp(ip))
    }

    /// Remove one allowed IP of the peer.
    pub fn remove_allowed_ip(self, ip: AllowedIp) -> PeerChange {
        self.with(PeerSetting::RemoveAllowedIp(ip))
    }

    /// State the protocol version (only 1 exists).
    pub fn protocol_version(self, version: u32) -> PeerChange {
        self.with(PeerSetting::ProtocolVersion(version))
    }
}

/// A configuration change: device settings, then peer sections, each in the order they apply
/// (the typed form of a UAPI `set` body).
///
/// ```
/// use vpn_ipc::{AllowedIp, Change, PeerChange};
/// use vpn_proto::keys::{PrivateKey, PublicKey};
///
/// let peer = PublicKey::from_bytes([2; 32]);
/// let change = Change::new()
///     .private_key(PrivateKey::from_bytes([1; 32]))
///     .listen_port(51820)
///     .replace_peers()
///     .peer(
///         PeerChange::new(peer)
///             .endpoint("198.18.0.2:51820".parse::<std::net::SocketAddr>().unwrap())
///             .replace_allowed_ips()
///             .allowed_ip("100.64.0.2/32".parse::<AllowedIp>().unwrap()),
///     );
/// let text = change.to_string();
/// assert!(text.contains("\nallowed_ip=100.64.0.2/32\n"));
/// assert_eq!(text.parse::<Change>().unwrap(), change);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    device: Vec<DeviceSetting>,
    peers: Vec<PeerChange>,
}

impl Change {
    /// An empty change (applying it does nothing).
    pub fn new() -> Change {
        Change::default()
    }

    /// The device settings, in order.
    pub fn device_settings(&self) -> &[DeviceSetting] {
        &self.device
    }

    /// The peer sections, in order.
    pub fn peers(&self) -> &[PeerChange] {
        &self.peers
    }

    /// True when the change holds no setting and no peer.
    pub fn is_empty(&self) -> bool {
        self.device.is_empty() && self.peers.is_empty()
    }

    /// Appends a device setting. Device settings always apply before the peer sections.
    pub fn push_device(&mut self, setting: DeviceSetting) {
        self.device.push(setting);
    }

    /// Appends a peer section.
    pub fn push_peer(&mut self, peer: PeerChange) {
        self.peers.push(peer);
    }

    /// Appends a device setting (builder form).
    pub fn with(mut self, setting: DeviceSetting) -> Change {
        self.push_device(setting);
        self
    }

    /// Set the private key.
    pub fn private_key(self, key: PrivateKey) -> Change {
        self.with(DeviceSetting::PrivateKey(key))
    }

    /// Set the listen port.
    pub fn listen_port(self, port: u16) -> Change {
        self.with(DeviceSetting::ListenPort(port))
    }

    /// Set the firewall mark.
    pub fn fwmark(self, mark: u32) -> Change {
        self.with(DeviceSetting::Fwmark(mark))
    }

    /// Remove every peer first.
    pub fn replace_peers(self) -> Change {
        self.with(DeviceSetting::ReplacePeers)
    }

    /// Append a peer section (builder form).
    pub fn peer(mut self, peer: PeerChange) -> Change {
        self.push_peer(peer);
        self
    }
}
