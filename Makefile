# Build, test and measure the VPN data plane. `make help` lists the targets.

CARGO ?= cargo
DARWIN_TARGETS := aarch64-apple-darwin x86_64-apple-darwin
FUZZ_SECONDS ?= 10

.PHONY: help build demo test netns lint fmt darwin-tools darwin check-darwin ffi-darwin apple \
	android-tools check-android android ios-tools ffi-ios \
	bench bench-hub bench-netstack profile soak bench-android fuzz-smoke netns-connected clean

help:
	@echo "make demo          (root) a two-peer tunnel in network namespaces carrying 1 GiB"
	@echo "make build         build everything (release)"
	@echo "make test          the whole test suite (root runs the network-namespace tests too)"
	@echo "make netns         (root) the network-namespace suite: vpn, wireguard-go, boringtun-cli"
	@echo "make lint          rustfmt check and clippy with warnings denied"
	@echo "make darwin-tools  install zig, cargo-zigbuild and llvm-nm (idempotent)"
	@echo "make darwin        link vpn as Mach-O for $(DARWIN_TARGETS) and check the binaries"
	@echo "make check-darwin  clippy every macOS crate for $(DARWIN_TARGETS), SPI on and off"
	@echo "make ffi-darwin    the C ABI's libraries for $(DARWIN_TARGETS), exports checked"
	@echo "make apple         (macOS) WireGuardFFI.xcframework: macOS, iOS and iOS simulator"
	@echo "make android-tools install zig, llvm-readelf/llvm-nm and the Android Rust targets"
	@echo "make check-android clippy every crate libwg-go.so and the C ABI need, 3 Android targets"
	@echo "make android       link libwg-go.so (crates/jni) for arm64-v8a, armeabi-v7a, x86_64 with zig"
	@echo "make ios-tools     install zig, cargo-zigbuild, llvm-nm and the iOS Rust targets"
	@echo "make ffi-ios       the C ABI's static library for iOS and its simulator, exports checked"
	@echo "make bench         benchmarks (criterion)"
	@echo "make bench-hub     one device with 100 000 peers: configure, memory, wg show, handshakes/s"
	@echo "make bench-netstack (root) vpn forward vs onetun 0.3.10 vs the TUN tunnel, same run"
	@echo "make profile       (root) per-datagram and per-ping costs of vpn and boringtun-cli (perf)"
	@echo "make bench-android (root) the Android backend from a JVM: throughput and memory per packet-memory budget"
	@echo "make soak          (root) SOAK_SECONDS (1200) of TCP, UDP and ping through a tunnel under rekeys, churn, roaming"
	@echo "make fuzz-smoke    every fuzz target for FUZZ_SECONDS seconds"

build:
	$(CARGO) build --workspace --release

# The main job in one command: build, two namespaces, `vpn up` from wg-quick configs, ping,
# 1 GiB through the tunnel with the throughput printed, then everything removed.
demo:
	$(CARGO) build --release -p vpn-cli
	bash netns-tests/demo.sh target/release/vpn

# Everything a user runs to test: unit, scenario and interop tests.
test:
	$(CARGO) test --workspace --no-fail-fast
	@if [ "$$(id -u)" -eq 0 ]; then $(MAKE) --no-print-directory netns; \
	else echo "make test: not root, skipping the network-namespace suite (make netns)"; fi

# (root) the network-namespace suite: vpn against itself, wireguard-go and boringtun-cli.
netns:
	$(CARGO) build -p vpn-cli -p vpn-netns-tools -p vpn-jni
	bash netns-tests/run.sh $${CARGO_TARGET_DIR:-target}/debug/vpn
	bash netns-tests/connected/test.sh $${CARGO_TARGET_DIR:-target}/debug/vpn

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# macOS from Linux: zig (PyPI) links Mach-O and compiles ring's C for darwin, cargo-zigbuild
# (crates.io) wires it into cargo, llvm-nm (Debian) lists what a binary references.
darwin-tools:
	bash scripts/darwin-tools.sh

# `vpn` for both darwin targets, with and without the private batch calls (docs/macos.md).
darwin: darwin-tools
	bash scripts/darwin-link.sh

