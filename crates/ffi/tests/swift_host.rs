//! The Swift network-extension host (`cmd/network-extension`) is not compiled here (no Swift
//! toolchain on Linux, no NetworkExtension off Apple systems); what its text shows is checked
//! instead: every C function it calls is one the committed header declares, it sets the
//! memory budget, and each provider-configuration key it reads is documented for app authors.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The host's Swift sources, all in one string.
fn host_source() -> String {
    let dir = repo().join("cmd/network-extension");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "swift"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no Swift in {}", dir.display());
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// The names `wgXxx` that `src` calls (followed by `(`; `wgQuickConfig:` is a label).
fn c_calls(src: &str) -> Vec<&str> {
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = src.as_bytes();
    let mut calls = Vec::new();
    for (i, _) in src.match_indices("wg") {
        if i > 0 && is_ident(bytes[i - 1]) {
            continue;
        }
        let end = i + src[i..].bytes().take_while(|&b| is_ident(b)).count();
        let starts_upper = bytes.get(i + 2).is_some_and(u8::is_ascii_uppercase);
        if starts_upper && bytes.get(end) == Some(&b'(') && !calls.contains(&&src[i..end]) {
            calls.push(&src[i..end]);
        }
    }
    calls
}

/// The values of `static let …Key = "…"` in `src`.
fn config_keys(src: &str) -> Vec<&str> {
    src.lines()
        .filter_map(|l| l.trim().strip_prefix("static let "))
        .filter_map(|l| l.split_once("Key = \""))
        .filter_map(|(_, rest)| rest.split('"').next())
        .collect()
}

#[test]
fn the_host_calls_only_declared_functions_and_sets_the_memory_budget() {
    let header = std::fs::read_to_string(repo().join("crates/ffi/include/wireguard.h")).unwrap();
    let source = host_source();
    let calls = c_calls(&source);
    // The header's declarations, comments aside, read the same way.
    let code: String = header
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| format!("{l}\n"))
        .collect();
    let declared = c_calls(&code);
    assert!(declared.contains(&"wgGetConfig"), "{declared:?}");
    for f in &calls {
        assert!(declared.contains(f), "{f} is not declared in wireguard.h");
    }
    for f in ["wgSetLogger", "wgSetMemoryBudget", "wgTurnOn", "wgTurnOff"] {
        assert!(calls.contains(&f), "the host never calls {f}: {calls:?}");
    }
    // The header's constants the host names are defined there, as plain numbers (Swift
    // imports a macro only when it is a literal or simple arithmetic on literals).
    let constants = wg_constants(&source);
    assert!(
        constants.contains(&"WG_DEFAULT_MEMORY_BUDGET"),
        "a missing memoryBudget puts the default back: {constants:?}"
    );
    for c in constants {
        let defined = header.lines().any(|l| {
            l.strip_prefix("#define ")
                .and_then(|d| d.strip_prefix(c))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .is_some()
        });
        assert!(defined, "{c} is not a number #defined in wireguard.h");
    }
}

/// The `WG_…` names (the header's constants) in Swift source.
fn wg_constants(src: &str) -> Vec<&str> {
    let mut out: Vec<&str> = src
        .match_indices("WG_")
        .filter(|&(i, _)| !src[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(i, _)| {
            let rest = &src[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[test]
fn every_provider_configuration_key_is_documented() {
    let doc = std::fs::read_to_string(repo().join("docs/embedding.md")).unwrap();
    let source = host_source();
    let keys = config_keys(&source);
    assert!(keys.contains(&"memoryBudget"), "{keys:?}");
    for k in keys {
        assert!(
            doc.contains(&format!("| `{k}` |")),
            "{k} is not in docs/embedding.md's table of keys"
        );
    }
}

#[test]
fn calls_are_told_from_labels_and_longer_names() {
    let src = "f(wgQuickConfig: t)\nlet h = wgTurnOn($0, fd)\nxwgNot(1)\nwgTurnOn(a)\n";
    assert_eq!(c_calls(src), ["wgTurnOn"]);
    assert_eq!(
        config_keys("    static let configKey = \"a\"\n  static let other = \"b\"\n"),
        ["a"]
    );
}
