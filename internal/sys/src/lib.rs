//! The unsafe shims behind the data plane's UDP sockets (Linux).
//!
//! `vpn-conn` forbids `unsafe`; everything that has to hand raw pointers to the kernel lives
//! here instead, behind small safe functions: batched `recvmmsg`/`sendmmsg`
//! ([`mmsg`]), building and parsing control messages ([`cmsg`]), integer socket options
//! ([`sockopt`]), the daemon's process plumbing ([`daemon`]), the data-path threads'
//! scheduling policy ([`sched`]), the TUN device's calls ([`tun`]), waiting for a descriptor or a close ([`poll`]), and the daemon's sandbox: giving up root ([`privileges`]), the seccomp filter's SIGSYS report ([`seccomp`]) and the UAPI socket's cleaner ([`cleaner`]). Every `unsafe` block
//! carries a `// SAFETY:` comment, and every module has tests of its own against the real
//! kernel interface it wraps.
//!
//! On Apple targets, [`darwin`] holds the macOS data plane's calls (utun, routing socket,
//! interface ioctls, the clock that counts sleep, the UAPI socket's directory watch), and
//! [`daemon`] the process plumbing the daemon shares with Linux. Apart from [`poll`], the crate
//! is empty on other targets.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(any(target_os = "linux", target_os = "android"))]
mod abi;
#[cfg(target_os = "linux")]
pub mod cleaner;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod cmsg;
#[cfg(unix)]
pub mod daemon;
#[cfg(target_vendor = "apple")]
pub mod darwin;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod mmsg;
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
pub mod poll;
#[cfg(all(
    feature = "posix-kernel",
    any(target_os = "linux", target_os = "android")
))]
pub mod posix_kernel;
#[cfg(target_os = "linux")]
pub mod privileges;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod route_events;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod sched;
#[cfg(target_os = "linux")]
pub mod seccomp;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod sockaddr;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod sockopt;
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod syscall_names;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod tun;
