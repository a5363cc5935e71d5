//! The WireGuard handshake: `Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s`, sans I/O.
//!
//! One [`Handshake`] per peer holds the in-progress state. The initiator calls
//! [`Handshake::create_initiation`] then [`Handshake::consume_response`]; the responder calls
//! [`decrypt_initiation`] (which needs only our identity, and yields the initiator's static key
//! so the caller can find the peer), then [`InitiationCandidate::accept`] on that peer's
//! handshake, then [`Handshake::create_response`]. Either side then takes the transport keys with
//! [`Handshake::derive_keys`]. MACs (mac1/mac2) are not this module's business: messages are
//! built with zero MAC fields and the cookie module fills and checks them.
//!
//! Every secret (chaining key, ephemeral, static-static DH, PSK) is wiped when cleared or
//! dropped. The state only changes when a step fully succeeds, so a forged or tampered message
//! never disturbs a handshake in progress.

use core::fmt;

use rand_core::{CryptoRng, RngCore};
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use crate::consts::HANDSHAKE_INITIATION_RATE;
use crate::crypto::{self, aead_open, aead_seal, hash, kdf1, kdf2, kdf3, CryptoError, KEY_SIZE};
use crate::keys::{PresharedKey, PrivateKey, PublicKey};
use crate::messages::{
    Initiation, ParseError, Response, ENCRYPTED_NOTHING_SIZE, ENCRYPTED_STATIC_SIZE,
    ENCRYPTED_TIMESTAMP_SIZE, INITIATION_SIZE, MESSAGE_INITIATION, MESSAGE_RESPONSE, RESPONSE_SIZE,
};
use crate::tai64n::{Tai64N, TIMESTAMP_SIZE};
use crate::time::Instant;

/// The Noise protocol name; its hash is the initial chaining key.
pub const CONSTRUCTION: &[u8] = b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
/// WireGuard's Noise prologue, mixed into the initial hash.
pub const IDENTIFIER: &[u8] = b"WireGuard v1 zx2c4 Jason@zx2c4.com";

/// `HASH(CONSTRUCTION)`, precomputed (checked against a fresh hash in the tests).
pub const INITIAL_CHAIN_KEY: [u8; KEY_SIZE] = [
    0x60, 0xe2, 0x6d, 0xae, 0xf3, 0x27, 0xef, 0xc0, 0x2e, 0xc3, 0x35, 0xe2, 0xa0, 0x25, 0xd2, 0xd0,
    0x16, 0xeb, 0x42, 0x06, 0xf8, 0x72, 0x77, 0xf5, 0x2d, 0x38, 0xd1, 0x98, 0x8b, 0x78, 0xcd, 0x36,
];
/// `HASH(INITIAL_CHAIN_KEY || IDENTIFIER)`, precomputed (checked in the tests).
pub const INITIAL_HASH: [u8; KEY_SIZE] = [
    0x22, 0x11, 0xb3, 0x61, 0x08, 0x1a, 0xc5, 0x66, 0x69, 0x12, 0x43, 0xdb, 0x45, 0x8a, 0xd5, 0x32,
    0x2d, 0x9c, 0x6c, 0x66, 0x22, 0x93, 0xe8, 0xb7, 0x0e, 0xe1, 0x9c, 0x65, 0xba, 0x07, 0x9e, 0xf3,
];

/// Where a peer's handshake stands.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum HandshakeState {
    /// Nothing in progress.
    Zeroed,
    /// We sent an initiation and wait for the response.
    InitiationCreated,
    /// We accepted the peer's initiation and owe it a response.
    InitiationConsumed,
    /// We sent a response; keys can be derived (responder).
    ResponseCreated,
    /// We accepted the response; keys can be derived (initiator).
    ResponseConsumed,
}

/// Why a handshake step failed. Every variant means "drop the message"; none is fatal.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HandshakeError {
    /// The message is not a well-formed initiation/response.
    Malformed(ParseError),
    /// The step does not fit the handshake's current state.
    WrongState {
        /// The state the step needs.
        expected: HandshakeState,
        /// The state the handshake is in.
        actual: HandshakeState,
    },
    /// A response whose receiver index is not our outstanding initiation's index.
    WrongIndex {
        /// Our local index.
        expected: u32,
        /// The index in the message.
        received: u32,
    },
    /// An encrypted field failed authentication (wrong keys, wrong PSK, tampering).
    DecryptFailed,
    /// A Diffie-Hellman result was all zero (a low-order public key).
    ZeroSharedSecret,
    /// Our private key is unset (all zero).
    NoPrivateKey,
    /// The initiator's static key belongs to no configured peer (for callers' lookups).
    UnknownPeer,
    /// `accept` was handed a peer whose static key is not the initiator's.
    PeerMismatch,
    /// The initiation's timestamp is not newer than the last accepted one (a replay).
    ReplayedTimestamp,
    /// The peer's previous initiation was accepted too recently (within 20 ms).
    Flood,
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Malformed(e) => write!(f, "malformed handshake message: {e}"),
            HandshakeError::WrongState { expected, actual } => {
                write!(f, "handshake in state {actual:?}, step needs {expected:?}")
            }
            HandshakeError::WrongIndex { expected, received } => {
                write!(f, "response for index {received:#x}, ours is {expected:#x}")
            }
            HandshakeError::DecryptFailed => f.write_str("handshake field failed to decrypt"),
            HandshakeError::ZeroSharedSecret => f.write_str("Diffie-Hellman result is all zero"),
            HandshakeError::NoPrivateKey => f.write_str("no private key configured"),
            HandshakeError::UnknownPeer => f.write_str("initiation from an unknown peer"),
            HandshakeError::PeerMismatch => f.write_str("initiation is from a different peer"),
            HandshakeError::ReplayedTimestamp => f.write_str("initiation timestamp replayed"),
            HandshakeError::Flood => f.write_str("initiations arriving faster than 1 per 20 ms"),
        }
    }
}

impl std::error::Error for HandshakeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HandshakeError::Malformed(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ParseError> for HandshakeError {
    fn from(e: ParseError) -> Self {
        HandshakeError::Malformed(e)
    }
}

impl From<CryptoError> for HandshakeError {
    fn from(e: CryptoError) -> Self {
        match e {
            CryptoError::ZeroSharedSecret => HandshakeError::ZeroSharedSecret,
            CryptoError::DecryptionFailed | CryptoError::BadLength => HandshakeError::DecryptFailed,
        }
    }
}

/// Our static key pair.
#[derive(Clone)]
pub struct StaticIdentity {
    private: PrivateKey,
    public: PublicKey,
}

impl StaticIdentity {
    /// Wraps a private key and derives its public key once.
    pub fn new(private: PrivateKey) -> Self {
        let public = private.public_key();
        StaticIdentity { private, public }
    }

    /// Our public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// Our private key.
    pub fn private_key(&self) -> &PrivateKey {
        &self.private
    }
}

impl fmt::Debug for StaticIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticIdentity")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

/// The symmetric transport keys of a completed handshake, wiped on drop.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct SessionKeys {
    /// Key for messages we send.
    pub send: [u8; KEY_SIZE],
    /// Key for messages we receive.
    pub recv: [u8; KEY_SIZE],
    /// Our index: the receiver index of messages sent to us.
    pub local_index: u32,
    /// The peer's index: the receiver index of messages we send.
    pub remote_index: u32,
    /// True when we initiated the handshake.
    pub is_initiator: bool,
}

