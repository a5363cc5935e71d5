//! Round-trip properties over generated inputs: whatever a parser accepts, its renderer writes
//! back as text that parses to the same model (and a `set` body never holds an empty line).

use crate::{Change, DeviceState, IpcError, Part, Statistics};

/// xorshift64*: a small deterministic generator, so a failure reproduces from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn hex_key(&mut self) -> String {
        match self.below(6) {
            0 => "0".repeat(64),
            1 => "AB".repeat(32),
            2 => "abc".into(),
            _ => (0..32)
                .map(|_| format!("{:02x}", self.next() as u8))
                .collect(),
        }
    }

    fn number(&mut self) -> String {
        match self.below(8) {
            0 => String::new(),
            1 => "-1".into(),
            2 => "+7".into(),
            3 => format!("00{}", self.below(100)),
            4 => u64::MAX.to_string(),
            5 => "70000".into(),
            _ => self.below(70_000).to_string(),
        }
    }

    fn prefix(&mut self) -> String {
        let p = match self.below(5) {
            0 => format!(
                "10.{}.0.{}/{}",
                self.below(256),
                self.below(256),
                self.below(40)
            ),
            1 => format!(
                "fd00:{:x}::{:x}/{}",
                self.below(65536),
                self.below(9),
                self.below(140)
            ),
            2 => "::/0".into(),
            3 => "10.0.0.0".into(),
            _ => format!("192.0.2.{}/32", self.below(256)),
        };
        if self.below(4) == 0 {
            format!("-{p}")
        } else {
            p
        }
    }

    fn endpoint(&mut self) -> String {
        self.pick(&[
            "198.18.0.1:51820",
            "[fd00::1]:1",
            "[fe80::1%eth0]:5",
            "peer.example:7",
            "",
            "1.2.3.4",
            "a\rb",
            "x=y",
        ])
        .into()
    }

    fn value(&mut self, key: &str) -> String {
        match key {
            "private_key" | "public_key" | "preshared_key" => self.hex_key(),
            "listen_port"
            | "fwmark"
            | "persistent_keepalive_interval"
            | "protocol_version"
            | "last_handshake_time_sec"
            | "last_handshake_time_nsec"
            | "tx_bytes"
            | "rx_bytes" => {
                if key == "protocol_version" && self.below(2) == 0 {
                    "1".into()
                } else {
                    self.number()
                }
            }
            "endpoint" => self.endpoint(),
            "allowed_ip" => self.prefix(),
            _ => self.pick(&["true", "false", "1", ""]).into(),
        }
    }

    /// A body of up to 40 lines drawn from `keys`, with the odd malformed line.
    fn body(&mut self, keys: &[&str]) -> String {
        let mut out = String::new();
        for _ in 0..self.below(40) {
            match self.below(40) {
                0 => out.push_str("no equals sign\n"),
                1 => out.push('\n'),
                2 => out.push_str("unknown_key=1\n"),
                _ => {
                    let key = self.pick(keys);
                    let value = self.value(key);
                    let end = if self.below(10) == 0 { "\r\n" } else { "\n" };
                    out.push_str(&format!("{key}={value}{end}"));
                }
            }
        }
        out
    }
}

const SET_KEYS: &[&str] = &[
    "private_key",
    "listen_port",
    "fwmark",
    "replace_peers",
    "public_key",
    "public_key",
    "update_only",
    "remove",
    "preshared_key",
    "endpoint",
    "persistent_keepalive_interval",
    "replace_allowed_ips",
    "allowed_ip",
    "allowed_ip",
    "protocol_version",
];

const GET_KEYS: &[&str] = &[
    "private_key",
    "listen_port",
    "fwmark",
    "public_key",
    "preshared_key",
    "protocol_version",
    "endpoint",
    "last_handshake_time_sec",
    "last_handshake_time_nsec",
    "tx_bytes",
    "rx_bytes",
    "persistent_keepalive_interval",
    "allowed_ip",
    "allowed_ip",
];

/// `parse_each` hands over each part as soon as it is whole, and stops at the first bad line
/// after handing over the section that line cut short, or at the first error `apply` returns.
#[test]
fn a_set_body_is_handed_over_part_by_part() {
    let (a, b) = ("01".repeat(32), "02".repeat(32));
    let body = format!(
        "listen_port=1\npublic_key={a}\nallowed_ip=100.64.0.1/32\npublic_key={b}\nendpoint=198.18.0.1:1\nbogus=1\npublic_key={a}\n\n"
    );
    let mut seen = Vec::new();
    let res = Change::parse_each(&body, |part| {
        seen.push(match part {
            Part::Device(s) => s.to_string(),
            Part::Peer(p) => format!("peer {} settings", p.settings().len()),
        });
        Ok(())
    });
    assert!(res.unwrap_err().to_string().contains("bogus"));
    assert_eq!(
        seen,
        ["listen_port=1", "peer 1 settings", "peer 1 settings"]
    );
    // The same parts as parse_partial's Change, in the same order.
    let (change, err) = Change::parse_partial(&body);
    assert!(err.is_some());
    assert_eq!(
        (change.device_settings().len(), change.peers().len()),
        (1, 2)
    );

    let mut applied = 0;
    let res = Change::parse_each(&body, |_| {
        applied += 1;
        if applied == 2 {
            return Err(IpcError::invalid("refused"));
        }
        Ok(())
    });
    assert!(res.unwrap_err().to_string().ends_with("refused"));
    assert_eq!(applied, 2, "nothing after the refused part");
}

#[test]
fn rendered_set_parses_to_the_same_change() {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut nonempty = 0;
    for i in 0..5000 {
        let text = rng.body(SET_KEYS);
        let (change, _) = Change::parse_partial(&text);
        let rendered = change.to_string();
        assert!(!rendered.contains("\n\n"), "case {i}: {rendered:?}");
        let (again, err) = Change::parse_partial(&rendered);
        assert_eq!(err, None, "case {i}: {text:?} rendered as {rendered:?}");
        assert_eq!(again, change, "case {i}: {text:?}");
        nonempty += usize::from(!change.is_empty());
    }
    assert!(
        nonempty > 1000,
        "the generator mostly produced empty changes"
    );
}

#[test]
fn rendered_get_parses_to_the_same_state() {
    let mut rng = Rng(0x0dd_ba11_cafe_f00d);
    let mut accepted = 0;
    for i in 0..5000 {
        let text = rng.body(GET_KEYS);
        let Ok(state) = text.parse::<DeviceState>() else {
            continue;
        };
        accepted += 1;
        let rendered = state.to_string();
        assert_eq!(
            rendered.parse::<DeviceState>().as_ref(),
            Ok(&state),
            "case {i}: {text:?} rendered as {rendered:?}"
        );
    }
    assert!(accepted > 200, "only {accepted} generated dumps parsed");
}

#[test]
fn rendered_statistics_parse_to_the_same_counters() {
    let mut rng = Rng(42);
    for _ in 0..1000 {
        let mut st = Statistics::new();
        for _ in 0..rng.below(20) {
            let group = rng.pick(&["device", "tun", "bind", "", "a.b"]);
            let name = rng.pick(&["reads", "drop_replay", "x=y", "", "v4_gso"]);
            st.push(group, name, rng.next());
        }
        assert_eq!(st.to_string().parse::<Statistics>().unwrap(), st);
    }
}
