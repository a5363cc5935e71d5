//! The four WireGuard message formats: classification and zero-copy typed views.
//!
//! Every message starts with a little-endian u32 whose low byte is the type (1..=4) and whose
//! three other bytes must be zero. Handshake and cookie messages have exact lengths
//! (wireguard-go: "make unmarshall length checks exact"); a transport message is at least its
//! 16-byte header plus a 16-byte tag (an empty one is a keepalive). Parsing never panics: each
//! view checks the length once, converts every field to a fixed-size array reference, and the
//! accessors just hand those out.

use core::fmt;

use crate::tai64n::TIMESTAMP_SIZE;

/// Type code of a handshake initiation.
pub const MESSAGE_INITIATION: u32 = 1;
/// Type code of a handshake response.
pub const MESSAGE_RESPONSE: u32 = 2;
/// Type code of a cookie reply.
pub const MESSAGE_COOKIE_REPLY: u32 = 3;
/// Type code of a transport (data) message.
pub const MESSAGE_TRANSPORT: u32 = 4;

/// Size of a handshake initiation.
pub const INITIATION_SIZE: usize = 148;
/// Size of a handshake response.
pub const RESPONSE_SIZE: usize = 92;
/// Size of a cookie reply.
pub const COOKIE_REPLY_SIZE: usize = 64;
/// Size of the transport header: type, receiver index, counter.
pub const TRANSPORT_HEADER_SIZE: usize = 16;
/// Size of a Poly1305 tag.
pub const AEAD_TAG_SIZE: usize = 16;
/// Smallest transport message: header plus tag (a keepalive). wireguard-go's `MinMessageSize`.
pub const TRANSPORT_MIN_SIZE: usize = TRANSPORT_HEADER_SIZE + AEAD_TAG_SIZE;
/// Offset of the receiver index in a transport message.
pub const TRANSPORT_OFFSET_RECEIVER: usize = 4;
/// Offset of the counter in a transport message.
pub const TRANSPORT_OFFSET_COUNTER: usize = 8;
/// Offset of the ciphertext in a transport message.
pub const TRANSPORT_OFFSET_CONTENT: usize = 16;

/// Offset of mac1 in an initiation: mac1 covers `msg[..INITIATION_MAC1_OFFSET]`.
pub const INITIATION_MAC1_OFFSET: usize = 116;
/// Offset of mac2 in an initiation: mac2 covers `msg[..INITIATION_MAC2_OFFSET]`.
pub const INITIATION_MAC2_OFFSET: usize = 132;
/// Offset of mac1 in a response.
pub const RESPONSE_MAC1_OFFSET: usize = 60;
/// Offset of mac2 in a response.
pub const RESPONSE_MAC2_OFFSET: usize = 76;

/// Size of a public key / ephemeral on the wire.
const KEY: usize = 32;
/// Size of a MAC field.
const MAC: usize = 16;
/// Size of the encrypted static key (key + tag).
pub const ENCRYPTED_STATIC_SIZE: usize = KEY + AEAD_TAG_SIZE;
/// Size of the encrypted timestamp (timestamp + tag).
pub const ENCRYPTED_TIMESTAMP_SIZE: usize = TIMESTAMP_SIZE + AEAD_TAG_SIZE;
/// Size of the response's encrypted empty payload (a bare tag).
pub const ENCRYPTED_NOTHING_SIZE: usize = AEAD_TAG_SIZE;
/// Size of the cookie reply's XChaCha20 nonce.
pub const COOKIE_NONCE_SIZE: usize = 24;
/// Size of the encrypted cookie (16-byte cookie + tag).
pub const ENCRYPTED_COOKIE_SIZE: usize = 16 + AEAD_TAG_SIZE;

/// The kind of a message, from its type word.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// Handshake initiation (type 1, 148 bytes).
    Initiation,
    /// Handshake response (type 2, 92 bytes).
    Response,
    /// Cookie reply (type 3, 64 bytes).
    CookieReply,
    /// Transport data (type 4, at least 32 bytes).
    Transport,
}