impl fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionKeys")
            .field("local_index", &self.local_index)
            .field("remote_index", &self.remote_index)
            .field("is_initiator", &self.is_initiator)
            .finish_non_exhaustive()
    }
}

type Secret = Zeroizing<[u8; KEY_SIZE]>;

fn secret(v: [u8; KEY_SIZE]) -> Secret {
    Zeroizing::new(v)
}

/// `h = HASH(h || data)`
fn mix_hash(h: &mut [u8; KEY_SIZE], data: &[u8]) {
    *h = hash(&[&h[..], data]);
}

/// `ck = KDF1(ck, data)`
fn mix_key(ck: &mut [u8; KEY_SIZE], data: &[u8]) {
    *ck = kdf1(ck, data);
}

/// `(ck, k) = KDF2(ck, data)`, returning `k`.
fn mix_key2(ck: &mut [u8; KEY_SIZE], data: &[u8]) -> Secret {
    let (c, k) = kdf2(ck, data);
    *ck = c;
    secret(k)
}

/// `ck = KDF1(ck, DH(private, public))`, the DH result wiped afterwards.
fn mix_dh(
    ck: &mut [u8; KEY_SIZE],
    private: &PrivateKey,
    public: &PublicKey,
) -> Result<(), CryptoError> {
    let shared = secret(crypto::dh(private, public)?);
    mix_key(ck, &shared[..]);
    Ok(())
}

/// The step the initiator's first two messages share: start from the constants, mix the
/// responder's static key.
fn initial_state(responder_static: &PublicKey) -> (Secret, Secret) {
    let mut h = INITIAL_HASH;
    mix_hash(&mut h, responder_static.as_bytes());
    (secret(INITIAL_CHAIN_KEY), secret(h))
}

/// The psk2 tail shared by both sides of the response: `(ck, tau, k) = KDF3(ck, psk)`,
/// `h = HASH(h || tau)`, returning `k`.
fn mix_psk(ck: &mut [u8; KEY_SIZE], h: &mut [u8; KEY_SIZE], psk: &PresharedKey) -> Secret {
    let (c, tau, k) = kdf3(ck, psk.as_bytes());
    let tau = secret(tau);
    *ck = c;
    mix_hash(h, &tau[..]);
    secret(k)
}

/// Per-peer handshake state.
pub struct Handshake {
    state: HandshakeState,
    hash: Secret,
    chain_key: Secret,
    local_ephemeral: Option<PrivateKey>,
    remote_ephemeral: PublicKey,
    remote_static: PublicKey,
    /// `DH(S_priv, S_remote)` and the public key of the identity it was computed for: computed
    /// at the first handshake that needs it, not when the peer is configured (one X25519
    /// operation, about 40 µs: most of the cost of adding a peer, and of every peer again when
    /// the private key changes), and computed again whenever our identity has changed since.
    static_static: Option<(PublicKey, Secret)>,
    psk: PresharedKey,
    local_index: u32,
    remote_index: u32,
    last_timestamp: Tai64N,
    last_initiation_consumption: Option<Instant>,
}

impl fmt::Debug for Handshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handshake")
            .field("state", &self.state)
            .field("remote_static", &self.remote_static)
            .field("local_index", &self.local_index)
            .field("remote_index", &self.remote_index)
            .finish_non_exhaustive()
    }
}

/// Computes `DH(S_priv, S_remote)`; all zero when our key is unset or theirs is low-order,
/// which makes [`Handshake::can_handshake`] false.
fn compute_static_static(identity: &StaticIdentity, remote: &PublicKey) -> Secret {
    if identity.private_key().is_zero() {
        return secret([0; KEY_SIZE]);
    }
    secret(crypto::dh(identity.private_key(), remote).unwrap_or([0; KEY_SIZE]))
}

impl Handshake {
    /// A fresh handshake with a peer; `psk` is [`PresharedKey::zero`] when none is configured.
    /// The static-static secret with the identity is computed at the first handshake (see
    /// [`Handshake::can_handshake`]), so creating a peer costs no X25519 operation.
    pub fn new(_identity: &StaticIdentity, remote_static: PublicKey, psk: PresharedKey) -> Self {
        Handshake {
            state: HandshakeState::Zeroed,
            hash: secret([0; KEY_SIZE]),
            chain_key: secret([0; KEY_SIZE]),
            local_ephemeral: None,
            remote_ephemeral: PublicKey::default(),
            static_static: None,
            remote_static,
            psk,
            local_index: 0,
            remote_index: 0,
            last_timestamp: Tai64N::ZERO,
            last_initiation_consumption: None,
        }
    }

    /// The peer's static public key.
    pub fn remote_static(&self) -> &PublicKey {
        &self.remote_static
    }

    /// Replaces the pre-shared key; takes effect from the next message.
    pub fn set_preshared_key(&mut self, psk: PresharedKey) {
        self.psk = psk;
    }

    /// The pre-shared key.
    pub fn preshared_key(&self) -> &PresharedKey {
        &self.psk
    }

    /// After our private key changed: forgets the static-static DH (the next handshake
    /// computes it for `identity`) and drops any handshake in progress (it was bound to the old
    /// key).
    pub fn recompute_static_static(&mut self, _identity: &StaticIdentity) {
        self.static_static = None;
        self.clear();
    }

    /// The static-static DH with `identity`, computed now if it was not yet, or was for
    /// another identity.
    fn static_static(&mut self, identity: &StaticIdentity) -> &Secret {
        let fresh = matches!(&self.static_static, Some((p, _)) if p == identity.public_key());
        if !fresh {
            let ss = compute_static_static(identity, &self.remote_static);
            self.static_static = Some((*identity.public_key(), ss));
        }
        match &self.static_static {
            Some((_, ss)) => ss,
            None => unreachable!("set above"),
        }
    }

    /// False when the static-static DH with `identity` is all zero (no private key, or a
    /// low-order peer key): such a peer can never complete a handshake. Computes and keeps that
    /// DH at the first call.
    pub fn can_handshake(&mut self, identity: &StaticIdentity) -> bool {
        !crypto::is_zero(&self.static_static(identity)[..])
    }

    /// The current state.
    pub fn state(&self) -> HandshakeState {
        self.state
    }

