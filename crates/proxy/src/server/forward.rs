//! Port forwards: which side listens and which dials, and the TCP forward's connections.

use super::relay::relay;
use super::{spawn_tcp, udp_forward, Server, TcpService};
use crate::forward::{split_target, Forward};
use crate::network::{connect_host, Network, Stream};
use crate::Limits;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

/// Starts a forward: `-L` listens on `host` and dials through `tunnel`, `-R` the reverse.
pub(crate) fn serve(
    fwd: &Forward,
    tunnel: Arc<dyn Network>,
    host: Arc<dyn Network>,
    limits: Limits,
) -> io::Result<Server> {
    let (listen_net, dial_net, bind) = match fwd {
        Forward::Local { bind, .. } => (host, tunnel, *bind),
        // Unspecified: every address of the tunnel's stack, of both families.
        Forward::Remote { port, .. } => (
            tunnel,
            host,
            SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), *port),
        ),
    };
    let target = fwd.target();
    if split_target(target).is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{target:?} is not host:port"),
        ));
    }
    if fwd.is_udp() {
        return udp_forward::spawn(listen_net.bind_udp(bind)?, dial_net, target, limits);
    }
    let listener = listen_net.listen(bind)?;
    let target = target.to_string();
    let max_connections = limits.max_connections;
    let handle = move |client: Box<dyn Stream>, peer: SocketAddr| {
        forward_connection(client, peer, &*dial_net, &target, &limits);
    };
    spawn_tcp(
        listener,
        TcpService {
            name: "forward",
            max_connections,
            refuse: |_| {},
            handle: Arc::new(handle),
        },
    )
}

/// Connects to the target (each of its addresses in turn) and relays; a client whose target
/// cannot be reached is closed.
fn forward_connection(
    client: Box<dyn Stream>,
    peer: SocketAddr,
    dial: &dyn Network,
    target: &str,
    limits: &Limits,
) {
    let Some((host, port)) = split_target(target) else {
        return;
    };
    match connect_host(dial, host, port, limits.connect_timeout) {
        Ok(stream) => relay(client, stream, &[], &format!("forward {peer} -> {target}")),
        Err(e) => tracing::info!(%peer, "forward: cannot connect to {target}: {e}"),
    }
}