impl MessageType {
    /// The wire type code.
    pub const fn code(self) -> u32 {
        match self {
            MessageType::Initiation => MESSAGE_INITIATION,
            MessageType::Response => MESSAGE_RESPONSE,
            MessageType::CookieReply => MESSAGE_COOKIE_REPLY,
            MessageType::Transport => MESSAGE_TRANSPORT,
        }
    }

    /// The type for a wire code, if it is one of the four.
    pub const fn from_code(code: u32) -> Option<Self> {
        match code {
            MESSAGE_INITIATION => Some(MessageType::Initiation),
            MESSAGE_RESPONSE => Some(MessageType::Response),
            MESSAGE_COOKIE_REPLY => Some(MessageType::CookieReply),
            MESSAGE_TRANSPORT => Some(MessageType::Transport),
            _ => None,
        }
    }
}

/// Why a buffer is not a well-formed message.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Fewer than 4 bytes: not even a type word.
    Truncated {
        /// Bytes received.
        len: usize,
    },
    /// The type word is not 1..=4 with three zero bytes.
    UnknownType(u32),
    /// A typed parser was handed another kind of message.
    WrongType {
        /// The kind the parser handles.
        expected: MessageType,
        /// The type word found.
        found: u32,
    },
    /// A handshake or cookie message whose length is not exactly its size.
    WrongLength {
        /// The kind of message.
        kind: MessageType,
        /// Its exact size.
        expected: usize,
        /// Bytes received.
        actual: usize,
    },
    /// A transport message shorter than header plus tag.
    TransportTooShort {
        /// Bytes received.
        len: usize,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Truncated { len } => write!(f, "message of {len} bytes has no type word"),
            ParseError::UnknownType(t) => write!(f, "unknown message type word {t:#010x}"),
            ParseError::WrongType { expected, found } => {
                write!(
                    f,
                    "expected a {expected:?} message, found type word {found:#010x}"
                )
            }
            ParseError::WrongLength {
                kind,
                expected,
                actual,
            } => {
                write!(f, "{kind:?} message must be {expected} bytes, got {actual}")
            }
            ParseError::TransportTooShort { len } => write!(
                f,
                "transport message of {len} bytes is shorter than {TRANSPORT_MIN_SIZE}"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

#[inline]
fn type_word(buf: &[u8]) -> Result<u32, ParseError> {
    match buf.first_chunk::<4>() {
        Some(w) => Ok(u32::from_le_bytes(*w)),
        None => Err(ParseError::Truncated { len: buf.len() }),
    }
}

/// Classifies a datagram by its type word and checks its length for that type.
#[inline]
pub fn classify(buf: &[u8]) -> Result<MessageType, ParseError> {
    let word = type_word(buf)?;
    let kind = MessageType::from_code(word).ok_or(ParseError::UnknownType(word))?;
    let exact = match kind {
        MessageType::Initiation => INITIATION_SIZE,
        MessageType::Response => RESPONSE_SIZE,
        MessageType::CookieReply => COOKIE_REPLY_SIZE,
        MessageType::Transport => {
            return if buf.len() >= TRANSPORT_MIN_SIZE {
                Ok(kind)
            } else {
                Err(ParseError::TransportTooShort { len: buf.len() })
            };
        }
    };
    if buf.len() == exact {
        Ok(kind)
    } else {
        Err(ParseError::WrongLength {
            kind,
            expected: exact,
            actual: buf.len(),
        })
    }
}

/// Checks type and exact length, returning the buffer as a fixed-size array.
fn exact<const N: usize>(buf: &[u8], kind: MessageType) -> Result<&[u8; N], ParseError> {
    let word = type_word(buf)?;
    if word != kind.code() {
        return Err(ParseError::WrongType {
            expected: kind,
            found: word,
        });
    }
    <&[u8; N]>::try_from(buf).map_err(|_| ParseError::WrongLength {
        kind,
        expected: N,
        actual: buf.len(),
    })
}

/// A cursor that hands out consecutive fixed-size fields of an already length-checked buffer.
/// A field past the end is reported as a length error (it cannot happen for the layouts here,
/// which the tests pin, but the parser stays panic-free by construction).
struct Fields<'a> {
    rest: &'a [u8],
    kind: MessageType,
    total: usize,
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8], kind: MessageType) -> Self {
        Fields {
            rest: buf,
            kind,
            total: buf.len(),
        }
    }

    fn take<const N: usize>(&mut self) -> Result<&'a [u8; N], ParseError> {
        match self.rest.split_first_chunk::<N>() {
            Some((field, rest)) => {
                self.rest = rest;
                Ok(field)
            }
            None => Err(ParseError::WrongLength {
                kind: self.kind,
                expected: self.total - self.rest.len() + N,
                actual: self.total,
            }),
        }
    }

    fn u32(&mut self) -> Result<u32, ParseError> {
        self.take::<4>().map(|b| u32::from_le_bytes(*b))
    }
}