    /// The local index of the handshake in progress, if it has one yet.
    pub fn local_index(&self) -> Option<u32> {
        match self.state {
            HandshakeState::InitiationCreated
            | HandshakeState::ResponseCreated
            | HandshakeState::ResponseConsumed => Some(self.local_index),
            HandshakeState::Zeroed | HandshakeState::InitiationConsumed => None,
        }
    }

    /// The timestamp of the last initiation accepted from this peer.
    pub fn last_timestamp(&self) -> Tai64N {
        self.last_timestamp
    }

    /// When the last initiation from this peer was accepted.
    pub fn last_initiation_consumption(&self) -> Option<Instant> {
        self.last_initiation_consumption
    }

    /// Back to [`HandshakeState::Zeroed`], wiping the chaining key, hash and ephemeral. Keeps
    /// the peer's static key, PSK, static-static DH, and the replay/flood memory.
    pub fn clear(&mut self) {
        self.state = HandshakeState::Zeroed;
        self.hash.zeroize();
        self.chain_key.zeroize();
        self.local_ephemeral = None;
        self.remote_ephemeral = PublicKey::default();
        self.local_index = 0;
        self.remote_index = 0;
    }

    fn check_keys(&mut self, identity: &StaticIdentity) -> Result<(), HandshakeError> {
        if identity.private_key().is_zero() {
            return Err(HandshakeError::NoPrivateKey);
        }
        if !self.can_handshake(identity) {
            return Err(HandshakeError::ZeroSharedSecret);
        }
        Ok(())
    }

    /// Initiator: builds a 148-byte initiation with mac1/mac2 left zero (the cookie generator
    /// adds them). Allowed in any state: a new initiation replaces whatever was in progress.
    pub fn create_initiation<R: RngCore + CryptoRng>(
        &mut self,
        identity: &StaticIdentity,
        local_index: u32,
        now: Tai64N,
        rng: &mut R,
    ) -> Result<[u8; INITIATION_SIZE], HandshakeError> {
        self.check_keys(identity)?;
        let mut msg = [0u8; INITIATION_SIZE];
        let (mut ck, mut h) = initial_state(&self.remote_static);

        let ephemeral = PrivateKey::generate(rng);
        let e_pub = ephemeral.public_key();
        mix_hash(&mut h, e_pub.as_bytes());
        mix_key(&mut ck, e_pub.as_bytes());

        let es = secret(crypto::dh(&ephemeral, &self.remote_static)?);
        let k = mix_key2(&mut ck, &es[..]);
        let mut enc_static = [0u8; ENCRYPTED_STATIC_SIZE];
        aead_seal(
            &k,
            &h[..],
            identity.public_key().as_bytes(),
            &mut enc_static,
        )?;
        mix_hash(&mut h, &enc_static);

        let k = mix_key2(&mut ck, &self.static_static(identity)[..]);
        let mut enc_ts = [0u8; ENCRYPTED_TIMESTAMP_SIZE];
        aead_seal(&k, &h[..], now.as_bytes(), &mut enc_ts)?;
        mix_hash(&mut h, &enc_ts);

        let fields: [&[u8]; 6] = [
            &MESSAGE_INITIATION.to_le_bytes(),
            &local_index.to_le_bytes(),
            e_pub.as_bytes(),
            &enc_static,
            &enc_ts,
            &[0u8; 32], // mac1, mac2
        ];
        write_fields(&mut msg, &fields);

        self.clear();
        self.chain_key = ck;
        self.hash = h;
        self.local_ephemeral = Some(ephemeral);
        self.local_index = local_index;
        self.state = HandshakeState::InitiationCreated;
        Ok(msg)
    }

    /// Initiator: consumes a 92-byte response to our outstanding initiation (state and
    /// receiver index checked). Does not check MACs. The handshake is unchanged on error.
    pub fn consume_response(
        &mut self,
        identity: &StaticIdentity,
        msg: &[u8],
    ) -> Result<(), HandshakeError> {
        let resp = Response::parse(msg)?;
        if self.state != HandshakeState::InitiationCreated {
            return Err(HandshakeError::WrongState {
                expected: HandshakeState::InitiationCreated,
                actual: self.state,
            });
        }
        if resp.receiver_index() != self.local_index {
            return Err(HandshakeError::WrongIndex {
                expected: self.local_index,
                received: resp.receiver_index(),
            });
        }
        self.check_keys(identity)?;
        let Some(ephemeral) = self.local_ephemeral.as_ref() else {
            // InitiationCreated always holds an ephemeral; treat a violation as a state error.
            return Err(HandshakeError::WrongState {
                expected: HandshakeState::InitiationCreated,
                actual: HandshakeState::Zeroed,
            });
        };

        let mut ck = self.chain_key.clone();
        let mut h = self.hash.clone();
        let e_r = PublicKey::from_bytes(*resp.ephemeral());
        mix_hash(&mut h, e_r.as_bytes());
        mix_key(&mut ck, e_r.as_bytes());
        mix_dh(&mut ck, ephemeral, &e_r)?;
        mix_dh(&mut ck, identity.private_key(), &e_r)?;
        let k = mix_psk(&mut ck, &mut h, &self.psk);
        aead_open(&k, &h[..], resp.encrypted_nothing(), &mut [])?;
        mix_hash(&mut h, resp.encrypted_nothing());

        self.chain_key = ck;
        self.hash = h;
        self.local_ephemeral = None;
        self.remote_index = resp.sender_index();
        self.state = HandshakeState::ResponseConsumed;
        Ok(())
    }

    /// Responder: after [`InitiationCandidate::accept`], builds the 92-byte response (MACs
    /// zero) with `local_index` as our index for the new session.
    pub fn create_response<R: RngCore + CryptoRng>(
        &mut self,
        local_index: u32,
        rng: &mut R,
    ) -> Result<[u8; RESPONSE_SIZE], HandshakeError> {
        if self.state != HandshakeState::InitiationConsumed {
            return Err(HandshakeError::WrongState {
                expected: HandshakeState::InitiationConsumed,
                actual: self.state,
            });
        }
        let mut ck = self.chain_key.clone();
        let mut h = self.hash.clone();

        let ephemeral = PrivateKey::generate(rng);
        let e_pub = ephemeral.public_key();
        mix_hash(&mut h, e_pub.as_bytes());
        mix_key(&mut ck, e_pub.as_bytes());
        mix_dh(&mut ck, &ephemeral, &self.remote_ephemeral)?;
        mix_dh(&mut ck, &ephemeral, &self.remote_static)?;
        let k = mix_psk(&mut ck, &mut h, &self.psk);
        let mut empty = [0u8; ENCRYPTED_NOTHING_SIZE];
        aead_seal(&k, &h[..], &[], &mut empty)?;
        mix_hash(&mut h, &empty);

        let mut msg = [0u8; RESPONSE_SIZE];
        let fields: [&[u8]; 6] = [
            &MESSAGE_RESPONSE.to_le_bytes(),
            &local_index.to_le_bytes(),
            &self.remote_index.to_le_bytes(),
            e_pub.as_bytes(),
            &empty,
            &[0u8; 32], // mac1, mac2
        ];
        write_fields(&mut msg, &fields);

        self.chain_key = ck;
        self.hash = h;
        self.local_index = local_index;
        self.state = HandshakeState::ResponseCreated;
        Ok(msg)
    }

