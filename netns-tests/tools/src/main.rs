//! `vpn-hostile`: the hostile-input tools of the network-namespace suite (`netns-tests/run.sh`).
//!
//! - `spray <addr:port> <seconds>`: random, truncated, oversized and header-shaped datagrams at a
//!   listen port, paced so the tunnel under test keeps a share of the CPU.
//! - `relay <listen addr:port> <target addr:port> <seconds>`: a UDP relay between two peers that
//!   sends every datagram twice and re-sends old ones, so the receiver sees genuine replays.
//! - `uapi <socket path> <seconds> <hold>`: malformed requests on a UAPI socket, with `hold`
//!   idle connections kept open meanwhile (a daemon that serves one client at a time hangs `wg`).
//!
//! - `count <addr:port> <seconds>`: counts the datagrams that arrive at a port (a peer that
//!   must never send anything, such as one with a low-order public key, is aimed at it).
//!
//! Each prints one summary line of counts and exits 0 when its time is up; it exits 2 on a usage
//! error. Only std: the suite builds it on a fresh CI machine without extra packages.

#![forbid(unsafe_code)]

mod count;
mod relay;
mod rng;
mod spray;
mod uapi;

use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: vpn-hostile spray <addr:port> <seconds>\n\
                     \x20      vpn-hostile relay <listen addr:port> <target addr:port> <seconds>\n\
                     \x20      vpn-hostile count <addr:port> <seconds>\n\
                     \x20      vpn-hostile uapi <socket path> <seconds> <idle connections to hold>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let res = match argv.as_slice() {
        ["spray", addr, secs] => seconds(secs).and_then(|d| spray::run(addr, d)),
        ["count", addr, secs] => seconds(secs).and_then(|d| count::run(addr, d)),
        ["relay", listen, target, secs] => {
            seconds(secs).and_then(|d| relay::run(listen, target, d))
        }
        ["uapi", path, secs, hold] => seconds(secs).and_then(|d| {
            let hold = hold
                .parse::<usize>()
                .map_err(|_| format!("bad connection count {hold:?}"))?;
            uapi::run(path, d, hold)
        }),
        _ => Err(USAGE.to_owned()),
    };
    match res {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vpn-hostile: {e}");
            ExitCode::from(2)
        }
    }
}

/// A duration in (possibly fractional) seconds, bounded so a typo cannot run for hours.
fn seconds(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 600.0 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("bad duration {s:?} (0 < seconds <= 600)")),
    }
}
