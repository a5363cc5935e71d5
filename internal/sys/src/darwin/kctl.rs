//! The kernel-control interface (`sys/kern_control.h`, `sys/sys_domain.h`): a utun is a socket
//! connected to the utun kernel control, on iOS as on macOS (the network extension's utun fd).
//! The `libc` crate has these for macOS only; on the other Apple targets they are defined here
//! with the values and layouts of those headers, which are the same kernel's.

#[cfg(target_os = "macos")]
pub use libc::{
    ctl_info, sockaddr_ctl, AF_SYS_CONTROL, CTLIOCGINFO, MAX_KCTL_NAME, SYSPROTO_CONTROL,
};

#[cfg(not(target_os = "macos"))]
pub use other::*;

#[cfg(not(target_os = "macos"))]
#[allow(non_camel_case_types)]
mod other {
    use libc::{c_char, c_int, c_uchar, c_ulong};

    /// `SYSPROTO_CONTROL` (sys/sys_domain.h): 2.
    pub const SYSPROTO_CONTROL: c_int = 2;
    /// `AF_SYS_CONTROL` (sys/sys_domain.h): 2.
    pub const AF_SYS_CONTROL: c_int = 2;
    /// `MAX_KCTL_NAME` (sys/kern_control.h): 96.
    pub const MAX_KCTL_NAME: usize = 96;
    /// `CTLIOCGINFO`, `_IOWR('N', 3, struct ctl_info)` (sys/kern_control.h): 0xc0644e03.
    pub const CTLIOCGINFO: c_ulong = 0xc064_4e03;

    /// `struct ctl_info` (sys/kern_control.h).
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct ctl_info {
        /// `ctl_id`: the control's id, filled in by `CTLIOCGINFO`.
        pub ctl_id: u32,
        /// `ctl_name`: the control's name, NUL-terminated.
        pub ctl_name: [c_char; MAX_KCTL_NAME],
    }

    /// `struct sockaddr_ctl` (sys/kern_control.h).
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct sockaddr_ctl {
        /// `sc_len`: `sizeof(struct sockaddr_ctl)`.
        pub sc_len: c_uchar,
        /// `sc_family`: `AF_SYSTEM`.
        pub sc_family: c_uchar,
        /// `ss_sysaddr`: `AF_SYS_CONTROL`.
        pub ss_sysaddr: u16,
        /// `sc_id`: the control's id.
        pub sc_id: u32,
        /// `sc_unit`: the unit (utun N is unit N + 1; 0 lets the kernel pick).
        pub sc_unit: u32,
        /// `sc_reserved`.
        pub sc_reserved: [u32; 5],
    }

    const _: () = assert!(core::mem::size_of::<ctl_info>() == 100);
    const _: () = assert!(core::mem::size_of::<sockaddr_ctl>() == 32);
    // The request encodes the argument's size: _IOWR = 0xc0000000 | size << 16 | 'N' << 8 | 3.
    const _: () = assert!(
        CTLIOCGINFO == 0xc000_0000 | (core::mem::size_of::<ctl_info>() as c_ulong) << 16 | 0x4e03
    );
}