    /// Either side, right after [`consume_response`](Self::consume_response) or
    /// [`create_response`](Self::create_response): the transport keys. Clears the handshake
    /// (keeping the replay and flood memory).
    pub fn derive_keys(&mut self) -> Result<SessionKeys, HandshakeError> {
        let is_initiator = match self.state {
            HandshakeState::ResponseConsumed => true,
            HandshakeState::ResponseCreated => false,
            actual => {
                return Err(HandshakeError::WrongState {
                    expected: HandshakeState::ResponseConsumed,
                    actual,
                })
            }
        };
        let (first, second) = kdf2(&self.chain_key, &[]);
        let (send, recv) = if is_initiator {
            (first, second)
        } else {
            (second, first)
        };
        let keys = SessionKeys {
            send,
            recv,
            local_index: self.local_index,
            remote_index: self.remote_index,
            is_initiator,
        };
        let (mut first, mut second) = (first, second);
        first.zeroize();
        second.zeroize();
        self.clear();
        Ok(keys)
    }
}

/// Copies consecutive fields into `out` (their lengths add up to `out.len()` by construction;
/// extra bytes on either side are ignored rather than panicking).
fn write_fields(out: &mut [u8], fields: &[&[u8]]) {
    let mut rest = out;
    for f in fields {
        let n = f.len().min(rest.len());
        let (head, tail) = rest.split_at_mut(n);
        head.copy_from_slice(&f[..n]);
        rest = tail;
    }
}

/// A decrypted initiation whose sender is known but not yet matched to a peer.
pub struct InitiationCandidate {
    /// Ours, to compute the static-static DH with the peer the caller finds.
    identity: StaticIdentity,
    remote_static: PublicKey,
    remote_ephemeral: PublicKey,
    sender_index: u32,
    chain_key: Secret,
    hash: Secret,
    encrypted_timestamp: [u8; ENCRYPTED_TIMESTAMP_SIZE],
}

impl fmt::Debug for InitiationCandidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InitiationCandidate")
            .field("remote_static", &self.remote_static)
            .field("sender_index", &self.sender_index)
            .finish_non_exhaustive()
    }
}

/// Responder, step 1: decrypts the initiator's static key. Needs no peer state, so the caller
/// can look the peer up by the returned key.
pub fn decrypt_initiation(
    identity: &StaticIdentity,
    msg: &[u8],
) -> Result<InitiationCandidate, HandshakeError> {
    let init = Initiation::parse(msg)?;
    if identity.private_key().is_zero() {
        return Err(HandshakeError::NoPrivateKey);
    }
    let (mut ck, mut h) = initial_state(identity.public_key());
    let e_i = PublicKey::from_bytes(*init.ephemeral());
    mix_hash(&mut h, e_i.as_bytes());
    mix_key(&mut ck, e_i.as_bytes());
    let es = secret(crypto::dh(identity.private_key(), &e_i)?);
    let k = mix_key2(&mut ck, &es[..]);
    let mut s_i = [0u8; KEY_SIZE];
    aead_open(&k, &h[..], init.encrypted_static(), &mut s_i)?;
    mix_hash(&mut h, init.encrypted_static());
    Ok(InitiationCandidate {
        identity: identity.clone(),
        remote_static: PublicKey::from_bytes(s_i),
        remote_ephemeral: e_i,
        sender_index: init.sender_index(),
        chain_key: ck,
        hash: h,
        encrypted_timestamp: *init.encrypted_timestamp(),
    })
}

impl InitiationCandidate {
    /// The initiator's static public key (decrypted and authenticated).
    pub fn remote_static(&self) -> &PublicKey {
        &self.remote_static
    }

    /// The initiator's index for this handshake.
    pub fn sender_index(&self) -> u32 {
        self.sender_index
    }

    /// Step 2, once the caller found the peer: checks that `peer.remote_static()` matches,
    /// decrypts the timestamp, rejects it if not strictly newer than the last accepted one
    /// (replay) or if the last accepted initiation was at most 20 ms before `now` (flood), then
    /// loads the state into `peer` (state [`HandshakeState::InitiationConsumed`]). On error the
    /// peer is unchanged.
    pub fn accept(self, peer: &mut Handshake, now: Instant) -> Result<(), HandshakeError> {
        if !crypto::constant_time_eq(peer.remote_static.as_bytes(), self.remote_static.as_bytes()) {
            return Err(HandshakeError::PeerMismatch);
        }
        if !peer.can_handshake(&self.identity) {
            return Err(HandshakeError::ZeroSharedSecret);
        }
        let mut ck = self.chain_key.clone();
        let mut h = self.hash.clone();
        let k = mix_key2(&mut ck, &peer.static_static(&self.identity)[..]);
        let mut ts = [0u8; TIMESTAMP_SIZE];
        aead_open(&k, &h[..], &self.encrypted_timestamp, &mut ts)?;
        mix_hash(&mut h, &self.encrypted_timestamp);
        let ts = Tai64N::from_bytes(ts);

        if !ts.is_after(&peer.last_timestamp) {
            return Err(HandshakeError::ReplayedTimestamp);
        }
        if let Some(last) = peer.last_initiation_consumption {
            if now.saturating_duration_since(last) <= HANDSHAKE_INITIATION_RATE {
                return Err(HandshakeError::Flood);
            }
        }

        peer.clear();
        peer.chain_key = ck;
        peer.hash = h;
        peer.remote_ephemeral = self.remote_ephemeral;
        peer.remote_index = self.sender_index;
        peer.last_timestamp = ts;
        if peer
            .last_initiation_consumption
            .is_none_or(|last| now > last)
        {
            peer.last_initiation_consumption = Some(now);
        }
        peer.state = HandshakeState::InitiationConsumed;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{INITIATION_MAC1_OFFSET, RESPONSE_MAC1_OFFSET};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// A point of order 8 on Curve25519 (its DH with any clamped scalar is zero).
    const ORDER8: [u8; 32] = [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ];

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(1_000_000_000 + n * 1_000_000)
    }

    fn ts(secs: u64) -> Tai64N {
        Tai64N::from_unix(1_700_000_000 + secs, 0)
    }

    struct Pair {
        rng: StdRng,
        i_id: StaticIdentity,
        r_id: StaticIdentity,
        i: Handshake,
        r: Handshake,
    }