check-darwin: darwin-tools ios-tools
	bash scripts/check-darwin.sh

# The C ABI (crates/ffi) as static and dynamic libraries for both darwin targets, linked with
# zig from Linux; llvm-nm checks that every wg* function of the header is exported.
ffi-darwin: darwin-tools
	bash scripts/ffi-darwin.sh

# Android from Linux (scripts/android-env.sh): zig, llvm-readelf/llvm-nm and the three Android
# Rust targets; clippy for every crate libwg-go.so and the C ABI need; libwg-go.so linked with
# zig and checked.
android-tools:
	bash scripts/darwin-tools.sh android

check-android: android-tools
	bash scripts/check-android.sh

android: android-tools
	bash scripts/android-link.sh

# iOS from Linux: zig, cargo-zigbuild, llvm-nm and the iOS Rust targets; the C ABI's static
# library for iOS and its simulator, every wg* export checked.
ios-tools:
	bash scripts/darwin-tools.sh ios

ffi-ios: ios-tools
	bash scripts/ffi-ios.sh

# On a Mac: the universal static library and header as WireGuardFFI.xcframework (macOS, iOS
# and the iOS simulator; docs/embedding.md). APPSTORE=1 leaves out the private batch calls.
apple:
	bash scripts/apple-xcframework.sh

bench:
	$(CARGO) bench -p vpn-proto --bench aead
	$(CARGO) bench -p vpn-device --bench allowedips
	$(CARGO) build --release -p vpn-cli
	bash netns-tests/bench.sh $${CARGO_TARGET_DIR:-target}/release/vpn

# A hub of HUB_PEERS (100 000) peers with 10 allowed IPs each, HUB_CLIENTS (10 000) of them
# handshaking (tests/benches/hub.rs; figures in docs/performance.md).
bench-hub:
	$(CARGO) bench -p vpn-tests --bench hub

# The tunnel without a TUN (`vpn forward`) against onetun and the TUN tunnel, same run
# (netns-tests/bench_netstack.sh; figures in docs/performance.md).
bench-netstack:
	$(CARGO) build --release -p vpn-cli
	bash netns-tests/bench_netstack.sh $${CARGO_TARGET_DIR:-target}/release/vpn

# (root) Where a small packet's time goes, vpn against boringtun-cli (netns-tests/profile.sh;
# needs perf; figures in docs/performance.md).
profile:
	$(CARGO) build --release -p vpn-cli
	bash netns-tests/profile.sh $${CARGO_TARGET_DIR:-target}/release/vpn

# The Android backend's packet-memory budget: Mbit/s and the JVM's memory per budget.
bench-android:
	$(CARGO) build --release -p vpn-cli -p vpn-jni
	bash netns-tests/bench_android.sh $${CARGO_TARGET_DIR:-target}/release/libwg_go.so $${CARGO_TARGET_DIR:-target}/release/vpn

# (root) The soak: SOAK_SECONDS of TCP, UDP and ping through one tunnel while keys rotate, peers
# come and go through UAPI, the endpoint roams and UDP floods it, beside an idle tunnel; every
# daemon's RSS, descriptors, threads and packet memory sampled every 10 s and checked for a
# trend (netns-tests/soak.sh; figures in docs/performance.md). SOAK_PROFILE=debug runs the
# debug build (CI's 2-minute run).
SOAK_SECONDS ?= 1200
SOAK_PROFILE ?= release
soak:
	$(CARGO) build $(if $(filter release,$(SOAK_PROFILE)),--release) -p vpn-cli
	SOAK_SECONDS=$(SOAK_SECONDS) bash netns-tests/soak.sh $${CARGO_TARGET_DIR:-target}/$(SOAK_PROFILE)/vpn

fuzz-smoke:
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash fuzz/smoke.sh

clean:
	$(CARGO) clean

# Connected sockets (docs/bind.md) in network namespaces (root): the checks, then the benchmark.
netns-connected:
	$(CARGO) build --release -p vpn-cli
	bash netns-tests/connected/test.sh $${CARGO_TARGET_DIR:-target}/release/vpn
	bash netns-tests/connected/bench.sh $${CARGO_TARGET_DIR:-target}/release/vpn