/// A handshake initiation (type 1).
#[derive(Copy, Clone, Debug)]
pub struct Initiation<'a> {
    bytes: &'a [u8; INITIATION_SIZE],
    sender_index: u32,
    ephemeral: &'a [u8; KEY],
    encrypted_static: &'a [u8; ENCRYPTED_STATIC_SIZE],
    encrypted_timestamp: &'a [u8; ENCRYPTED_TIMESTAMP_SIZE],
    mac1: &'a [u8; MAC],
    mac2: &'a [u8; MAC],
}

impl<'a> Initiation<'a> {
    /// Parses an initiation: type word exactly 1, length exactly 148.
    pub fn parse(buf: &'a [u8]) -> Result<Self, ParseError> {
        let bytes = exact::<INITIATION_SIZE>(buf, MessageType::Initiation)?;
        let mut f = Fields::new(bytes, MessageType::Initiation);
        f.take::<4>()?;
        Ok(Initiation {
            bytes,
            sender_index: f.u32()?,
            ephemeral: f.take()?,
            encrypted_static: f.take()?,
            encrypted_timestamp: f.take()?,
            mac1: f.take()?,
            mac2: f.take()?,
        })
    }

    /// The whole message (for MAC computation).
    pub fn bytes(&self) -> &'a [u8; INITIATION_SIZE] {
        self.bytes
    }
    /// The initiator's index for this handshake.
    pub fn sender_index(&self) -> u32 {
        self.sender_index
    }
    /// The initiator's ephemeral public key.
    pub fn ephemeral(&self) -> &'a [u8; KEY] {
        self.ephemeral
    }
    /// The initiator's static public key, encrypted.
    pub fn encrypted_static(&self) -> &'a [u8; ENCRYPTED_STATIC_SIZE] {
        self.encrypted_static
    }
    /// The TAI64N timestamp, encrypted.
    pub fn encrypted_timestamp(&self) -> &'a [u8; ENCRYPTED_TIMESTAMP_SIZE] {
        self.encrypted_timestamp
    }
    /// mac1 (over `bytes()[..116]`).
    pub fn mac1(&self) -> &'a [u8; MAC] {
        self.mac1
    }
    /// mac2 (over `bytes()[..132]`), zero when the initiator holds no cookie.
    pub fn mac2(&self) -> &'a [u8; MAC] {
        self.mac2
    }
}

/// A handshake response (type 2).
#[derive(Copy, Clone, Debug)]
pub struct Response<'a> {
    bytes: &'a [u8; RESPONSE_SIZE],
    sender_index: u32,
    receiver_index: u32,
    ephemeral: &'a [u8; KEY],
    encrypted_nothing: &'a [u8; ENCRYPTED_NOTHING_SIZE],
    mac1: &'a [u8; MAC],
    mac2: &'a [u8; MAC],
}

impl<'a> Response<'a> {
    /// Parses a response: type word exactly 2, length exactly 92.
    pub fn parse(buf: &'a [u8]) -> Result<Self, ParseError> {
        let bytes = exact::<RESPONSE_SIZE>(buf, MessageType::Response)?;
        let mut f = Fields::new(bytes, MessageType::Response);
        f.take::<4>()?;
        Ok(Response {
            bytes,
            sender_index: f.u32()?,
            receiver_index: f.u32()?,
            ephemeral: f.take()?,
            encrypted_nothing: f.take()?,
            mac1: f.take()?,
            mac2: f.take()?,
        })
    }

