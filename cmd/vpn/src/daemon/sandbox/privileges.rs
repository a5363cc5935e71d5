//! Whom the daemon becomes after setup, and which capabilities it keeps.
//!
//! The rule (docs/design-notes.md, "The daemon holds only what it needs"):
//! - `CAP_NET_ADMIN`, always: `SO_MARK` on every (re)bind and connected socket (`wg set
//!   fwmark`, and a listen-port change or a roam with a mark set), `SO_RCVBUFFORCE` and
//!   `SO_SNDBUFFORCE` on the same sockets (buffers above `rmem_max`/`wmem_max`), and the TUN's
//!   MTU, set once the TUN is wrapped after the switch.
//! - `CAP_NET_BIND_SERVICE`, unless `--low-ports=off` or the namespace's
//!   `net.ipv4.ip_unprivileged_port_start` is 0 (then every port is unprivileged): `wg set
//!   listen-port` may pick a port below that start at any time, and the daemon cannot know
//!   beforehand (wg-quick starts it with no configuration).
//! - Nothing else: the TUN, the UAPI socket and the log exist already; the UAPI socket file is
//!   removed by the cleaner, which keeps uid 0 (`vpn_sys::cleaner`).

use vpn_sys::privileges::{self as sys, CAP_NET_ADMIN, CAP_NET_BIND_SERVICE};

/// The uid 65534 most systems call `nobody`, for a system whose user database has no entry.
const OVERFLOW_ID: u32 = 65534;

/// Whom to become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// As given (`nobody`, `vpn:vpn`, `1234`).
    pub spec: String,
    pub uid: u32,
    pub gid: u32,
}

/// Resolves `--user` (`USER[:GROUP]`, each a name or a number) through the user database,
/// before anything is confined. The group defaults to the user's primary group; a `nobody`
/// missing from the database is uid and gid 65534.
pub fn resolve(spec: &str) -> Result<Target, crate::Error> {
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let bad = |what: String| -> crate::Error { format!("--user={spec}: {what}").into() };
    if user.is_empty() || group.is_some_and(str::is_empty) {
        return Err(bad("expected USER or USER:GROUP".into()));
    }
    let (uid, primary) = match user.parse::<u32>() {
        Ok(uid) => {
            let gid = sys::user_by_uid(uid)
                .map_err(|e| bad(format!("looking up uid {uid}: {e}")))?
                .map_or(uid, |u| u.gid);
            (uid, gid)
        }
        Err(_) => {
            match sys::user_by_name(user).map_err(|e| bad(format!("looking up {user}: {e}")))? {
                Some(u) => (u.uid, u.gid),
                None if user == "nobody" => (OVERFLOW_ID, OVERFLOW_ID),
                None => return Err(bad(format!("no user {user:?}"))),
            }
        }
    };
    let gid = match group {
        None => primary,
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => sys::group_by_name(g)
                .map_err(|e| bad(format!("looking up group {g}: {e}")))?
                .ok_or_else(|| bad(format!("no group {g:?}")))?,
        },
    };
    if uid == 0 {
        return Err(bad(
            "that is root: --no-drop-privileges keeps root and every capability".into(),
        ));
    }
    Ok(Target {
        spec: spec.to_owned(),
        uid,
        gid,
    })
}

/// The capabilities kept, by the rule above; `port_start` is the namespace's
/// `net.ipv4.ip_unprivileged_port_start`.
pub fn kept(low_ports: bool, port_start: u32) -> u64 {
    let mut keep = 1u64 << CAP_NET_ADMIN;
    if low_ports && port_start > 0 {
        keep |= 1 << CAP_NET_BIND_SERVICE;
    }
    keep
}

/// `net.ipv4.ip_unprivileged_port_start` in the daemon's network namespace (1024 where it
/// cannot be read).
pub fn unprivileged_port_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_set_follows_the_rule() {
        let admin = 1u64 << CAP_NET_ADMIN;
        let bind = 1u64 << CAP_NET_BIND_SERVICE;
        assert_eq!(kept(true, 1024), admin | bind);
        assert_eq!(kept(false, 1024), admin);
        assert_eq!(kept(true, 0), admin, "every port is unprivileged already");
        assert_eq!(kept(true, 80), admin | bind);
    }

    #[test]
    fn users_and_groups_resolve() {
        let t = resolve("nobody").unwrap();
        assert_ne!(t.uid, 0);
        assert_eq!(resolve("65534").unwrap().uid, 65534);
        assert_eq!(
            resolve("4321:4322").unwrap(),
            Target {
                spec: "4321:4322".into(),
                uid: 4321,
                gid: 4322
            }
        );
        assert_eq!(
            resolve("4321").unwrap().gid,
            4321,
            "no entry: the uid as gid"
        );
        for bad in [
            "root",
            "0",
            "",
            ":",
            "nobody:",
            "no-such-user-vpn",
            "nobody:no-such-group-vpn",
        ] {
            let e = resolve(bad).expect_err(bad).to_string();
            assert!(e.starts_with("--user="), "{bad}: {e}");
        }
    }
}
