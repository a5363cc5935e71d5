//! Turns fuzzer bytes into UAPI `key=value` text, so a short run already reaches every key's
//! value parser: half the inputs are taken as raw text, the other half as a list of lines whose
//! keys and (mostly) values come from the protocol's vocabulary.

const KEYS: &[&str] = &[
    "private_key",
    "listen_port",
    "fwmark",
    "replace_peers",
    "public_key",
    "update_only",
    "remove",
    "preshared_key",
    "endpoint",
    "persistent_keepalive_interval",
    "replace_allowed_ips",
    "allowed_ip",
    "protocol_version",
    "last_handshake_time_sec",
    "last_handshake_time_nsec",
    "tx_bytes",
    "rx_bytes",
    "device.tun_reads",
    "bogus",
];

const VALUES: &[&str] = &[
    "true",
    "1",
    "0",
    "51820",
    "4294967295",
    "18446744073709551615",
    "999999999",
    "10.0.0.0/8",
    "-fd00::/8",
    "::/0",
    "198.18.0.1:51820",
    "[fd00::1]:1",
    "peer.example:7",
    "",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f",
    "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
];

/// The text the fuzz input stands for.
pub fn text(data: &[u8]) -> String {
    let Some((&mode, rest)) = data.split_first() else {
        return String::new();
    };
    if mode & 1 == 0 {
        return String::from_utf8_lossy(rest).into_owned();
    }
    let mut out = String::new();
    let mut bytes = rest.iter().copied();
    while let (Some(k), Some(v)) = (bytes.next(), bytes.next()) {
        match k % 64 {
            60 => out.push('\n'),
            61 => out.push_str("no equals sign\n"),
            _ => {
                out.push_str(KEYS[usize::from(k) % KEYS.len()]);
                out.push('=');
                if v < 128 {
                    out.push_str(VALUES[usize::from(v) % VALUES.len()]);
                } else {
                    let raw: Vec<u8> = bytes.by_ref().take(usize::from(v - 128) % 24).collect();
                    out.push_str(&String::from_utf8_lossy(&raw));
                }
                out.push_str(if k & 0x80 != 0 { "\r\n" } else { "\n" });
            }
        }
    }
    out
}
