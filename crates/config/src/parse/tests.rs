use super::*;
use crate::types::Table;
use crate::ProxySettings;

fn sk(n: u8) -> PrivateKey {
    PrivateKey::from_bytes([n; 32])
}
fn pk(n: u8) -> PublicKey {
    PublicKey::from_bytes([n; 32])
}
fn psk(n: u8) -> PresharedKey {
    PresharedKey::from_bytes([n; 32])
}

fn full_text() -> String {
    format!(
        "# a comment line\n\
         [Interface]\n\
         PrivateKey = {sk}\n\
         ListenPort = 51820\n\
         FwMark = 0x10\n\
         Address = 100.64.0.1/24, fd00::1/64\n\
         Address = 100.64.1.1\n\
         DNS = 100.64.0.53, fd00::53, corp.example, lan\n\
         MTU = 1380\n\
         Table = 1234\n\
         PreUp = echo pre-up %i # kept for the shell\n\
         PostUp = echo a=b\n\
         PostUp = echo second\n\
         PreDown = echo pre-down\n\
         PostDown = echo post-down\n\
         SaveConfig = true\n\
         \n\
         [Peer]\n\
         PublicKey = {pk}\n\
         PresharedKey = {psk}\n\
         AllowedIPs = 100.64.0.2/32, fd00::2/128\n\
         AllowedIPs = 10.0.0.0/8\n\
         Endpoint = 198.18.0.2:51821\n\
         PersistentKeepalive = 25\n\
         [Peer]\n\
         PublicKey = {pk2}\n\
         Endpoint = [fd00::9]:7\n\
         PersistentKeepalive = off\n",
        sk = sk(1).to_base64(),
        pk = pk(2).to_base64(),
        psk = psk(3).to_base64(),
        pk2 = pk(4).to_base64(),
    )
}

#[test]
fn every_key() {
    let c = parse(&full_text()).unwrap();
    let i = &c.interface;
    assert_eq!(i.private_key, sk(1));
    assert_eq!(i.listen_port, Some(51820));
    assert_eq!(i.fwmark, Some(16));
    let addrs: Vec<String> = i.addresses.iter().map(|a| a.to_string()).collect();
    assert_eq!(addrs, ["100.64.0.1/24", "fd00::1/64", "100.64.1.1/32"]);
    assert_eq!(
        i.dns,
        [
            "100.64.0.53".parse::<IpAddr>().unwrap(),
            "fd00::53".parse().unwrap()
        ]
    );
    assert_eq!(i.dns_search, ["corp.example", "lan"]);
    assert_eq!(i.mtu, Some(1380));
    assert_eq!(i.table, Table::Id(1234));
    assert_eq!(i.pre_up, ["echo pre-up %i # kept for the shell"]);
    assert_eq!(i.post_up, ["echo a=b", "echo second"]);
    assert_eq!(i.pre_down, ["echo pre-down"]);
    assert_eq!(i.post_down, ["echo post-down"]);
    assert!(i.save_config);
    assert_eq!(c.peers.len(), 2);
    let p = &c.peers[0];
    assert_eq!(p.public_key, pk(2));
    assert_eq!(p.preshared_key, Some(psk(3)));
    let ips: Vec<String> = p.allowed_ips.iter().map(|a| a.to_string()).collect();
    assert_eq!(ips, ["100.64.0.2/32", "fd00::2/128", "10.0.0.0/8"]);
    assert_eq!(p.endpoint.as_ref().unwrap().to_string(), "198.18.0.2:51821");
    assert_eq!(p.persistent_keepalive, Some(25));
    let q = &c.peers[1];
    assert_eq!(q.public_key, pk(4));
    assert_eq!(q.preshared_key, None);
    assert!(q.allowed_ips.is_empty());
    assert_eq!(q.endpoint.as_ref().unwrap().host(), "fd00::9");
    assert_eq!(q.persistent_keepalive, None);
}

#[test]
fn minimal_and_defaults() {
    let c = parse(&format!("[Interface]\nPrivateKey={}", sk(5).to_base64())).unwrap();
    assert_eq!(c.interface, Interface::new(sk(5)));
    assert!(c.peers.is_empty());
}

