//! The HTTP proxy server: one request head per connection, then a tunnel (CONNECT) or the
//! request forwarded to the origin, and a relay of whatever follows.

use super::handshake::{close_after_reply, Failure, Handshake};
use super::relay::relay;
use crate::http::{self as proto, ProxyRequest, RequestHead};
use crate::network::{connect_host, Network, Stream};
use crate::{Credentials, Limits};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::Arc;

/// One HTTP proxy's settings, shared by its connections.
pub(crate) struct HttpProxy {
    pub(crate) tunnel: Arc<dyn Network>,
    pub(crate) auth: Option<Credentials>,
    pub(crate) limits: Limits,
}

/// An error response owed to the client.
struct Refusal {
    status: u16,
    detail: String,
}

impl Refusal {
    fn new(status: u16, detail: impl ToString) -> Refusal {
        Refusal {
            status,
            detail: detail.to_string(),
        }
    }
}

impl HttpProxy {
    /// Serves one client connection to its end.
    pub(crate) fn serve(&self, mut client: Box<dyn Stream>, peer: SocketAddr) {
        let result = {
            let mut hs =
                Handshake::new(&mut *client, self.limits.handshake_timeout, proto::MAX_HEAD);
            self.open(&mut hs, peer)
                .and_then(|target| Ok((target, hs.finish().map_err(|_| None)?)))
        };
        match result {
            Ok((target, early)) => relay(client, target, &early, &format!("http {peer}")),
            Err(refusal) => {
                if let Some(r) = refusal {
                    tracing::debug!(%peer, status = r.status, "http: {}", r.detail);
                    let _ = client.write_all(&proto::error_response(r.status, &r.detail));
                }
                close_after_reply(&mut *client);
            }
        }
    }

    /// Reads the head, checks it and connects to the target; a plain request's rewritten
    /// head is sent to it, a CONNECT is answered. On failure: the response owed to the
    /// client, if any.
    fn open(
        &self,
        hs: &mut Handshake<'_>,
        peer: SocketAddr,
    ) -> Result<Box<dyn Stream>, Option<Refusal>> {
        let head = read_head(hs)?;
        self.check_auth(&head)?;
        let request = ProxyRequest::from_head(&head).map_err(|e| Refusal::new(e.status(), e))?;
        tracing::debug!(%peer, method = %head.method, target = %head.target, "http request");
        match request {
            ProxyRequest::Connect { host, port } => {
                let target = self.connect(&host, port)?;
                hs.reply(proto::CONNECT_ESTABLISHED).map_err(|_| None)?;
                Ok(target)
            }
            ProxyRequest::Forward {
                host,
                port,
                path,
                host_header,
            } => {
                let mut target = self.connect(&host, port)?;
                target
                    .write_all(&proto::origin_request(&head, &path, &host_header))
                    .map_err(|e| Refusal::new(502, format!("sending the request: {e}")))?;
                Ok(target)
            }
        }
    }

    fn check_auth(&self, head: &RequestHead) -> Result<(), Refusal> {
        match &self.auth {
            Some(c) if !proto::is_authorized(head, &c.username, &c.password) => Err(Refusal::new(
                407,
                "this proxy needs a username and password",
            )),
            _ => Ok(()),
        }
    }

    /// Connects through the tunnel; a failure is 504 if it timed out, 502 otherwise.
    fn connect(&self, host: &str, port: u16) -> Result<Box<dyn Stream>, Refusal> {
        connect_host(&*self.tunnel, host, port, self.limits.connect_timeout).map_err(|e| {
            Refusal::new(
                proto::status_for(&e),
                format!("cannot connect to {}: {e}", authority(host, port)),
            )
        })
    }
}

/// The request head; a malformed one is 400 (431 if too long), a client that goes silent
/// 408, one that closes gets nothing.
fn read_head(hs: &mut Handshake<'_>) -> Result<RequestHead, Option<Refusal>> {
    match hs.read(proto::parse_head) {
        Ok(head) => Ok(head),
        Err(Failure::Invalid(e)) => Err(Some(Refusal::new(e.status(), e))),
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::TimedOut => {
            Err(Some(Refusal::new(408, e)))
        }
        Err(Failure::Io(e)) => {
            tracing::debug!("http: {e}");
            Err(None)
        }
    }
}

fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The response to a connection over the cap.
pub(crate) fn refuse(stream: &mut dyn Stream) {
    let _ = stream.write_all(&proto::error_response(503, "too many connections"));
}
