//! The darwin utun device (`tun/tun_darwin.go` plus wireguard-go's batched variant).
//!
//! The rules live in portable code, generic over `vpn_darwinbatch::Kernel`, and are unit-tested
//! on every host against the simulated darwin kernel: framing ([`frame`]: the 4-byte
//! address-family header, names, page size), the data path (`io`: slots, staging, batching,
//! fallbacks) and interface events ([`route`]: `RTM_IFINFO` parsing, up/down and MTU changes).
//! Only [`DarwinTun`] (macOS) talks to the operating system, through `vpn_sys::darwin` and
//! `vpn_darwinbatch::system()`.

#![forbid(unsafe_code)]

#[cfg(any(target_vendor = "apple", test))]
pub(crate) mod frame;
#[cfg(any(target_vendor = "apple", test))]
mod io;
pub mod route;

#[cfg(target_vendor = "apple")]
mod device;
#[cfg(test)]
mod tests;

#[cfg(target_vendor = "apple")]
pub use device::DarwinTun;