#[test]
fn case_whitespace_and_line_endings() {
    let text = format!(
        "  [interface]  \r\n\tprivatekey\t=\t{}  # trailing\r\nLISTENPORT=1\r\nsaveconfig = FALSE\r\n[ PEER ]\r\npublickey={}\r\nallowedips = 10.0.0.1/32 ,, 10.0.0.2/32 ,\r\npersistentkeepalive = 0\r\n",
        sk(1).to_base64(),
        pk(2).to_base64()
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.interface.listen_port, Some(1));
    assert!(!c.interface.save_config);
    assert_eq!(c.peers[0].allowed_ips.len(), 2);
    assert_eq!(c.peers[0].persistent_keepalive, None);
}

#[test]
fn fwmark_forms() {
    let f = |v: &str| fwmark(1, v);
    assert_eq!(f("off"), Ok(0));
    assert_eq!(f("OFF"), Ok(0));
    assert_eq!(f("0"), Ok(0));
    assert_eq!(f("51820"), Ok(51820));
    assert_eq!(f("0xCA6c"), Ok(0xca6c));
    assert_eq!(f("010"), Ok(8));
    assert_eq!(f("4294967295"), Ok(u32::MAX));
    for bad in ["", "0x", "4294967296", "09", "-1", "+1", "0xg", "one"] {
        assert!(f(bad).is_err(), "{bad}");
    }
}

#[test]
fn table_and_mtu_values() {
    let base = format!("[Interface]\nPrivateKey = {}\n", sk(1).to_base64());
    for (v, t) in [
        ("off", Table::Off),
        ("auto", Table::Auto),
        ("main", Table::Name("main".into())),
    ] {
        assert_eq!(
            parse(&format!("{base}Table = {v}\n"))
                .unwrap()
                .interface
                .table,
            t
        );
    }
    assert_eq!(
        parse(&format!("{base}MTU = 68\n")).unwrap().interface.mtu,
        Some(68)
    );
}

/// `(text after a valid [Interface] header and key, expected line, words in the message)`.
#[test]
fn every_error_names_its_line() {
    let key = sk(1).to_base64();
    let head = format!("[Interface]\nPrivateKey = {key}\n");
    let peer = format!("[Peer]\nPublicKey = {}\n", pk(2).to_base64());
    let cases: Vec<(String, usize, &str)> = vec![
        (format!("{head}[Interfaces]\n"), 3, "unknown section"),
        (format!("{head}[Peer\n"), 3, "unknown section"),
        (format!("ListenPort = 1\n{head}"), 1, "outside a section"),
        (
            format!("{head}Bogus = 1\n"),
            3,
            "unknown key `Bogus` in [Interface]",
        ),
        (
            format!("{head}{peer}Address = 10.0.0.1\n"),
            5,
            "unknown key `Address` in [Peer]",
        ),
        (format!("{head}ListenPort 51820\n"), 3, "missing `=`"),
        (format!("{head}ListenPort # = 5\n"), 3, "missing `=`"),
        (
            "[Interface]\nPrivateKey = abc\n".into(),
            2,
            "bad base64 key",
        ),
        (
            format!("{head}[Peer]\nPublicKey = {}\n", "A".repeat(44)),
            4,
            "bad base64 key",
        ),
        (
            format!("{head}{peer}PresharedKey = zz\n"),
            5,
            "bad base64 key",
        ),
        (format!("{head}ListenPort = 65536\n"), 3, "out of range"),
        (format!("{head}ListenPort = x\n"), 3, "not a number"),
        (format!("{head}ListenPort = -1\n"), 3, "not a number"),
        (format!("{head}FwMark = 0xfffffffff\n"), 3, "32 bits"),
        (format!("{head}MTU = 67\n"), 3, "minimum"),
        (format!("{head}MTU = 65536\n"), 3, "out of range"),
        (
            format!("{head}{peer}PersistentKeepalive = 65536\n"),
            5,
            "out of range",
        ),
        (format!("{head}Address = 10.0.0.1/33\n"), 3, "bad prefix"),
        (
            format!("{head}Address = 10.0.0.1/24, nope\n"),
            3,
            "bad prefix",
        ),
        (
            format!("{head}{peer}AllowedIPs = fd00::/129\n"),
            5,
            "bad prefix",
        ),
        (
            format!("{head}{peer}Endpoint = 198.18.0.1\n"),
            5,
            "bad endpoint",
        ),
        (
            format!("{head}{peer}Endpoint = fd00::1:51820\n"),
            5,
            "bad endpoint",
        ),
        (
            format!("{head}PrivateKey = {key}\n"),
            3,
            "duplicate `PrivateKey` (first set on line 2)",
        ),
        (
            format!("{head}ListenPort = 1\n[Interface]\nlistenport = 2\n"),
            5,
            "duplicate `ListenPort`",
        ),
        (
            format!("{head}{peer}PublicKey = {}\n", pk(3).to_base64()),
            5,
            "duplicate `PublicKey`",
        ),
        (
            format!("{head}{peer}Endpoint = a:1\nEndpoint = b:1\n"),
            6,
            "duplicate `Endpoint`",
        ),
        (
            format!("{head}MTU = 1400\nMTU = 1400\n"),
            4,
            "duplicate `MTU`",
        ),
        (
            format!("{head}Table = off\nTable = off\n"),
            4,
            "duplicate `Table`",
        ),
        (format!("{head}Table = 0\n"), 3, "Table"),
        (
            format!("{head}SaveConfig = yes\n"),
            3,
            "neither true nor false",
        ),
        (format!("{head}DNS = 1.2.3\n"), 3, "not an IP address"),
        (
            format!("{head}DNS = bad/domain\n"),
            3,
            "neither an IP address nor a domain",
        ),
        (
            "# nothing\n\n[Interface]\nListenPort = 1\n".into(),
            3,
            "missing PrivateKey",
        ),
        ("".into(), 1, "missing PrivateKey"),
        (
            format!("{head}\n[Peer]\nEndpoint = a:1\n"),
            4,
            "[Peer] without PublicKey",
        ),
        (
            format!("{head}{peer}[Peer]\n"),
            5,
            "[Peer] without PublicKey",
        ),
    ];
    for (text, line, words) in cases {
        let e = parse(&text).expect_err(&text);
        assert_eq!(e.line, line, "{text:?} -> {e}");
        assert!(e.message.contains(words), "{text:?} -> {e}");
        assert!(e.to_string().starts_with(&format!("line {line}: ")));
    }
}

