//! An HTTP GET through a WireGuard peer with no TUN and no privileges: the device's TUN is the
//! userspace stack, configured from a wg-quick file (`Address`, `DNS`, `MTU`, `[Peer]`).
//!
//! ```text
//! netstack_http <wg-quick.conf> <host[:port]> [path]
//! ```
//!
//! Resolves the host through the tunnel's DNS server (or takes an IP), sends
//! `GET <path> HTTP/1.0` and prints the response to stdout. Run as any user.

use std::io::{Read, Write};
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;
use vpn_wireguard::{conn, device, netstack};

fn main() {
    if let Err(e) = run(std::env::args().skip(1).collect()) {
        eprintln!("netstack_http: {e}");
        std::process::exit(1);
    }
}

fn run(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let [config, target, rest @ ..] = args.as_slice() else {
        return Err("usage: netstack_http <wg-quick.conf> <host[:port]> [path]".into());
    };
    let path = rest.first().map(String::as_str).unwrap_or("/");
    let file = vpn_config::parse(&std::fs::read_to_string(config)?)?;
    let addresses: Vec<_> = file.interface.addresses.iter().map(|a| a.addr()).collect();
    let mtu = file.interface.mtu.unwrap_or(1420) as usize;
    let (tun, net) = netstack::create_net_tun(&addresses, &file.interface.dns, mtu)?;
    let dev = device::Device::new(
        Arc::new(tun),
        conn::new_default_bind(),
        device::Logger::new("netstack"),
    );
    // Peer endpoints are resolved on the host; names behind the tunnel through the tunnel.
    dev.configure(&file.to_change(|host, port| {
        (host, port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))
    })?)?;
    dev.up()?;

    let address = if netstack::split_host_port(target).is_ok() {
        target.clone()
    } else {
        format!("{target}:80")
    };
    let (host, _) = netstack::split_host_port(&address)?;
    let netstack::Conn::Tcp(mut conn) = net.dial("tcp", &address)? else {
        unreachable!("dialed tcp");
    };
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut response = Vec::new();
    conn.read_to_end(&mut response)?;
    std::io::stdout().write_all(&response)?;
    dev.close();
    Ok(())
}
