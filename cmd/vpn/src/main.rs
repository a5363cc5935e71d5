//! `vpn`: a userspace WireGuard implementation.
//!
//! - `vpn [--foreground] <ifname>`: the daemon, started the way `wg-quick` starts wireguard-go
//!   (`WG_QUICK_USERSPACE_IMPLEMENTATION=vpn`); `wg` configures it through
//!   `/var/run/wireguard/<ifname>.sock`.
//! - `vpn up <config|name>` / `vpn down <config|name>`: wg-quick-style tunnels.
//! - `vpn show [ifname]`, `vpn genkey`, `vpn pubkey`.

#![forbid(unsafe_code)]

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

mod daemon;
mod keys;
mod quick;
mod show;

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
    /// Bring up a tunnel from a wg-quick config file (path, or a name under /etc/wireguard).
    Up(quick::Args),
    /// Take down a tunnel brought up with `vpn up`.
    Down(quick::Args),
    /// Show interfaces as `wg show` does, plus batching statistics.
    Show(show::Args),
    /// Print a new private key (base64).
    Genkey,
    /// Read a private key on stdin, print its public key.
    Pubkey,
}

fn main() -> ExitCode {
    daemon::forget_empty_variables(&Cli::command());
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let res = match cli.cmd {
        Some(Cmd::Up(a)) => quick::up(&a),
        Some(Cmd::Down(a)) => quick::down(&a),
        Some(Cmd::Show(a)) => show::run(&a),
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
