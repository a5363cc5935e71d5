//! `include/wireguard.h` is what cbindgen makes of `src/lib.rs` today: CI runs this test, so a
//! change to the C ABI without the regenerated header fails it.

use std::path::Path;

fn generate() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not read src/lib.rs");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn header_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/wireguard.h");
    let fresh = generate();
    if std::env::var_os("UPDATE_HEADER").is_some_and(|v| v == "1") {
        std::fs::write(&path, &fresh).expect("write include/wireguard.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/wireguard.h is stale: run `UPDATE_HEADER=1 cargo test -p vpn-ffi --test header` \
         and commit the result"
    );
}

#[test]
fn header_declares_every_exported_function() {
    let header = generate();
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let exported: Vec<&str> = src
        .split("extern \"C\" fn ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .collect();
    assert!(exported.contains(&"wgTurnOn"), "{exported:?}");
    for f in exported {
        assert!(
            header.contains(&format!("{f}(")),
            "{f} missing from the header"
        );
    }
}
