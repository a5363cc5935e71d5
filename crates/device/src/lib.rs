//! The WireGuard device.

#![forbid(unsafe_code)]

pub mod allowedips;
