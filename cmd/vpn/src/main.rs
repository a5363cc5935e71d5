//! `vpn`: a userspace WireGuard implementation.
//!
//! - `vpn [--foreground] <ifname>`: the daemon, started the way `wg-quick` starts wireguard-go
//!   (`WG_QUICK_USERSPACE_IMPLEMENTATION=vpn`); `wg` configures it through
//!   `/var/run/wireguard/<ifname>.sock`.
//! - `vpn up [daemon options] <config|name>` / `vpn down <config|name>`: wg-quick-style
//!   tunnels.
//! - `vpn show [ifname]`, `vpn genkey`, `vpn pubkey`.
//!
//! The daemon's options (`--memory-budget`, …, each also read from its `VPN_*` variable) belong
//! to the daemon form and to `vpn up`, which starts a daemon: the other subcommands never read
//! the variables, so a stray or bad one in the environment stops only what starts a daemon.
//! `vpn up` starts its daemon as `vpn [the options given on its command line] <ifname>`, and
//! the daemon inherits the variables.

#![forbid(unsafe_code)]

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;

mod daemon;
mod keys;
mod quick;
mod show;
#[cfg(unix)]
mod userspace;

#[derive(Parser, Debug)]
#[command(
    name = "vpn",
    version,
    about = "A fast userspace WireGuard data plane",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Stay in the foreground (the daemon otherwise detaches).
    #[arg(short = 'f', long)]
    foreground: bool,

    /// More logging (-v: debug, -vv: trace). `RUST_LOG` overrides.
    #[arg(short = 'v', long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,

    /// Run the daemon for this interface (as wireguard-go does).
    ifname: Option<String>,

    #[command(flatten)]
    daemon: daemon::DaemonOptions,

    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Bring up a tunnel from a wg-quick config file (path, or a name under /etc/wireguard);
    /// daemon options given here go to the daemon it starts.
    Up(quick::UpArgs),
    /// Take down a tunnel brought up with `vpn up`.
    Down(quick::Args),
    /// Show interfaces as `wg show` does, plus batching statistics.
    Show(show::Args),
    /// Run a tunnel from a wg-quick config with no TUN and no root, behind a SOCKS5 and/or
    /// HTTP proxy on local addresses, in the foreground until a signal.
    #[cfg(unix)]
    Proxy(userspace::ProxyArgs),
    /// Run a tunnel from a wg-quick config with no TUN and no root, with ssh-style port
    /// forwards (-L local port to an address behind the tunnel, -R tunnel port to a local
    /// service), in the foreground until a signal.
    #[cfg(unix)]
    Forward(userspace::ForwardArgs),
    /// Installs the daemon's seccomp filter on this process, then makes a call outside it
    /// (mount, ptrace, execve, socket-packet, fork; or thread and udp, which it allows): the
    /// test that the filter bites.
    #[cfg(target_os = "linux")]
    #[command(hide = true)]
    SandboxProbe {
        /// The call to make.
        call: String,
    },
    /// Print a new private key (base64).
    Genkey,
    /// Read a private key on stdin, print its public key.
    Pubkey,
}

fn main() -> ExitCode {
    daemon::forget_empty_variables(&Cli::command());
    let cli = parse_cli(std::env::args_os().collect());
    init_logging(cli.verbose);
    let res = match cli.cmd {
        Some(Cmd::Up(a)) => quick::up(&a),
        Some(Cmd::Down(a)) => quick::down(&a),
        Some(Cmd::Show(a)) => show::run(&a),
        #[cfg(unix)]
        Some(Cmd::Proxy(a)) => userspace::proxy(&a),
        #[cfg(unix)]
        Some(Cmd::Forward(a)) => userspace::forward(&a),
        #[cfg(target_os = "linux")]
        Some(Cmd::SandboxProbe { call }) => daemon::sandbox::probe(&call),
        Some(Cmd::Genkey) => keys::genkey(),
        Some(Cmd::Pubkey) => keys::pubkey(),
        None => match cli.ifname {
            Some(ifname) => daemon::run(&ifname, cli.foreground, &cli.daemon),
            None => Err("missing interface name or command (see --help)".into()),
        },
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vpn: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The command line. A subcommand is parsed without the daemon form's variables (its matches
/// hold the options' defaults, which nothing reads; `vpn up`'s own daemon options keep theirs);
/// everything else (the daemon form, `--help`, `--version`, a usage error) is parsed again with
/// them, so that `vpn --help` shows each variable and the daemon validates them.
fn parse_cli(args: Vec<OsString>) -> Cli {
    let without_variables = Cli::command().mut_args(|a| a.env(None));
    match without_variables.try_get_matches_from(&args) {
        Ok(m) if m.subcommand().is_some() => {
            let mut cli =
                Cli::from_arg_matches(&m).unwrap_or_else(|e| e.format(&mut Cli::command()).exit());
            if let (Some(Cmd::Up(up)), Some(("up", sub))) = (&mut cli.cmd, m.subcommand()) {
                up.daemon_flags = daemon::command_line_flags(sub);
            }
            cli
        }
        _ => Cli::parse_from(args),
    }
}

fn init_logging(verbose: u8) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    // wireguard-go's LOG_LEVEL (verbose/debug, error, silent) applies when neither -v nor
    // RUST_LOG says otherwise.
    let log_level = match std::env::var("LOG_LEVEL").as_deref() {
        Ok("verbose") | Ok("debug") => Some("debug"),
        Ok("error") => Some("error"),
        Ok("silent") => Some("off"),
        _ => None,
    };
    let default = match verbose {
        0 => log_level.unwrap_or("info"),
        1 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Errors reported to the user as one line.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
