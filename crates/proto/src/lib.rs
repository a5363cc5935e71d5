//! The WireGuard protocol as a pure library: messages, the Noise IKpsk2 handshake, cookies,
//! transport keypairs, the replay window and the handshake rate limiter; and read-only views of
//! the inner IP packets the messages carry.
//!
//! No I/O and no clock reads: every function that needs the time takes a [`time::Instant`]
//! (monotonic) or a wall-clock timestamp from the caller. This makes the whole protocol
//! testable with a fake clock and fuzzable without sockets.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod aead;
pub mod consts;
pub mod cookie;
pub mod crypto;
pub mod ip;
pub mod keys;
pub mod messages;
pub mod noise;
pub mod ratelimiter;
pub mod replay;
pub mod tai64n;
pub mod time;
pub mod transport;