    fn pair_with(seed: u64, psk_i: PresharedKey, psk_r: PresharedKey) -> Pair {
        let mut rng = StdRng::seed_from_u64(seed);
        let i_id = StaticIdentity::new(PrivateKey::generate(&mut rng));
        let r_id = StaticIdentity::new(PrivateKey::generate(&mut rng));
        let i = Handshake::new(&i_id, *r_id.public_key(), psk_i);
        let r = Handshake::new(&r_id, *i_id.public_key(), psk_r);
        Pair {
            rng,
            i_id,
            r_id,
            i,
            r,
        }
    }

    fn pair(seed: u64) -> Pair {
        pair_with(seed, PresharedKey::zero(), PresharedKey::zero())
    }

    /// Runs a full handshake i -> r and returns (initiator keys, responder keys).
    fn full(
        p: &mut Pair,
        t: Tai64N,
        now: Instant,
    ) -> Result<(SessionKeys, SessionKeys), HandshakeError> {
        let init = p.i.create_initiation(&p.i_id, 0x1111, t, &mut p.rng)?;
        let cand = decrypt_initiation(&p.r_id, &init)?;
        cand.accept(&mut p.r, now)?;
        let resp = p.r.create_response(0x2222, &mut p.rng)?;
        p.i.consume_response(&p.i_id, &resp)?;
        Ok((p.i.derive_keys()?, p.r.derive_keys()?))
    }

    #[test]
    fn initial_constants_match_published_values() {
        // boringtun 0.7 `noise/handshake.rs` publishes these as INITIAL_CHAIN_KEY and
        // INITIAL_CHAIN_HASH (decimal there; hex here). Recompute with blake2 directly too.
        use blake2::{Blake2s256, Digest};
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(
            hex(&INITIAL_CHAIN_KEY),
            "60e26daef327efc02ec335e2a025d2d016eb4206f87277f52d38d1988b78cd36"
        );
        assert_eq!(
            hex(&INITIAL_HASH),
            "2211b361081ac566691243db458ad5322d9c6c662293e8b70ee19c65ba079ef3"
        );
        let ck = Blake2s256::digest(b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s");
        assert_eq!(ck.as_slice(), &INITIAL_CHAIN_KEY[..]);
        let h = Blake2s256::digest([&ck[..], b"WireGuard v1 zx2c4 Jason@zx2c4.com"].concat());
        assert_eq!(h.as_slice(), &INITIAL_HASH[..]);
        assert_eq!(hash(&[CONSTRUCTION]), INITIAL_CHAIN_KEY);
        assert_eq!(hash(&[&INITIAL_CHAIN_KEY, IDENTIFIER]), INITIAL_HASH);
    }

    /// An RNG that replays fixed bytes, so the ephemerals of the known-answer test are known.
    struct FixedRng(Vec<u8>);
    impl RngCore for FixedRng {
        fn next_u32(&mut self) -> u32 {
            let mut b = [0u8; 4];
            self.fill_bytes(&mut b);
            u32::from_le_bytes(b)
        }
        fn next_u64(&mut self) -> u64 {
            let mut b = [0u8; 8];
            self.fill_bytes(&mut b);
            u64::from_le_bytes(b)
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            let take: Vec<u8> = self.0.drain(..dest.len()).collect();
            dest.copy_from_slice(&take);
        }
        fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
            self.fill_bytes(dest);
            Ok(())
        }
    }
    impl CryptoRng for FixedRng {}

    /// Reference primitives written straight from the definitions (RFC 2104 HMAC, RFC 5869
    /// HKDF, RFC 7748 X25519 via the bare function, RFC 8439 AEAD via the crate's one-shot API),
    /// sharing no code with `crypto.rs`.
    mod reference {
        use blake2::{Blake2s256, Digest};
        use chacha20poly1305::aead::{Aead, Payload};
        use chacha20poly1305::{ChaCha20Poly1305, KeyInit};