    /// The whole message (for MAC computation).
    pub fn bytes(&self) -> &'a [u8; RESPONSE_SIZE] {
        self.bytes
    }
    /// The responder's index for the new session.
    pub fn sender_index(&self) -> u32 {
        self.sender_index
    }
    /// The initiator's index this answers.
    pub fn receiver_index(&self) -> u32 {
        self.receiver_index
    }
    /// The responder's ephemeral public key.
    pub fn ephemeral(&self) -> &'a [u8; KEY] {
        self.ephemeral
    }
    /// The encrypted empty payload (a bare tag that confirms the key schedule).
    pub fn encrypted_nothing(&self) -> &'a [u8; ENCRYPTED_NOTHING_SIZE] {
        self.encrypted_nothing
    }
    /// mac1 (over `bytes()[..60]`).
    pub fn mac1(&self) -> &'a [u8; MAC] {
        self.mac1
    }
    /// mac2 (over `bytes()[..76]`).
    pub fn mac2(&self) -> &'a [u8; MAC] {
        self.mac2
    }
}

/// A cookie reply (type 3).
#[derive(Copy, Clone, Debug)]
pub struct CookieReply<'a> {
    bytes: &'a [u8; COOKIE_REPLY_SIZE],
    receiver_index: u32,
    nonce: &'a [u8; COOKIE_NONCE_SIZE],
    encrypted_cookie: &'a [u8; ENCRYPTED_COOKIE_SIZE],
}

impl<'a> CookieReply<'a> {
    /// Parses a cookie reply: type word exactly 3, length exactly 64.
    pub fn parse(buf: &'a [u8]) -> Result<Self, ParseError> {
        let bytes = exact::<COOKIE_REPLY_SIZE>(buf, MessageType::CookieReply)?;
        let mut f = Fields::new(bytes, MessageType::CookieReply);
        f.take::<4>()?;
        Ok(CookieReply {
            bytes,
            receiver_index: f.u32()?,
            nonce: f.take()?,
            encrypted_cookie: f.take()?,
        })
    }

    /// The whole message.
    pub fn bytes(&self) -> &'a [u8; COOKIE_REPLY_SIZE] {
        self.bytes
    }
    /// The sender index of the handshake message this answers.
    pub fn receiver_index(&self) -> u32 {
        self.receiver_index
    }
    /// The XChaCha20-Poly1305 nonce.
    pub fn nonce(&self) -> &'a [u8; COOKIE_NONCE_SIZE] {
        self.nonce
    }
    /// The encrypted cookie (16 bytes + tag).
    pub fn encrypted_cookie(&self) -> &'a [u8; ENCRYPTED_COOKIE_SIZE] {
        self.encrypted_cookie
    }
}

/// The 16-byte header of a transport message.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TransportHeader {
    /// The receiver's index of the keypair that encrypted the message.
    pub receiver_index: u32,
    /// The nonce counter (little-endian on the wire).
    pub counter: u64,
}

impl TransportHeader {
    /// Parses the header of a complete transport message: type word exactly 4 and at least
    /// [`TRANSPORT_MIN_SIZE`] bytes (header plus tag), so a buffer that passes can be handed
    /// straight to the AEAD.
    #[inline]
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        let word = type_word(buf)?;
        if word != MESSAGE_TRANSPORT {
            return Err(ParseError::WrongType {
                expected: MessageType::Transport,
                found: word,
            });
        }
        if buf.len() < TRANSPORT_MIN_SIZE {
            return Err(ParseError::TransportTooShort { len: buf.len() });
        }
        let mut f = Fields::new(buf, MessageType::Transport);
        f.take::<4>()?;
        let receiver_index = f.u32()?;
        let counter = u64::from_le_bytes(*f.take::<8>()?);
        Ok(TransportHeader {
            receiver_index,
            counter,
        })
    }

    /// Writes the header: type 4 with zero reserved bytes, receiver index, counter.
    pub fn write(&self, out: &mut [u8; TRANSPORT_HEADER_SIZE]) {
        let (ty, rest) = out.split_at_mut(TRANSPORT_OFFSET_RECEIVER);
        ty.copy_from_slice(&MESSAGE_TRANSPORT.to_le_bytes());
        let (rx, ctr) = rest.split_at_mut(TRANSPORT_OFFSET_COUNTER - TRANSPORT_OFFSET_RECEIVER);
        rx.copy_from_slice(&self.receiver_index.to_le_bytes());
        ctr.copy_from_slice(&self.counter.to_le_bytes());
    }
}

