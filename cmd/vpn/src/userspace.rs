//! `vpn proxy` and `vpn forward`: a tunnel from a wg-quick file with no TUN and no privileges.
//!
//! The device's TUN is the userspace stack (`vpn-netstack`) with the file's `Address`, `DNS`
//! and `MTU`; its peers are the file's `[Peer]` sections. In front of it run a SOCKS5 and an
//! HTTP proxy, or ssh-style port forwards (`vpn-proxy`), until SIGINT or SIGTERM. Settings on
//! the command line come first; the file's `[Socks5]`, `[http]`, `[TCPClientTunnel]`,
//! `[UDPClientTunnel]`, `[TCPServerTunnel]` and `[UDPServerTunnel]` sections (which wg-quick
//! never reads) add to them. The file only has to be readable by the user who runs it.

use crate::quick::{read_config, resolve_endpoint};
use crate::Error;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use vpn_config::Config;
use vpn_conn::StdNetBind;
use vpn_device::{Device, Logger};
use vpn_proxy::{Credentials, Forward, HostNetwork, Limits, Network, Server};

/// Arguments of `vpn proxy`.
#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// A wg-quick config file (its Address, DNS, MTU and [Peer] sections are used).
    pub config: PathBuf,
    /// Serve SOCKS5 (CONNECT and UDP ASSOCIATE) on this local address (e.g. 127.0.0.1:1080).
    #[arg(long, value_name = "ADDR:PORT")]
    pub socks5: Option<SocketAddr>,
    /// Serve an HTTP proxy (CONNECT and plain requests) on this local address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<SocketAddr>,
    /// Require this user name (SOCKS5 username/password, HTTP Basic); needs --password.
    #[arg(long, requires = "password")]
    pub username: Option<String>,
    /// The password for --username.
    #[arg(long, requires = "username")]
    pub password: Option<String>,
    /// The most client connections at once.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
}

/// Arguments of `vpn forward`.
#[derive(clap::Args, Debug)]
pub struct ForwardArgs {
    /// A wg-quick config file (its Address, DNS, MTU and [Peer] sections are used).
    pub config: PathBuf,
    /// Forward a local port to an address behind the tunnel: [ADDR:]PORT:HOST:PORT[/udp]
    /// (ADDR defaults to 127.0.0.1; HOST may be a name, resolved by the tunnel's DNS).
    #[arg(short = 'L', value_name = "[ADDR:]PORT:HOST:PORT[/udp]", value_parser = Forward::parse_local)]
    pub local: Vec<Forward>,
    /// Forward a port on the tunnel address to a local service: PORT:HOST:PORT[/udp].
    #[arg(short = 'R', value_name = "PORT:HOST:PORT[/udp]", value_parser = Forward::parse_remote)]
    pub remote: Vec<Forward>,
    /// The most connections (or UDP flows) per forward at once.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
}

/// `vpn proxy CONFIG ...`.
pub fn proxy(args: &ProxyArgs) -> Result<(), Error> {
    let config = read_config(&args.config)?;
    let auth = credentials(&args.username.clone().zip(args.password.clone()));
    let socks5 = args.socks5.map(|a| (a, auth.clone())).or_else(|| {
        config
            .socks5
            .as_ref()
            .map(|s| (s.bind, credentials(&s.auth)))
    });
    let http = args
        .http
        .map(|a| (a, auth.clone()))
        .or_else(|| config.http.as_ref().map(|s| (s.bind, credentials(&s.auth))));
    if socks5.is_none() && http.is_none() {
        return Err(
            "nothing to serve: give --socks5 or --http (or a [Socks5] or [http] section)".into(),
        );
    }
    let limits = Limits {
        max_connections: args.max_connections,
        ..Limits::default()
    };
    let signals = block_signals()?;
    let tunnel = Tunnel::start(&config)?;
    let mut servers = Vec::new();
    if let Some((addr, auth)) = socks5 {
        let s = vpn_proxy::serve_socks5(&HostNetwork, addr, tunnel.net(), auth, limits.clone())
            .map_err(|e| format!("SOCKS5 on {addr}: {e}"))?;
        println!("socks5 {}", s.local_addr());
        servers.push(s);
    }
    if let Some((addr, auth)) = http {
        let s = vpn_proxy::serve_http(&HostNetwork, addr, tunnel.net(), auth, limits.clone())
            .map_err(|e| format!("HTTP proxy on {addr}: {e}"))?;
        println!("http {}", s.local_addr());
        servers.push(s);
    }
    tunnel.run_until_signal(servers, &signals)
}