#[test]
fn hostile_input_does_not_panic() {
    for text in [
        "[",
        "]",
        "=",
        "[Interface]\n=",
        "[Interface]\n=\n=",
        "[Interface]\nPrivateKey=é",
        "[Interface]\nFwMark=0é",
        "[Interface]\nFwMark=é",
        "[Peer]\nEndpoint=[",
        "[Peer]\nEndpoint=[]:",
        "[Peer]\nEndpoint=[::1]:",
        "\u{0}",
        "[Interface]\nAddress=/",
        "[Interface]\nDNS=,,,",
        "#[Interface]",
        "[Interface]#\nPrivateKey#=",
        "[Socks5]\nBindAddress=[",
        "[Socks5]\nBindAddress=[::1%]:1",
        "[http]\nUsername=é:",
        "[TCPClientTunnel]\nBindAddress=é",
        "[TCPClientTunnel]\nTarget=[",
        "[UDPServerTunnel]\nListenPort=99999999999999999999999",
        "[socks5]\n[socks5]",
    ] {
        let _ = parse(text);
    }
}

fn head() -> String {
    format!("[Interface]\nPrivateKey = {}\n", sk(1).to_base64())
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn proxy_and_forward_sections() {
    let text = format!(
        "{}\
         [Socks5]\n\
         BindAddress = 127.0.0.1:1080\n\
         Username = alice\n\
         Password = s3cret=yes # a comment\n\
         [ HTTP ]\n\
         bindaddress = [::1]:3128\n\
         [tcpclienttunnel]\n\
         BindAddress = 25565\n\
         Target = play.example.net:25565\n\
         [UDPClientTunnel]\n\
         BindAddress = [::1]:53\n\
         Target = [fd00::53]:53\n\
         [TCPClientTunnel]\n\
         TARGET = 100.64.0.9:80\n\
         BindAddress = 0.0.0.0:8080\n\
         [TCPServerTunnel]\n\
         ListenPort = 8443\n\
         Target = localhost:443\n\
         [UDPServerTunnel]\n\
         listenport = 53\n\
         Target = 127.0.0.1:5353\n\
         [Peer]\n\
         PublicKey = {}\n",
        head(),
        pk(2).to_base64()
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.peers.len(), 1);
    assert_eq!(
        c.socks5,
        Some(ProxySettings {
            bind: sa("127.0.0.1:1080"),
            auth: Some(("alice".into(), "s3cret=yes".into())),
        })
    );
    assert_eq!(
        c.http,
        Some(ProxySettings {
            bind: sa("[::1]:3128"),
            auth: None,
        })
    );
    let locals: Vec<(SocketAddr, String, bool)> = c
        .local_forwards
        .iter()
        .map(|f| (f.bind, f.target.to_string(), f.udp))
        .collect();
    assert_eq!(
        locals,
        [
            (
                sa("127.0.0.1:25565"),
                "play.example.net:25565".into(),
                false
            ),
            (sa("[::1]:53"), "[fd00::53]:53".into(), true),
            (sa("0.0.0.0:8080"), "100.64.0.9:80".into(), false),
        ]
    );
    assert_eq!(c.local_forwards[1].target.host(), "fd00::53");
    let remotes: Vec<(u16, String, bool)> = c
        .remote_forwards
        .iter()
        .map(|f| (f.port, f.target.to_string(), f.udp))
        .collect();
    assert_eq!(
        remotes,
        [
            (8443, "localhost:443".into(), false),
            (53, "127.0.0.1:5353".into(), true),
        ]
    );
    assert_eq!(parse(&c.render()).unwrap(), c);

    // None of it is required, and a file without it has none.
    let plain = parse(&head()).unwrap();
    assert_eq!(plain, Config::new(Interface::new(sk(1))));

    // The same port on TCP and UDP, and port-0 binds, do not conflict.
    let c = parse(&format!(
        "{}[Socks5]\nBindAddress = 127.0.0.1:0\n[http]\nBindAddress = 127.0.0.1:0\n\
         [TCPClientTunnel]\nBindAddress = 53\nTarget = a:53\n\
         [UDPClientTunnel]\nBindAddress = 53\nTarget = a:53\n\
         [TCPServerTunnel]\nListenPort = 53\nTarget = a:53\n\
         [UDPServerTunnel]\nListenPort = 53\nTarget = a:53\n",
        head()
    ))
    .unwrap();
    assert_eq!((c.local_forwards.len(), c.remote_forwards.len()), (2, 2));
}

#[test]
fn proxy_and_forward_errors_name_their_line() {
    let head = head();
    let long = "x".repeat(256);
    let cases: Vec<(String, usize, &str)> = vec![
        (
            format!("{head}[Socks5]\nUsername = a\nPassword = b\n"),
            3,
            "[Socks5] without BindAddress",
        ),
        (format!("{head}[http]\n"), 3, "[http] without BindAddress"),
        (
            format!("{head}[Socks5]\nBindAddress = 127.0.0.1:65536\n"),
            4,
            "BindAddress: `127.0.0.1:65536` is not ADDR:PORT",
        ),
        (
            format!("{head}[Socks5]\nBindAddress = 1080\n"),
            4,
            "is not ADDR:PORT",
        ),
        (
            format!("{head}[http]\nBindAddress = localhost:3128\n"),
            4,
            "is not ADDR:PORT",
        ),
        (
            format!("{head}[Socks5]\nBindAddress = ::1:1080\n"),
            4,
            "is not ADDR:PORT",
        ),
        (
            format!("{head}[Socks5]\nBindAddress = 127.0.0.1:+1\n"),
            4,
            "is not ADDR:PORT",
        ),
        (
            format!("{head}[Socks5]\nBindAddress = 127.0.0.1:1080\nUsername = a\n"),
            5,
            "Username without Password in [Socks5]",
        ),
        (
            format!("{head}[http]\nPassword = b\nBindAddress = 127.0.0.1:1080\n"),
            4,
            "Password without Username in [http]",
        ),
        (
            format!("{head}[Socks5]\nBindAddress = 127.0.0.1:1080\nUsername =\n"),
            5,
            "Username: empty value",
        ),
        (
            format!("{head}[Socks5]\nBindAddress = 127.0.0.1:1080\nPassword = # all comment\n"),
            5,
            "Password: empty value",
        ),
        (
            format!("{head}[Socks5]\nBindAddress = 127.0.0.1:1080\nPassword = {long}\n"),
            5,
            "longer than 255 bytes",
        ),
        (
            format!("{head}[http]\nBindAddress = 127.0.0.1:1080\nUsername = a:b\n"),
            5,
            "`:` cannot be used",
        ),
        (
            format!("{head}[Socks5]\nBindAddress = 127.0.0.1:1\n[Peer]\n[socks5]\n"),
            6,
            "duplicate [Socks5] section (first on line 3)",
        ),
        (
            format!("{head}[http]\nBindAddress = 127.0.0.1:1\n[Http]\n"),
            5,
            "duplicate [http] section (first on line 3)",
        ),
        (
            format!("{head}[Socks5]\nBindAddress = 127.0.0.1:1\nbindaddress = 127.0.0.1:2\n"),
            5,
            "duplicate `BindAddress` (first set on line 4)",
        ),
        (
            format!("{head}[Socks5]\nBindAddress = 127.0.0.1:1\nCertFile = x\n"),
            5,
            "unknown key `CertFile` in [Socks5]",
        ),
        (
            format!("{head}[http]\nTarget = a:1\n"),
            4,
            "unknown key `Target` in [http]",
        ),
        (
            format!("{head}[TCPClientTunnel]\nListenPort = 1\n"),
            4,
            "unknown key `ListenPort` in [TCPClientTunnel]",
        ),
        (
            format!("{head}[UDPServerTunnel]\nBindAddress = 1\n"),
            4,
            "unknown key `BindAddress` in [UDPServerTunnel]",
        ),
        (
            format!("{head}[TCPClientTunnel]\nTarget = a:1\n"),
            3,
            "[TCPClientTunnel] without BindAddress",
        ),
        (
            format!("{head}[UDPClientTunnel]\nBindAddress = 1\n"),
            3,
            "[UDPClientTunnel] without Target",
        ),
        (
            format!("{head}[TCPServerTunnel]\nTarget = a:1\n"),
            3,
            "[TCPServerTunnel] without ListenPort",
        ),
        (
            format!("{head}[UDPServerTunnel]\nListenPort = 1\n"),
            3,
            "[UDPServerTunnel] without Target",
        ),
        (
            format!("{head}[TCPClientTunnel]\nBindAddress = 70000\n"),
            4,
            "BindAddress: `70000` is out of range",
        ),
        (
            format!("{head}[TCPClientTunnel]\nBindAddress = x:1\n"),
            4,
            "is not [ADDR:]PORT",
        ),
        (
            format!("{head}[TCPServerTunnel]\nListenPort = 65536\n"),
            4,
            "ListenPort: `65536` is out of range",
        ),
        (
            format!("{head}[TCPServerTunnel]\nListenPort = 0\n"),
            4,
            "ListenPort: 0 is not a port",
        ),
        (
            format!("{head}[TCPServerTunnel]\nListenPort = http\n"),
            4,
            "not a number",
        ),
        (
            format!("{head}[TCPClientTunnel]\nTarget = example.net\n"),
            4,
            "Target: bad endpoint `example.net`: missing `:port`",
        ),
        (
            format!("{head}[TCPClientTunnel]\nTarget = fd00::1:80\n"),
            4,
            "Target: bad endpoint",
        ),
        (
            format!("{head}[UDPServerTunnel]\nTarget = a:0\n"),
            4,
            "Target: `a:0` has port 0",
        ),
        (
            format!("{head}[UDPServerTunnel]\nTarget = a:1\ntarget = b:1\n"),
            5,
            "duplicate `Target`",
        ),
        (
            format!(
                "{head}[Socks5]\nBindAddress = 127.0.0.1:1080\n\
                 [TCPClientTunnel]\nTarget = a:1\nBindAddress = 1080\n"
            ),
            7,
            "BindAddress 127.0.0.1:1080 (TCP) is already used by [Socks5] on line 4",
        ),
        (
            format!(
                "{head}[UDPClientTunnel]\nBindAddress = [::1]:53\nTarget = a:1\n\
                 [UDPClientTunnel]\nBindAddress = [::1]:53\nTarget = b:1\n"
            ),
            7,
            "BindAddress [::1]:53 (UDP) is already used by [UDPClientTunnel] on line 4",
        ),
        (
            format!(
                "{head}[TCPServerTunnel]\nListenPort = 80\nTarget = a:1\n\
                 [TCPServerTunnel]\nListenPort = 80\nTarget = b:1\n"
            ),
            7,
            "ListenPort 80 (TCP) is already used by [TCPServerTunnel] on line 4",
        ),
        (
            format!("{head}[STDIOTunnel]\n"),
            3,
            "unknown section `[STDIOTunnel]`",
        ),
    ];
    for (text, line, words) in cases {
        let e = parse(&text).expect_err(&text);
        assert_eq!(e.line, line, "{text:?} -> {e}");
        assert!(e.message.contains(words), "{text:?} -> {e}");
        assert!(e.to_string().starts_with(&format!("line {line}: ")));
    }
}