        pub fn h(parts: &[&[u8]]) -> [u8; 32] {
            Blake2s256::digest(parts.concat()).into()
        }
        pub fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
            let mut k = key.to_vec();
            k.resize(64, 0);
            let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
            let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
            let inner = h(&[&ipad, msg]);
            h(&[&opad, &inner])
        }
        pub fn hkdf(key: &[u8], input: &[u8], n: usize) -> Vec<[u8; 32]> {
            let prk = hmac(key, input);
            let mut out: Vec<[u8; 32]> = Vec::new();
            let mut prev: Vec<u8> = Vec::new();
            for i in 1..=n {
                let t = hmac(&prk, &[&prev[..], &[i as u8]].concat());
                prev = t.to_vec();
                out.push(t);
            }
            out
        }
        pub fn dh(sk: &[u8; 32], pk: &[u8; 32]) -> [u8; 32] {
            x25519_dalek::x25519(*sk, *pk)
        }
        pub fn public(sk: &[u8; 32]) -> [u8; 32] {
            x25519_dalek::x25519(*sk, x25519_dalek::X25519_BASEPOINT_BYTES)
        }
        pub fn seal(key: &[u8; 32], ad: &[u8], pt: &[u8]) -> Vec<u8> {
            ChaCha20Poly1305::new(key.into())
                .encrypt(&[0u8; 12].into(), Payload { msg: pt, aad: ad })
                .unwrap()
        }
    }

    #[test]
    fn key_schedule_known_answer() {
        use reference as r;
        let s_i: [u8; 32] = core::array::from_fn(|i| i as u8 + 1);
        let s_r: [u8; 32] = core::array::from_fn(|i| 0x80 + i as u8);
        let e_i: [u8; 32] = [0x11; 32];
        let e_r: [u8; 32] = [0x22; 32];
        let psk: [u8; 32] = [0x33; 32];
        let stamp = Tai64N::from_unix(1_600_000_000, 500_000_000);
        let (idx_i, idx_r) = (0xa1b2_c3d4u32, 0x0102_0304u32);

        // Our code.
        let i_id = StaticIdentity::new(PrivateKey::from_bytes(s_i));
        let r_id = StaticIdentity::new(PrivateKey::from_bytes(s_r));
        let mut hi = Handshake::new(&i_id, *r_id.public_key(), PresharedKey::from_bytes(psk));
        let mut hr = Handshake::new(&r_id, *i_id.public_key(), PresharedKey::from_bytes(psk));
        let init = hi
            .create_initiation(&i_id, idx_i, stamp, &mut FixedRng(e_i.to_vec()))
            .unwrap();
        decrypt_initiation(&r_id, &init)
            .unwrap()
            .accept(&mut hr, ms(0))
            .unwrap();
        let resp = hr
            .create_response(idx_r, &mut FixedRng(e_r.to_vec()))
            .unwrap();
        hi.consume_response(&i_id, &resp).unwrap();
        let ki = hi.derive_keys().unwrap();
        let kr = hr.derive_keys().unwrap();

        // The whitepaper, §5.4.2 and §5.4.3, step by step.
        let (spub_i, spub_r) = (r::public(&s_i), r::public(&s_r));
        let (epub_i, epub_r) = (r::public(&e_i), r::public(&e_r));
        let mut c = r::h(&[b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s"]);
        let mut h = r::h(&[&c, b"WireGuard v1 zx2c4 Jason@zx2c4.com"]);
        h = r::h(&[&h, &spub_r]);
        c = r::hkdf(&c, &epub_i, 1)[0];
        h = r::h(&[&h, &epub_i]);
        let t = r::hkdf(&c, &r::dh(&e_i, &spub_r), 2);
        c = t[0];
        let enc_static = r::seal(&t[1], &h, &spub_i);
        h = r::h(&[&h, &enc_static]);
        let t = r::hkdf(&c, &r::dh(&s_i, &spub_r), 2);
        c = t[0];
        let enc_ts = r::seal(&t[1], &h, stamp.as_bytes());
        h = r::h(&[&h, &enc_ts]);
        let mut want_init = vec![1, 0, 0, 0];
        want_init.extend_from_slice(&idx_i.to_le_bytes());
        want_init.extend_from_slice(&epub_i);
        want_init.extend_from_slice(&enc_static);
        want_init.extend_from_slice(&enc_ts);
        want_init.extend_from_slice(&[0; 32]);
        assert_eq!(init.to_vec(), want_init, "initiation bytes");

        c = r::hkdf(&c, &epub_r, 1)[0];
        h = r::h(&[&h, &epub_r]);
        c = r::hkdf(&c, &r::dh(&e_r, &epub_i), 1)[0];
        c = r::hkdf(&c, &r::dh(&e_r, &spub_i), 1)[0];
        let t = r::hkdf(&c, &psk, 3);
        c = t[0];
        h = r::h(&[&h, &t[1]]);
        let empty = r::seal(&t[2], &h, &[]);
        let mut want_resp = vec![2, 0, 0, 0];
        want_resp.extend_from_slice(&idx_r.to_le_bytes());
        want_resp.extend_from_slice(&idx_i.to_le_bytes());
        want_resp.extend_from_slice(&epub_r);
        want_resp.extend_from_slice(&empty);
        want_resp.extend_from_slice(&[0; 32]);
        assert_eq!(resp.to_vec(), want_resp, "response bytes");

        let t = r::hkdf(&c, &[], 2);
        assert_eq!(ki.send, t[0], "initiator sends with T1");
        assert_eq!(ki.recv, t[1]);
        assert_eq!(kr.send, t[1]);
        assert_eq!(kr.recv, t[0]);
        assert_eq!(
            (ki.local_index, ki.remote_index, ki.is_initiator),
            (idx_i, idx_r, true)
        );
        assert_eq!(
            (kr.local_index, kr.remote_index, kr.is_initiator),
            (idx_r, idx_i, false)
        );
    }

    #[test]
    fn handshake_both_ways_keys_match_crosswise() {
        let mut p = pair(1);
        let (ki, kr) = full(&mut p, ts(1), ms(0)).unwrap();
        assert_eq!(ki.send, kr.recv);
        assert_eq!(ki.recv, kr.send);
        assert_ne!(ki.send, ki.recv);
        assert_eq!(p.i.state(), HandshakeState::Zeroed);
        assert_eq!(p.r.state(), HandshakeState::Zeroed);
        assert_eq!(p.i.local_index(), None);

        // Reverse roles on the same handshake objects: r initiates, i responds.
        let init =
            p.r.create_initiation(&p.r_id, 7, ts(2), &mut p.rng)
                .unwrap();
        assert_eq!(p.r.state(), HandshakeState::InitiationCreated);
        assert_eq!(p.r.local_index(), Some(7));
        let cand = decrypt_initiation(&p.i_id, &init).unwrap();
        assert_eq!(cand.remote_static(), p.r_id.public_key());
        assert_eq!(cand.sender_index(), 7);
        cand.accept(&mut p.i, ms(0)).unwrap();
        assert_eq!(p.i.state(), HandshakeState::InitiationConsumed);
        assert_eq!(p.i.local_index(), None);
        let resp = p.i.create_response(9, &mut p.rng).unwrap();
        assert_eq!(p.i.local_index(), Some(9));
        p.r.consume_response(&p.r_id, &resp).unwrap();
        assert_eq!(p.r.state(), HandshakeState::ResponseConsumed);
        let kr2 = p.r.derive_keys().unwrap();
        let ki2 = p.i.derive_keys().unwrap();
        assert!(kr2.is_initiator && !ki2.is_initiator);
        assert_eq!(kr2.send, ki2.recv);
        assert_eq!(kr2.recv, ki2.send);
        assert_eq!((kr2.local_index, kr2.remote_index), (7, 9));
        assert_eq!((ki2.local_index, ki2.remote_index), (9, 7));
        assert_ne!(kr2.send, ki.send, "fresh ephemerals give fresh keys");
    }

    #[test]
    fn psk_is_mixed_and_mismatch_fails() {
        let psk = PresharedKey::from_bytes([0x77; 32]);
        let mut p = pair_with(2, psk.clone(), psk.clone());
        let (ki, kr) = full(&mut p, ts(1), ms(0)).unwrap();
        assert_eq!(ki.send, kr.recv);
        let mut q = pair_with(2, PresharedKey::zero(), PresharedKey::zero());
        let (qi, _) = full(&mut q, ts(1), ms(0)).unwrap();
        assert_ne!(qi.send, ki.send, "the PSK changes the keys");

        let mut p = pair_with(3, psk, PresharedKey::from_bytes([0x78; 32]));
        assert_eq!(
            full(&mut p, ts(1), ms(0)).err(),
            Some(HandshakeError::DecryptFailed)
        );
        assert_eq!(
            p.i.state(),
            HandshakeState::InitiationCreated,
            "failed response leaves state"
        );
        // set_preshared_key takes effect for the next handshake.
        p.r.set_preshared_key(p.i.preshared_key().clone());
        p.r.clear();
        full(&mut p, ts(2), ms(100)).unwrap();
    }

    #[test]
    fn replayed_timestamp_is_rejected() {
        let mut p = pair(4);
        let init =
            p.i.create_initiation(&p.i_id, 1, ts(10), &mut p.rng)
                .unwrap();
        decrypt_initiation(&p.r_id, &init)
            .unwrap()
            .accept(&mut p.r, ms(0))
            .unwrap();
        // The very same message again, long after the flood window.
        let again = decrypt_initiation(&p.r_id, &init)
            .unwrap()
            .accept(&mut p.r, ms(5000));
        assert_eq!(again, Err(HandshakeError::ReplayedTimestamp));
        // An older and an equal (whitened) timestamp are replays too.
        let old =
            p.i.create_initiation(&p.i_id, 2, ts(9), &mut p.rng)
                .unwrap();
        let res = decrypt_initiation(&p.r_id, &old)
            .unwrap()
            .accept(&mut p.r, ms(6000));
        assert_eq!(res, Err(HandshakeError::ReplayedTimestamp));
        let same = Tai64N::from_unix(1_700_000_010, 1000);
        let eq = p.i.create_initiation(&p.i_id, 3, same, &mut p.rng).unwrap();
        let res = decrypt_initiation(&p.r_id, &eq)
            .unwrap()
            .accept(&mut p.r, ms(7000));
        assert_eq!(res, Err(HandshakeError::ReplayedTimestamp));
        assert_eq!(p.r.last_timestamp(), ts(10));
        let newer =
            p.i.create_initiation(&p.i_id, 4, ts(11), &mut p.rng)
                .unwrap();
        decrypt_initiation(&p.r_id, &newer)
            .unwrap()
            .accept(&mut p.r, ms(8000))
            .unwrap();
    }

    #[test]
    fn flood_guard_20ms() {
        let mut p = pair(5);
        let a =
            p.i.create_initiation(&p.i_id, 1, ts(1), &mut p.rng)
                .unwrap();
        decrypt_initiation(&p.r_id, &a)
            .unwrap()
            .accept(&mut p.r, ms(0))
            .unwrap();
        let b =
            p.i.create_initiation(&p.i_id, 2, ts(2), &mut p.rng)
                .unwrap();
        let res = decrypt_initiation(&p.r_id, &b)
            .unwrap()
            .accept(&mut p.r, ms(10));
        assert_eq!(res, Err(HandshakeError::Flood));
        let res = decrypt_initiation(&p.r_id, &b)
            .unwrap()
            .accept(&mut p.r, ms(20));
        assert_eq!(
            res,
            Err(HandshakeError::Flood),
            "exactly 20 ms is still a flood"
        );
        assert_eq!(p.r.last_initiation_consumption(), Some(ms(0)));
        decrypt_initiation(&p.r_id, &b)
            .unwrap()
            .accept(&mut p.r, ms(21))
            .unwrap();
        assert_eq!(p.r.last_initiation_consumption(), Some(ms(21)));
        assert_eq!(p.r.state(), HandshakeState::InitiationConsumed);
    }

    #[test]
    fn wrong_state_and_index() {
        let mut p = pair(6);
        let fake = [0u8; RESPONSE_SIZE];
        let mut resp_like = fake;
        resp_like[0] = 2;
        assert!(matches!(
            p.i.consume_response(&p.i_id, &resp_like),
            Err(HandshakeError::WrongState {
                actual: HandshakeState::Zeroed,
                ..
            })
        ));
        assert!(matches!(
            p.r.create_response(1, &mut p.rng),
            Err(HandshakeError::WrongState {
                actual: HandshakeState::Zeroed,
                ..
            })
        ));
        assert!(matches!(
            p.i.derive_keys(),
            Err(HandshakeError::WrongState { .. })
        ));

        let init =
            p.i.create_initiation(&p.i_id, 0x42, ts(1), &mut p.rng)
                .unwrap();
        assert!(matches!(
            p.i.derive_keys(),
            Err(HandshakeError::WrongState { .. })
        ));
        decrypt_initiation(&p.r_id, &init)
            .unwrap()
            .accept(&mut p.r, ms(0))
            .unwrap();
        assert!(matches!(
            p.r.derive_keys(),
            Err(HandshakeError::WrongState { .. })
        ));
        let resp = p.r.create_response(0x99, &mut p.rng).unwrap();

        let mut wrong = resp;
        wrong[8..12].copy_from_slice(&0x43u32.to_le_bytes());
        assert_eq!(
            p.i.consume_response(&p.i_id, &wrong),
            Err(HandshakeError::WrongIndex {
                expected: 0x42,
                received: 0x43
            })
        );
        p.i.consume_response(&p.i_id, &resp).unwrap();
        // Consuming it a second time is a state error.
        assert!(matches!(
            p.i.consume_response(&p.i_id, &resp),
            Err(HandshakeError::WrongState {
                actual: HandshakeState::ResponseConsumed,
                ..
            })
        ));
        // A response is no initiation and vice versa.
        assert!(matches!(
            decrypt_initiation(&p.r_id, &resp),
            Err(HandshakeError::Malformed(_))
        ));
        assert!(matches!(
            p.i.consume_response(&p.i_id, &init),
            Err(HandshakeError::Malformed(_))
        ));
        let k = p.i.derive_keys().unwrap();
        assert_eq!(k.remote_index, 0x99);
        // After derive_keys, a fresh initiation works from Zeroed.
        assert!(matches!(
            p.i.derive_keys(),
            Err(HandshakeError::WrongState { .. })
        ));
    }

    #[test]
    fn tampered_initiation_bytes_fail() {
        let mut p = pair(7);
        let init =
            p.i.create_initiation(&p.i_id, 0x5555, ts(1), &mut p.rng)
                .unwrap();
        for pos in 0..INITIATION_SIZE {
            for bit in [0x01u8, 0x80] {
                let mut m = init;
                m[pos] ^= bit;
                let mut peer = Handshake::new(&p.r_id, *p.i_id.public_key(), PresharedKey::zero());
                let res = decrypt_initiation(&p.r_id, &m).and_then(|c| {
                    let idx = c.sender_index();
                    c.accept(&mut peer, ms(0)).map(|()| idx)
                });
                match pos {
                    // The sender index is authenticated by mac1 only, not by Noise.
                    4..8 => assert_ne!(res, Ok(0x5555), "pos {pos}"),
                    // mac1/mac2 are the cookie module's to check.
                    p if p >= INITIATION_MAC1_OFFSET => assert_eq!(res, Ok(0x5555)),
                    _ => {
                        assert!(res.is_err(), "tampered byte {pos} accepted");
                        assert_eq!(peer.state(), HandshakeState::Zeroed);
                    }
                }
            }
        }
    }

    #[test]
    fn tampered_response_bytes_fail() {
        let mut p = pair(8);
        for pos in 0..RESPONSE_SIZE {
            // A fresh exchange per position, so an accepted (unauthenticated) byte does not
            // leave the initiator in a later state for the next position.
            let init =
                p.i.create_initiation(&p.i_id, 0x5555, ts(1 + pos as u64), &mut p.rng)
                    .unwrap();
            decrypt_initiation(&p.r_id, &init)
                .unwrap()
                .accept(&mut p.r, ms(100 * pos as u64))
                .unwrap();
            let resp = p.r.create_response(0x6666, &mut p.rng).unwrap();
            let mut m = resp;
            m[pos] ^= 0x04;
            let res = p.i.consume_response(&p.i_id, &m);
            if (4..8).contains(&pos) || pos >= RESPONSE_MAC1_OFFSET {
                // Sender index and MACs are not authenticated by Noise (mac1 covers them).
                assert_eq!(res, Ok(()), "pos {pos}");
                continue;
            }
            assert!(res.is_err(), "tampered byte {pos} accepted");
            assert_eq!(p.i.state(), HandshakeState::InitiationCreated, "pos {pos}");
            // The genuine response still completes after the forgery.
            p.i.consume_response(&p.i_id, &resp).unwrap();
            let (ki, kr) = (p.i.derive_keys().unwrap(), p.r.derive_keys().unwrap());
            assert_eq!(ki.send, kr.recv);
        }
    }

    /// The static-static DH is computed at first use and kept with the identity it was for: a
    /// handshake made after our key changed uses the new one even without a recompute.
    #[test]
    fn static_static_follows_an_identity_change() {
        let mut rng = StdRng::seed_from_u64(11);
        let old = StaticIdentity::new(PrivateKey::generate(&mut rng));
        let new = StaticIdentity::new(PrivateKey::generate(&mut rng));
        let r = StaticIdentity::new(PrivateKey::generate(&mut rng));
        let mut i = Handshake::new(&old, *r.public_key(), PresharedKey::zero());
        assert!(i.can_handshake(&old));
        let init = i.create_initiation(&new, 1, ts(1), &mut rng).unwrap();
        let mut at_r = Handshake::new(&r, *new.public_key(), PresharedKey::zero());
        decrypt_initiation(&r, &init)
            .unwrap()
            .accept(&mut at_r, ms(0))
            .unwrap();
    }

    #[test]
    fn low_order_and_zero_keys_fail() {
        let mut rng = StdRng::seed_from_u64(9);
        let id = StaticIdentity::new(PrivateKey::generate(&mut rng));
        for bad in [[0u8; 32], ORDER8] {
            let mut h = Handshake::new(&id, PublicKey::from_bytes(bad), PresharedKey::zero());
            assert!(!h.can_handshake(&id));
            assert_eq!(
                h.create_initiation(&id, 1, ts(1), &mut rng).err(),
                Some(HandshakeError::ZeroSharedSecret)
            );
        }
        // Unset private key.
        let none = StaticIdentity::new(PrivateKey::from_bytes([0; 32]));
        let mut h = Handshake::new(&none, *id.public_key(), PresharedKey::zero());
        assert!(!h.can_handshake(&none));
        assert_eq!(
            h.create_initiation(&none, 1, ts(1), &mut rng).err(),
            Some(HandshakeError::NoPrivateKey)
        );

        // A low-order ephemeral in an initiation or a response.
        let mut p = pair(10);
        let mut init =
            p.i.create_initiation(&p.i_id, 1, ts(1), &mut p.rng)
                .unwrap();
        let good_init = init;
        init[8..40].copy_from_slice(&ORDER8);
        assert_eq!(
            decrypt_initiation(&p.r_id, &init).err(),
            Some(HandshakeError::ZeroSharedSecret)
        );
        init[8..40].copy_from_slice(&[0; 32]);
        assert_eq!(
            decrypt_initiation(&p.r_id, &init).err(),
            Some(HandshakeError::ZeroSharedSecret)
        );
        assert_eq!(
            decrypt_initiation(&none, &good_init).err(),
            Some(HandshakeError::NoPrivateKey)
        );
        decrypt_initiation(&p.r_id, &good_init)
            .unwrap()
            .accept(&mut p.r, ms(0))
            .unwrap();
        let mut resp = p.r.create_response(2, &mut p.rng).unwrap();
        resp[12..44].copy_from_slice(&ORDER8);
        assert_eq!(
            p.i.consume_response(&p.i_id, &resp),
            Err(HandshakeError::ZeroSharedSecret)
        );
    }

    #[test]
    fn peer_mismatch_and_key_change() {
        let mut p = pair(11);
        let other = StaticIdentity::new(PrivateKey::generate(&mut p.rng));
        let mut wrong_peer = Handshake::new(&p.r_id, *other.public_key(), PresharedKey::zero());
        let init =
            p.i.create_initiation(&p.i_id, 1, ts(1), &mut p.rng)
                .unwrap();
        let res = decrypt_initiation(&p.r_id, &init)
            .unwrap()
            .accept(&mut wrong_peer, ms(0));
        assert_eq!(res, Err(HandshakeError::PeerMismatch));
        // An initiation for another responder does not decrypt.
        assert_eq!(
            decrypt_initiation(&other, &init).err(),
            Some(HandshakeError::DecryptFailed)
        );

        // The responder changes its private key: the initiator's old view fails, and after
        // both sides learn the new key the handshake works again.
        let new_r = StaticIdentity::new(PrivateKey::generate(&mut p.rng));
        p.r.recompute_static_static(&new_r);
        assert_eq!(
            decrypt_initiation(&new_r, &init).err(),
            Some(HandshakeError::DecryptFailed)
        );
        p.r_id = new_r;
        p.i = Handshake::new(&p.i_id, *p.r_id.public_key(), PresharedKey::zero());
        full(&mut p, ts(2), ms(100)).unwrap();
    }

    #[test]
    fn random_input_never_panics() {
        let mut p = pair(12);
        let mut rng = StdRng::seed_from_u64(99);
        // An initiation in flight, so responses reach the decryption path.
        p.i.create_initiation(&p.i_id, 1, ts(1), &mut p.rng)
            .unwrap();
        for round in 0..3000 {
            let len = match round % 3 {
                0 => INITIATION_SIZE,
                1 => RESPONSE_SIZE,
                _ => rng.gen_range(0..200),
            };
            let mut buf: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if len >= 4 && round % 2 == 0 {
                buf[..4].copy_from_slice(&[if len == RESPONSE_SIZE { 2 } else { 1 }, 0, 0, 0]);
            }
            if len == RESPONSE_SIZE && round % 4 == 0 {
                buf[8..12].copy_from_slice(&1u32.to_le_bytes());
            }
            assert!(decrypt_initiation(&p.r_id, &buf).is_err());
            assert!(p.i.consume_response(&p.i_id, &buf).is_err());
            assert_eq!(p.i.state(), HandshakeState::InitiationCreated);
        }
    }

    #[test]
    fn clear_keeps_replay_memory_and_wipes_secrets() {
        let mut p = pair(13);
        full(&mut p, ts(5), ms(0)).unwrap();
        assert_eq!(p.r.last_timestamp(), ts(5));
        p.r.clear();
        assert_eq!(p.r.last_timestamp(), ts(5));
        assert_eq!(&p.r.chain_key[..], &[0u8; 32]);
        assert_eq!(&p.r.hash[..], &[0u8; 32]);
        assert!(p.r.local_ephemeral.is_none());
        let old =
            p.i.create_initiation(&p.i_id, 1, ts(5), &mut p.rng)
                .unwrap();
        let res = decrypt_initiation(&p.r_id, &old)
            .unwrap()
            .accept(&mut p.r, ms(1000));
        assert_eq!(res, Err(HandshakeError::ReplayedTimestamp));
        let dbg = format!("{:?} {:?}", p.i, p.i_id);
        assert!(!dbg.contains(&p.i_id.private_key().to_hex()));
    }
}
