//! A smoke test for a Mac: creates a utun (`utun` or the name given), prints its name, MTU and
//! batch size, then prints every packet header and interface event for 30 seconds. Bring the
//! interface up and send it traffic meanwhile, e.g.
//! `sudo ifconfig utunN inet 100.64.0.1 100.64.0.2 up; ping -c 3 100.64.0.2`.
//! Run as root: `sudo cargo run -p vpn-tun --example utun-smoke [utunN]`.

#[cfg(target_os = "macos")]
fn main() -> std::io::Result<()> {
    use std::time::{Duration, Instant};
    use vpn_tun::{DarwinTun, Device};

    let name = std::env::args().nth(1).unwrap_or_else(|| "utun".into());
    let tun = std::sync::Arc::new(DarwinTun::create(&name, 1420)?);
    println!(
        "{}: mtu {}, batch {}",
        tun.name()?,
        tun.mtu()?,
        tun.batch_size()
    );
    let events = tun.events();
    std::thread::spawn(move || {
        for ev in events {
            println!("event: {ev:?}");
        }
    });
    let reader = {
        let tun = tun.clone();
        std::thread::spawn(move || {
            let n = tun.batch_size();
            let mut store = vec![vec![0u8; 16 + 65535]; n];
            let mut sizes = vec![0; n];
            loop {
                let mut bufs: Vec<&mut [u8]> = store.iter_mut().map(|b| &mut b[..]).collect();
                match tun.read(&mut bufs, &mut sizes, 16) {
                    Ok(got) => {
                        for (b, &s) in bufs.iter().zip(&sizes).take(got) {
                            println!("read {s} bytes, version {}", b[16] >> 4);
                        }
                    }
                    Err(e) => {
                        println!("read ended: {e}");
                        return;
                    }
                }
            }
        })
    };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(200));
    }
    tun.close()?;
    reader.join().expect("reader panicked");
    Ok(())
}

#[cfg(not(target_os = "macos"))]
fn main() {
    eprintln!("utun-smoke runs on macOS only");
}
