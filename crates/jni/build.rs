//! Link settings of libwg-go.so: the soname the official library has, and on Android pages of
//! 16 KiB (Android 15+ devices may use them; a library aligned for 4 KiB does not load there).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libwg-go.so");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("android") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,max-page-size=16384");
    }
}
