//! The SOCKS5 server: the handshake of one connection, then a relay or a UDP association.

use super::handshake::{close_after_reply, Failure, Handshake};
use super::relay::relay;
use super::udp_associate;
use crate::network::{connect_host, Network, Stream};
use crate::socks5::{self as proto, Address, Command, Request};
use crate::{Credentials, Limits};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

/// The longest SOCKS5 message is a request with a 255-byte name (262 bytes); what a client
/// sends ahead of its replies is buffered up to this.
const HANDSHAKE_BUFFER: usize = 4096;

/// One SOCKS5 server's settings, shared by its connections.
pub(crate) struct Socks5 {
    /// Where CONNECT goes and names are resolved.
    pub(crate) tunnel: Arc<dyn Network>,
    /// Where UDP ASSOCIATE binds its client-facing socket: the listening network.
    pub(crate) listen: Arc<dyn Network>,
    pub(crate) auth: Option<Credentials>,
    pub(crate) limits: Limits,
}

/// What a completed handshake asks for.
enum Next {
    Connect(Box<dyn Stream>),
    Associate(Request),
}

impl Socks5 {
    /// Serves one client connection to its end.
    pub(crate) fn serve(&self, mut client: Box<dyn Stream>, peer: SocketAddr) {
        let result = {
            let mut hs = Handshake::new(
                &mut *client,
                self.limits.handshake_timeout,
                HANDSHAKE_BUFFER,
            );
            self.handshake(&mut hs, peer)
                .and_then(|next| Ok((next, hs.finish()?)))
        };
        match result {
            Ok((Next::Connect(target), early)) => {
                relay(client, target, &early, &format!("socks5 {peer}"));
            }
            Ok((Next::Associate(request), _)) => {
                udp_associate::run(client, &request, &*self.listen, &self.tunnel, &self.limits);
            }
            Err(e) => {
                tracing::debug!(%peer, "socks5: {e}");
                close_after_reply(&mut *client);
            }
        }
    }

    /// Greeting, authentication and request; every refusal is replied to before the error
    /// is returned.
    fn handshake(&self, hs: &mut Handshake<'_>, peer: SocketAddr) -> io::Result<Next> {
        self.authenticate(hs)?;
        let request = match hs.read(proto::parse_request) {
            Ok(r) => r,
            Err(Failure::Invalid(e)) => {
                hs.reply(&proto::failure_reply(e.reply_code()))?;
                return Err(invalid(e));
            }
            Err(Failure::Io(e)) => return Err(e),
        };
        tracing::debug!(%peer, command = ?request.command, destination = %request.destination, "socks5 request");
        match request.command {
            Command::Connect => {
                let target = self.connect(hs, &request.destination)?;
                Ok(Next::Connect(target))
            }
            Command::UdpAssociate => Ok(Next::Associate(request)),
            Command::Bind => {
                hs.reply(&proto::failure_reply(proto::REP_COMMAND_NOT_SUPPORTED))?;
                Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "BIND is not supported",
                ))
            }
        }
    }

    /// The method negotiation and, with credentials configured, RFC 1929.
    fn authenticate(&self, hs: &mut Handshake<'_>) -> io::Result<()> {
        let greeting = hs.read(proto::parse_greeting).map_err(failure)?;
        let method = greeting.choose_method(self.auth.is_some());
        hs.reply(&proto::method_reply(method))?;
        if method == proto::METHOD_NONE_ACCEPTABLE {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("no acceptable method among {:?}", greeting.methods),
            ));
        }
        let Some(creds) = &self.auth else {
            return Ok(());
        };
        let ok = match hs.read(proto::parse_user_pass) {
            Ok(up) => up.matches(&creds.username, &creds.password),
            Err(Failure::Invalid(_)) => false,
            Err(Failure::Io(e)) => return Err(e),
        };
        hs.reply(&proto::user_pass_reply(ok))?;
        if !ok {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "wrong username or password",
            ));
        }
        Ok(())
    }

    /// Connects through the tunnel and replies: success with the tunnel-side address, or the
    /// REP code of the failure.
    fn connect(&self, hs: &mut Handshake<'_>, to: &Address) -> io::Result<Box<dyn Stream>> {
        let timeout = self.limits.connect_timeout;
        let result = match to {
            Address::Ip(addr) => self.tunnel.connect(*addr, timeout),
            Address::Domain(host, port) => connect_host(&*self.tunnel, host, *port, timeout),
        };
        match result {
            Ok(target) => {
                let bound = target.local_addr()?;
                hs.reply(&proto::reply(proto::REP_SUCCEEDED, bound))?;
                Ok(target)
            }
            Err(e) => {
                hs.reply(&proto::failure_reply(proto::reply_code_for(&e)))?;
                Err(io::Error::new(e.kind(), format!("connect to {to}: {e}")))
            }
        }
    }
}

fn invalid(e: proto::Socks5Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

fn failure(f: Failure<proto::Socks5Error>) -> io::Error {
    match f {
        Failure::Invalid(e) => invalid(e),
        Failure::Io(e) => e,
    }
}

/// The reply to a connection over the cap: a general failure.
pub(crate) fn refuse(stream: &mut dyn Stream) {
    let _ = stream.write_all(&proto::failure_reply(proto::REP_GENERAL_FAILURE));
}