/// `vpn forward CONFIG -L ... -R ...`.
pub fn forward(args: &ForwardArgs) -> Result<(), Error> {
    let config = read_config(&args.config)?;
    let mut forwards: Vec<Forward> = args.local.iter().chain(&args.remote).cloned().collect();
    forwards.extend(config.local_forwards.iter().map(|f| Forward::Local {
        bind: f.bind,
        target: f.target.to_string(),
        udp: f.udp,
    }));
    forwards.extend(config.remote_forwards.iter().map(|f| Forward::Remote {
        port: f.port,
        target: f.target.to_string(),
        udp: f.udp,
    }));
    if forwards.is_empty() {
        return Err("nothing to forward: give -L or -R (or [TCPClientTunnel] and the like)".into());
    }
    let limits = Limits {
        max_connections: args.max_connections,
        ..Limits::default()
    };
    let signals = block_signals()?;
    let tunnel = Tunnel::start(&config)?;
    let host: Arc<dyn Network> = Arc::new(HostNetwork);
    let mut servers = Vec::new();
    for f in &forwards {
        let s = vpn_proxy::serve_forward(f, tunnel.net(), host.clone(), limits.clone())
            .map_err(|e| format!("{f}: {e}"))?;
        println!("forward {f} ({})", s.local_addr());
        servers.push(s);
    }
    tunnel.run_until_signal(servers, &signals)
}

fn credentials(auth: &Option<(String, String)>) -> Option<Credentials> {
    auth.as_ref().map(|(u, p)| Credentials {
        username: u.clone(),
        password: p.clone(),
    })
}

/// The daemon's data-path options (Linux: SCHED_BATCH under bulk load, datagram yields).
#[cfg(target_os = "linux")]
fn data_path_options() -> vpn_device::Options {
    crate::daemon::data_path_options()
}

#[cfg(not(target_os = "linux"))]
fn data_path_options() -> vpn_device::Options {
    vpn_device::Options::default()
}

/// SIGINT and SIGTERM, blocked in every thread (before any starts) and taken by `run`.
const SIGNALS: [i32; 2] = [libc::SIGINT, libc::SIGTERM];

fn block_signals() -> Result<[i32; 2], Error> {
    vpn_sys::daemon::block_signals(&SIGNALS).map_err(|e| format!("blocking signals: {e}"))?;
    Ok(SIGNALS)
}

/// The device on the stack, configured from the file and up.
struct Tunnel {
    dev: Device,
    net: vpn_netstack::Net,
}

impl Tunnel {
    fn start(config: &Config) -> Result<Tunnel, Error> {
        let iface = &config.interface;
        let addresses: Vec<_> = iface.addresses.iter().map(|a| a.addr()).collect();
        if addresses.is_empty() {
            return Err("the config has no Address: the stack needs one".into());
        }
        let mtu = iface.mtu.unwrap_or(1420) as usize;
        let opts = vpn_netstack::Options::new();
        let (tun, net) = vpn_netstack::create_net_tun_with(&addresses, &iface.dns, mtu, opts)
            .map_err(|e| format!("the network stack: {e}"))?;
        let dev = Device::with_options(
            Arc::new(tun),
            Arc::new(StdNetBind::new()),
            Logger::new("netstack"),
            data_path_options(),
        );
        let change = config
            .to_change(resolve_endpoint)
            .map_err(|e| format!("the config: {e}"))?;
        dev.configure(&change)
            .map_err(|e| format!("configuring the device: {e}"))?;
        dev.up()
            .map_err(|e| format!("bringing the device up: {e}"))?;
        tracing::info!(addresses = ?addresses, port = dev.listen_port(), "tunnel up (no TUN)");
        Ok(Tunnel { dev, net })
    }

    fn net(&self) -> Arc<dyn Network> {
        Arc::new(self.net.clone())
    }

    /// Serves until SIGINT or SIGTERM, then stops the servers and the device.
    fn run_until_signal(self, servers: Vec<Server>, signals: &[i32]) -> Result<(), Error> {
        let sig = vpn_sys::daemon::wait_signal(signals)
            .map_err(|e| format!("waiting for signals: {e}"))?;
        let st = self.net.stats();
        tracing::info!(
            packets_in = st.packets_in,
            packets_out = st.packets_out,
            writes = st.writes,
            reads = st.reads,
            "signal {sig}: shutting down"
        );
        for s in servers {
            s.stop();
        }
        self.dev.close();
        Ok(())
    }
}