/// A received datagram sorted for dispatch in one read: a transport message with its header,
/// or a handshake or cookie message of its exact size (which the handshake path parses in
/// full later). The receive path classifies every datagram of a batch with this.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// A transport message: type 4, at least header plus tag.
    Transport(TransportHeader),
    /// An initiation, response or cookie reply of exactly its size.
    Handshake(MessageType),
}

impl Received {
    /// Sorts `buf`; an error says why it is none of the four messages.
    #[inline]
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        match classify(buf)? {
            MessageType::Transport => TransportHeader::parse(buf).map(Received::Transport),
            kind => Ok(Received::Handshake(kind)),
        }
    }
}

/// The sender index of a handshake initiation or response (where a cookie reply to it is
/// addressed).
pub fn sender_index(buf: &[u8]) -> Result<u32, ParseError> {
    match classify(buf)? {
        MessageType::Initiation => Initiation::parse(buf).map(|m| m.sender_index()),
        MessageType::Response => Response::parse(buf).map(|m| m.sender_index()),
        kind => Err(ParseError::WrongType {
            expected: MessageType::Initiation,
            found: kind.code(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, RngCore, SeedableRng};

    fn msg(ty: u32, len: usize) -> Vec<u8> {
        let mut v: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        v[..4].copy_from_slice(&ty.to_le_bytes());
        v
    }

    #[test]
    fn layout_adds_up() {
        assert_eq!(
            4 + 4 + KEY + ENCRYPTED_STATIC_SIZE + ENCRYPTED_TIMESTAMP_SIZE,
            INITIATION_MAC1_OFFSET
        );
        assert_eq!(INITIATION_MAC1_OFFSET + MAC, INITIATION_MAC2_OFFSET);
        assert_eq!(INITIATION_MAC2_OFFSET + MAC, INITIATION_SIZE);
        assert_eq!(
            4 + 4 + 4 + KEY + ENCRYPTED_NOTHING_SIZE,
            RESPONSE_MAC1_OFFSET
        );
        assert_eq!(RESPONSE_MAC2_OFFSET + MAC, RESPONSE_SIZE);
        assert_eq!(
            4 + 4 + COOKIE_NONCE_SIZE + ENCRYPTED_COOKIE_SIZE,
            COOKIE_REPLY_SIZE
        );
        assert_eq!(TRANSPORT_MIN_SIZE, 32);
    }

    #[test]
    fn classify_accepts_exact_sizes() {
        assert_eq!(classify(&msg(1, 148)), Ok(MessageType::Initiation));
        assert_eq!(classify(&msg(2, 92)), Ok(MessageType::Response));
        assert_eq!(classify(&msg(3, 64)), Ok(MessageType::CookieReply));
        assert_eq!(classify(&msg(4, 32)), Ok(MessageType::Transport));
        assert_eq!(classify(&msg(4, 1452)), Ok(MessageType::Transport));
        assert_eq!(classify(&msg(4, 65535)), Ok(MessageType::Transport));
    }

    #[test]
    fn classify_rejects_bad_lengths_and_types() {
        for (ty, size) in [(1u32, 148usize), (2, 92), (3, 64)] {
            assert!(matches!(
                classify(&msg(ty, size - 1)),
                Err(ParseError::WrongLength { .. })
            ));
            assert!(matches!(
                classify(&msg(ty, size + 1)),
                Err(ParseError::WrongLength { .. })
            ));
        }
        assert_eq!(
            classify(&msg(4, 31)),
            Err(ParseError::TransportTooShort { len: 31 })
        );
        assert_eq!(classify(&[1, 0, 0]), Err(ParseError::Truncated { len: 3 }));
        assert_eq!(classify(&[]), Err(ParseError::Truncated { len: 0 }));
        assert_eq!(classify(&msg(5, 148)), Err(ParseError::UnknownType(5)));
        assert_eq!(classify(&msg(0, 148)), Err(ParseError::UnknownType(0)));
        // Type 1 with a non-zero reserved byte is not an initiation.
        for reserved in 1..4 {
            let mut m = msg(1, 148);
            m[reserved] = 1;
            assert!(matches!(classify(&m), Err(ParseError::UnknownType(_))));
            assert!(Initiation::parse(&m).is_err());
        }
        let mut m = msg(4, 64);
        m[3] = 0x80;
        assert!(classify(&m).is_err());
        assert!(TransportHeader::parse(&m).is_err());
    }

    #[test]
    fn initiation_fields() {
        let m = msg(1, 148);
        let i = Initiation::parse(&m).unwrap();
        assert_eq!(
            i.sender_index(),
            u32::from_le_bytes(m[4..8].try_into().unwrap())
        );
        assert_eq!(&i.ephemeral()[..], &m[8..40]);
        assert_eq!(&i.encrypted_static()[..], &m[40..88]);
        assert_eq!(&i.encrypted_timestamp()[..], &m[88..116]);
        assert_eq!(&i.mac1()[..], &m[116..132]);
        assert_eq!(&i.mac2()[..], &m[132..148]);
        assert_eq!(&i.bytes()[..], &m[..]);
        assert!(matches!(
            Initiation::parse(&msg(2, 148)),
            Err(ParseError::WrongType { .. })
        ));
        assert!(matches!(
            Initiation::parse(&msg(1, 149)),
            Err(ParseError::WrongLength { .. })
        ));
    }

    #[test]
    fn response_fields() {
        let m = msg(2, 92);
        let r = Response::parse(&m).unwrap();
        assert_eq!(
            r.sender_index(),
            u32::from_le_bytes(m[4..8].try_into().unwrap())
        );
        assert_eq!(
            r.receiver_index(),
            u32::from_le_bytes(m[8..12].try_into().unwrap())
        );
        assert_eq!(&r.ephemeral()[..], &m[12..44]);
        assert_eq!(&r.encrypted_nothing()[..], &m[44..60]);
        assert_eq!(&r.mac1()[..], &m[60..76]);
        assert_eq!(&r.mac2()[..], &m[76..92]);
        assert!(Response::parse(&msg(2, 91)).is_err());
        assert!(Response::parse(&msg(1, 92)).is_err());
    }

    #[test]
    fn cookie_reply_fields() {
        let m = msg(3, 64);
        let c = CookieReply::parse(&m).unwrap();
        assert_eq!(
            c.receiver_index(),
            u32::from_le_bytes(m[4..8].try_into().unwrap())
        );
        assert_eq!(&c.nonce()[..], &m[8..32]);
        assert_eq!(&c.encrypted_cookie()[..], &m[32..64]);
        assert!(CookieReply::parse(&msg(3, 65)).is_err());
    }

    #[test]
    fn transport_header_round_trip() {
        let h = TransportHeader {
            receiver_index: 0xdead_beef,
            counter: 0x0102_0304_0506_0708,
        };
        let mut out = [0xffu8; 16];
        h.write(&mut out);
        assert_eq!(&out[..4], &[4, 0, 0, 0]);
        assert_eq!(&out[4..8], &0xdead_beefu32.to_le_bytes());
        assert_eq!(&out[8..16], &0x0102_0304_0506_0708u64.to_le_bytes());
        let mut m = out.to_vec();
        assert_eq!(
            TransportHeader::parse(&m),
            Err(ParseError::TransportTooShort { len: 16 })
        );
        m.extend_from_slice(&[0; 16]);
        assert_eq!(TransportHeader::parse(&m), Ok(h));
        assert!(TransportHeader::parse(&msg(1, 148)).is_err());
    }

    #[test]
    fn received_sorts_transport_with_its_header_and_handshakes_by_kind() {
        let h = TransportHeader {
            receiver_index: 0x0102_0304,
            counter: 99,
        };
        let mut m = vec![0u8; TRANSPORT_MIN_SIZE + 8];
        h.write(m.first_chunk_mut().unwrap());
        assert_eq!(Received::parse(&m), Ok(Received::Transport(h)));
        for (ty, size, kind) in [
            (1, 148, MessageType::Initiation),
            (2, 92, MessageType::Response),
            (3, 64, MessageType::CookieReply),
        ] {
            assert_eq!(
                Received::parse(&msg(ty, size)),
                Ok(Received::Handshake(kind))
            );
            assert!(Received::parse(&msg(ty, size + 1)).is_err());
        }
        assert_eq!(
            Received::parse(&m[..TRANSPORT_MIN_SIZE - 1]),
            Err(ParseError::TransportTooShort {
                len: TRANSPORT_MIN_SIZE - 1
            })
        );
        assert_eq!(
            Received::parse(&msg(7, 64)),
            Err(ParseError::UnknownType(7))
        );
        assert!(Received::parse(&[]).is_err());
    }

    #[test]
    fn sender_index_reads_initiations_and_responses_only() {
        let i = msg(1, 148);
        assert_eq!(
            sender_index(&i),
            Ok(Initiation::parse(&i).unwrap().sender_index())
        );
        let r = msg(2, 92);
        assert_eq!(
            sender_index(&r),
            Ok(Response::parse(&r).unwrap().sender_index())
        );
        assert!(matches!(
            sender_index(&msg(3, 64)),
            Err(ParseError::WrongType { found: 3, .. })
        ));
        assert!(sender_index(&msg(4, 64)).is_err());
        assert!(sender_index(&msg(1, 147)).is_err());
    }

    #[test]
    fn random_and_truncated_buffers_never_panic() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        let mut buf = [0u8; 200];
        for round in 0..5000 {
            let len = rng.gen_range(0..buf.len());
            rng.fill_bytes(&mut buf[..len]);
            // Half the rounds get a valid type word so the length paths are exercised.
            if round % 2 == 0 && len >= 4 {
                let ty = rng.gen_range(1u32..=4);
                buf[..4].copy_from_slice(&ty.to_le_bytes());
            }
            let b = &buf[..len];
            let kind = classify(b);
            let i = Initiation::parse(b);
            let r = Response::parse(b);
            let c = CookieReply::parse(b);
            let t = TransportHeader::parse(b);
            let sorted = Received::parse(b);
            assert_eq!(sorted.is_ok(), kind.is_ok());
            assert_eq!(sorted.ok(), t.ok().map(Received::Transport).or(sorted.ok()));
            assert_eq!(
                sender_index(b).is_ok(),
                i.is_ok() || r.is_ok(),
                "sender index only of initiations and responses"
            );
            // The typed parsers agree with classify.
            assert_eq!(i.is_ok(), kind == Ok(MessageType::Initiation));
            assert_eq!(r.is_ok(), kind == Ok(MessageType::Response));
            assert_eq!(c.is_ok(), kind == Ok(MessageType::CookieReply));
            assert_eq!(t.is_ok(), kind == Ok(MessageType::Transport));
            if let Err(e) = kind {
                assert!(!e.to_string().is_empty());
            }
        }
        // Every prefix of every valid message.
        for m in [msg(1, 148), msg(2, 92), msg(3, 64), msg(4, 40)] {
            for n in 0..m.len() {
                let _ = classify(&m[..n]);
                let _ = Initiation::parse(&m[..n]);
                let _ = Response::parse(&m[..n]);
                let _ = CookieReply::parse(&m[..n]);
                let _ = TransportHeader::parse(&m[..n]);
            }
        }
    }
}
