//! The stub resolver behind [`Net::lookup_host`](crate::Net::lookup_host): A and AAAA queries
//! to the stack's DNS servers through the tunnel, over UDP, again over TCP when the answer was
//! truncated.
//!
//! The message format is RFC 1035's. Only what a stub needs is read: the header, the question
//! (skipped) and the A and AAAA records of the answer section, whatever names they carry (a
//! CNAME chain's records come in the same answer). Names are skipped, never followed, so a
//! compression pointer cannot make the parser loop.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Record type A (an IPv4 address).
pub const TYPE_A: u16 = 1;
/// Record type AAAA (an IPv6 address).
pub const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
const HEADER: usize = 12;

/// Why a name could not be queried or an answer not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsError {
    /// The name is not a valid DNS name (empty label, label over 63 bytes, over 253 bytes).
    BadName,
    /// The message ended early or a field points outside it.
    Truncated,
    /// The message is not a response to our query.
    NotOurs,
    /// The server answered with this error code (3: the name does not exist).
    Rcode(u8),
}

impl fmt::Display for DnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DnsError::BadName => f.write_str("not a valid DNS name"),
            DnsError::Truncated => f.write_str("malformed DNS message"),
            DnsError::NotOurs => f.write_str("DNS response to another query"),
            DnsError::Rcode(3) => f.write_str("no such host"),
            DnsError::Rcode(c) => write!(f, "DNS server error (rcode {c})"),
        }
    }
}

impl std::error::Error for DnsError {}

/// A response's addresses and whether the server cut it short (retry over TCP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The A or AAAA records of the answer section, in order.
    pub addrs: Vec<IpAddr>,
    /// The TC bit: the answer did not fit a UDP datagram.
    pub truncated: bool,
}

/// A query for `name`'s records of `qtype`, with recursion desired.
pub fn query(id: u16, name: &str, qtype: u16) -> Result<Vec<u8>, DnsError> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > 253 {
        return Err(DnsError::BadName);
    }
    let mut msg = Vec::with_capacity(HEADER + name.len() + 6);
    msg.extend_from_slice(&id.to_be_bytes());
    msg.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(DnsError::BadName);
        }
        msg.push(label.len() as u8);
        msg.extend_from_slice(label.as_bytes());
    }
    msg.push(0);
    msg.extend_from_slice(&qtype.to_be_bytes());
    msg.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(msg)
}

/// Reads a response to the query `id` for records of `qtype`.
pub fn parse_response(msg: &[u8], id: u16, qtype: u16) -> Result<Answer, DnsError> {
    let mut r = Reader { msg, at: 0 };
    let got_id = r.u16()?;
    let flags = r.u16()?;
    let (qd, an) = (r.u16()?, r.u16()?);
    r.skip(4)?;
    if got_id != id || flags & 0x8000 == 0 {
        return Err(DnsError::NotOurs);
    }
    let truncated = flags & 0x0200 != 0;
    let rcode = (flags & 0x000f) as u8;
    if rcode != 0 {
        return Err(DnsError::Rcode(rcode));
    }
    let mut addrs = Vec::new();
    let answers = (|| {
        for _ in 0..qd {
            r.skip_name()?;
            r.skip(4)?;
        }
        for _ in 0..an {
            r.skip_name()?;
            let (rtype, class) = (r.u16()?, r.u16()?);
            r.skip(4)?;
            let len = r.u16()? as usize;
            let data = r.take(len)?;
            if class != CLASS_IN || rtype != qtype {
                continue;
            }
            match (rtype, data.len()) {
                (TYPE_A, 4) => addrs.push(IpAddr::V4(Ipv4Addr::from(
                    <[u8; 4]>::try_from(data).unwrap(),
                ))),
                (TYPE_AAAA, 16) => addrs.push(IpAddr::V6(Ipv6Addr::from(
                    <[u8; 16]>::try_from(data).unwrap(),
                ))),
                _ => return Err(DnsError::Truncated),
            }
        }
        Ok(())
    })();
    match answers {
        Ok(()) => Ok(Answer { addrs, truncated }),
        // A cut-short UDP answer may end anywhere: what it held is kept, TCP brings the rest.
        Err(_) if truncated => Ok(Answer { addrs, truncated }),
        Err(e) => Err(e),
    }
}

