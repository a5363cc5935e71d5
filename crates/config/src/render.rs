//! Writing a [`Config`] back in wg-quick format (SaveConfig).
//!
//! The layout is what wg-quick's `save_config` produces: the wg-quick-only keys first, then
//! what `wg showconf` prints (ListenPort, FwMark, PrivateKey, then the peers), then the proxy
//! and forwarding sections: `[Socks5]`, `[http]`, the client tunnels and the server tunnels,
//! each list in its order.

use std::fmt::Write as _;

use crate::{Config, ProxySettings};

/// One `[Socks5]` or `[http]` section.
fn proxy(out: &mut String, header: &str, p: &ProxySettings) {
    let _ = writeln!(out, "\n{header}\nBindAddress = {}", p.bind);
    if let Some((user, pass)) = &p.auth {
        let _ = writeln!(out, "Username = {user}\nPassword = {pass}");
    }
}

impl Config {
    /// The file text; [`crate::parse`] reads it back to an equal `Config` (for any `Config` it
    /// returned; one built by hand must keep to what it accepts, e.g. no `#` in a password).
    pub fn render(&self) -> String {
        let i = &self.interface;
        let mut out = String::from("[Interface]\n");
        // Writing to a String cannot fail; the results are ignored for that reason.
        for a in &i.addresses {
            let _ = writeln!(out, "Address = {a}");
        }
        let dns: Vec<String> = i
            .dns
            .iter()
            .map(ToString::to_string)
            .chain(i.dns_search.iter().cloned())
            .collect();
        if !dns.is_empty() {
            let _ = writeln!(out, "DNS = {}", dns.join(", "));
        }
        if let Some(mtu) = i.mtu {
            let _ = writeln!(out, "MTU = {mtu}");
        }
        if i.table != crate::Table::Auto {
            let _ = writeln!(out, "Table = {}", i.table);
        }
        if i.save_config {
            out.push_str("SaveConfig = true\n");
        }
        for (key, hooks) in [
            ("PreUp", &i.pre_up),
            ("PostUp", &i.post_up),
            ("PreDown", &i.pre_down),
            ("PostDown", &i.post_down),
        ] {
            for h in hooks {
                let _ = writeln!(out, "{key} = {h}");
            }
        }
        if let Some(port) = i.listen_port {
            let _ = writeln!(out, "ListenPort = {port}");
        }
        match i.fwmark {
            Some(0) => out.push_str("FwMark = off\n"),
            Some(m) => {
                let _ = writeln!(out, "FwMark = 0x{m:x}");
            }
            None => {}
        }
        let _ = writeln!(out, "PrivateKey = {}", i.private_key.to_base64());
        for p in &self.peers {
            let _ = writeln!(out, "\n[Peer]\nPublicKey = {}", p.public_key.to_base64());
            if let Some(psk) = &p.preshared_key {
                let _ = writeln!(out, "PresharedKey = {}", psk.to_base64());
            }
            if !p.allowed_ips.is_empty() {
                let ips: Vec<String> = p.allowed_ips.iter().map(ToString::to_string).collect();
                let _ = writeln!(out, "AllowedIPs = {}", ips.join(", "));
            }
            if let Some(ep) = &p.endpoint {
                let _ = writeln!(out, "Endpoint = {ep}");
            }
            if let Some(ka) = p.persistent_keepalive {
                let _ = writeln!(out, "PersistentKeepalive = {ka}");
            }
        }
        if let Some(p) = &self.socks5 {
            proxy(&mut out, "[Socks5]", p);
        }
        if let Some(p) = &self.http {
            proxy(&mut out, "[http]", p);
        }
        for f in &self.local_forwards {
            let proto = if f.udp { "UDP" } else { "TCP" };
            let _ = writeln!(
                out,
                "\n[{proto}ClientTunnel]\nBindAddress = {}\nTarget = {}",
                f.bind, f.target
            );
        }
        for f in &self.remote_forwards {
            let proto = if f.udp { "UDP" } else { "TCP" };
            let _ = writeln!(
                out,
                "\n[{proto}ServerTunnel]\nListenPort = {}\nTarget = {}",
                f.port, f.target
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        parse, Config, Interface, LocalForward, Peer, PresharedKey, PrivateKey, ProxySettings,
        PublicKey, RemoteForward, Table,
    };

    fn rich() -> Config {
        let mut i = Interface::new(PrivateKey::from_bytes([0x42; 32]));
        i.listen_port = Some(51820);
        i.fwmark = Some(0xca6c);
        i.addresses = vec![
            "100.64.0.1/24".parse().unwrap(),
            "fd00::1/64".parse().unwrap(),
        ];
        i.dns = vec!["100.64.0.53".parse().unwrap(), "fd00::53".parse().unwrap()];
        i.dns_search = vec!["corp.example".into()];
        i.mtu = Some(1380);
        i.table = Table::Name("vpn".into());
        i.pre_up = vec!["echo one # with a comment".into(), "echo two=2".into()];
        i.post_up = vec!["ip rule add from %i".into()];
        i.pre_down = vec!["true".into()];
        i.post_down = vec!["echo bye".into()];
        i.save_config = true;
        let mut a = Peer::new(PublicKey::from_bytes([1; 32]));
        a.preshared_key = Some(PresharedKey::from_bytes([2; 32]));
        a.allowed_ips = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
        a.endpoint = Some("[fd00::9%eth0]:51821".parse().unwrap());
        a.persistent_keepalive = Some(25);
        let mut b = Peer::new(PublicKey::from_bytes([3; 32]));
        b.endpoint = Some("vpn.example.org:1".parse().unwrap());
        Config {
            interface: i,
            peers: vec![a, b, Peer::new(PublicKey::from_bytes([4; 32]))],
            socks5: Some(ProxySettings {
                bind: "127.0.0.1:1080".parse().unwrap(),
                auth: Some(("alice".into(), "p=ss word!".into())),
            }),
            http: Some(ProxySettings {
                bind: "[::1]:3128".parse().unwrap(),
                auth: None,
            }),
            local_forwards: vec![
                LocalForward {
                    bind: "127.0.0.1:25565".parse().unwrap(),
                    target: "play.example.net:25565".parse().unwrap(),
                    udp: false,
                },
                LocalForward {
                    bind: "[fe80::1%3]:53".parse().unwrap(),
                    target: "[fd00::53]:53".parse().unwrap(),
                    udp: true,
                },
                LocalForward {
                    bind: "0.0.0.0:8080".parse().unwrap(),
                    target: "100.64.0.9:80".parse().unwrap(),
                    udp: false,
                },
            ],
            remote_forwards: vec![
                RemoteForward {
                    port: 8443,
                    target: "localhost:443".parse().unwrap(),
                    udp: false,
                },
                RemoteForward {
                    port: 53,
                    target: "127.0.0.1:5353".parse().unwrap(),
                    udp: true,
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let c = rich();
        let text = c.render();
        assert_eq!(parse(&text).unwrap(), c, "{text}");
        assert!(text.starts_with("[Interface]\nAddress = 100.64.0.1/24\n"));
        assert!(text.contains("FwMark = 0xca6c\n"));
        assert!(text.contains("DNS = 100.64.0.53, fd00::53, corp.example\n"));
        assert!(text.contains(
            "\n[Socks5]\nBindAddress = 127.0.0.1:1080\nUsername = alice\nPassword = p=ss word!\n"
        ));
        assert!(text.contains("\n[http]\nBindAddress = [::1]:3128\n\n"));
        assert!(text.contains(
            "\n[UDPClientTunnel]\nBindAddress = [fe80::1%3]:53\nTarget = [fd00::53]:53\n"
        ));
        assert!(text.ends_with("\n[UDPServerTunnel]\nListenPort = 53\nTarget = 127.0.0.1:5353\n"));
        // The device half is unaffected by the proxy sections.
        let wg_only = Config {
            socks5: None,
            http: None,
            local_forwards: vec![],
            remote_forwards: vec![],
            ..c.clone()
        };
        let dns = |h: &str, p| Ok(std::net::SocketAddr::from(([198, 18, 0, h.len() as u8], p)));
        assert_eq!(c.to_uapi(dns).unwrap(), wg_only.to_uapi(dns).unwrap());

        let mut off = rich();
        off.interface.fwmark = Some(0);
        off.interface.table = Table::Off;
        off.interface.save_config = false;
        assert_eq!(parse(&off.render()).unwrap(), off);

        let mut only_forwards = rich();
        only_forwards.socks5 = None;
        only_forwards.http = None;
        only_forwards.peers.clear();
        assert_eq!(parse(&only_forwards.render()).unwrap(), only_forwards);

        let minimal = Config::new(Interface::new(PrivateKey::from_bytes([5; 32])));
        assert_eq!(
            minimal.render(),
            format!(
                "[Interface]\nPrivateKey = {}\n",
                PrivateKey::from_bytes([5; 32]).to_base64()
            )
        );
        assert_eq!(parse(&minimal.render()).unwrap(), minimal);
    }

    #[test]
    fn saved_running_config_round_trips() {
        let c = rich();
        let dump = format!(
            "private_key={}\nlisten_port=40001\npublic_key={}\npreshared_key={}\nendpoint=198.18.0.2:9\nallowed_ip=10.0.0.0/8\n",
            c.interface.private_key.to_hex(),
            "01".repeat(32),
            "00".repeat(32)
        );
        let state = dump.parse().unwrap();
        let running = Config::from_state(&state, &c.interface);
        let back = parse(&running.render()).unwrap();
        assert_eq!(back, running);
        assert_eq!(back.interface.listen_port, Some(40001));
        assert_eq!(back.interface.fwmark, None);
        assert_eq!(back.interface.post_up, c.interface.post_up);
        assert_eq!((back.socks5, back.local_forwards.len()), (None, 0));

        // Keeping the file's proxy and forwarding sections.
        let kept = c.with_device_state(&state);
        assert_eq!(
            kept,
            Config {
                socks5: c.socks5.clone(),
                http: c.http.clone(),
                local_forwards: c.local_forwards.clone(),
                remote_forwards: c.remote_forwards.clone(),
                ..running
            }
        );
        assert_eq!(parse(&kept.render()).unwrap(), kept);
    }
}
