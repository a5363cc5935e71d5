//! Runs the batch layer's self-tests on this machine and prints what they found:
//! `cargo run -p vpn-darwinbatch --example batch-selftest` on a Mac. Elsewhere (or built
//! without the `spi` feature) it reports batching as unsupported.

fn main() {
    println!(
        "batched I/O (connected sockets, utun): {}",
        vpn_darwinbatch::supported()
    );
    match vpn_darwinbatch::unconnected_supported() {
        Ok(()) => println!("batched I/O on unconnected sockets: true"),
        Err(e) => println!("batched I/O on unconnected sockets: false ({e})"),
    }
}