/// A cursor over a message; every read is bounds-checked.
struct Reader<'a> {
    msg: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DnsError> {
        let end = self.at.checked_add(n).ok_or(DnsError::Truncated)?;
        let s = self.msg.get(self.at..end).ok_or(DnsError::Truncated)?;
        self.at = end;
        Ok(s)
    }

    fn skip(&mut self, n: usize) -> Result<(), DnsError> {
        self.take(n).map(|_| ())
    }

    fn u16(&mut self) -> Result<u16, DnsError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Skips a name: labels up to the root label, or up to a compression pointer (which ends
    /// the name where it stands).
    fn skip_name(&mut self) -> Result<(), DnsError> {
        loop {
            let len = self.take(1)?[0];
            match len {
                0 => return Ok(()),
                l if l & 0xc0 == 0xc0 => return self.skip(1),
                l if l & 0xc0 != 0 => return Err(DnsError::Truncated),
                l => self.skip(l as usize)?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response to `q` with the answers `(type, rdata)`, names as pointers to the question.
    fn respond(q: &[u8], flags: u16, answers: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = q.to_vec();
        m[2..4].copy_from_slice(&flags.to_be_bytes());
        m[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
        for (t, data) in answers {
            m.extend_from_slice(&[0xc0, 12]);
            m.extend_from_slice(&t.to_be_bytes());
            m.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
            m.extend_from_slice(&(data.len() as u16).to_be_bytes());
            m.extend_from_slice(data);
        }
        m
    }

    #[test]
    fn a_query_is_laid_out_as_rfc_1035_says() {
        let q = query(0x1234, "peer.test.", TYPE_A).unwrap();
        assert_eq!(&q[..4], &[0x12, 0x34, 0x01, 0x00]);
        assert_eq!(&q[12..], b"\x04peer\x04test\x00\x00\x01\x00\x01");
        assert_eq!(query(1, "a..b", TYPE_A), Err(DnsError::BadName));
        assert_eq!(query(1, "", TYPE_A), Err(DnsError::BadName));
        assert_eq!(query(1, &"x".repeat(64), TYPE_A), Err(DnsError::BadName));
    }

    #[test]
    fn addresses_of_the_asked_type_are_read_through_a_cname() {
        let q = query(7, "peer.test", TYPE_A).unwrap();
        let cname: &[u8] = &[0xc0, 12];
        let r = respond(
            &q,
            0x8180,
            &[
                (5, cname),
                (TYPE_A, &[100, 64, 0, 2]),
                (TYPE_AAAA, &[0; 16]),
            ],
        );
        let a = parse_response(&r, 7, TYPE_A).unwrap();
        assert_eq!(a.addrs, vec![IpAddr::from([100, 64, 0, 2])]);
        assert!(!a.truncated);
        let r6 = respond(
            &q,
            0x8180,
            &[(
                TYPE_AAAA,
                &[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            )],
        );
        assert_eq!(
            parse_response(&r6, 7, TYPE_AAAA).unwrap().addrs,
            vec!["fd00::2".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn errors_and_foreign_or_broken_messages_are_told_apart() {
        let q = query(7, "peer.test", TYPE_A).unwrap();
        assert_eq!(
            parse_response(&respond(&q, 0x8183, &[]), 7, TYPE_A),
            Err(DnsError::Rcode(3))
        );
        assert_eq!(
            parse_response(&respond(&q, 0x8180, &[]), 8, TYPE_A),
            Err(DnsError::NotOurs)
        );
        assert_eq!(
            parse_response(&q, 7, TYPE_A),
            Err(DnsError::NotOurs),
            "a query is no answer"
        );
        let r = respond(&q, 0x8180, &[(TYPE_A, &[1, 2, 3, 4])]);
        for cut in 0..r.len() {
            assert!(
                parse_response(&r[..cut], 7, TYPE_A).is_err(),
                "cut at {cut}"
            );
        }
        let bad = respond(&q, 0x8180, &[(TYPE_A, &[1, 2, 3])]);
        assert_eq!(parse_response(&bad, 7, TYPE_A), Err(DnsError::Truncated));
    }

    #[test]
    fn a_truncated_answer_keeps_what_it_holds_and_says_so() {
        let q = query(7, "peer.test", TYPE_A).unwrap();
        let r = respond(
            &q,
            0x8380,
            &[(TYPE_A, &[1, 2, 3, 4]), (TYPE_A, &[5, 6, 7, 8])],
        );
        let a = parse_response(&r[..r.len() - 3], 7, TYPE_A).unwrap();
        assert!(a.truncated);
        assert_eq!(a.addrs, vec![IpAddr::from([1, 2, 3, 4])]);
    }
}
