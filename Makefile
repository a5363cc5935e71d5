# Build, test and measure the VPN data plane. `make help` lists the targets.

CARGO ?= cargo
DARWIN_TARGETS := aarch64-apple-darwin x86_64-apple-darwin
# Crates that build for darwin (the Linux-only shims and tests are left out).
DARWIN_CRATES := -p vpn-proto -p vpn-tun -p vpn-conn -p vpn-device
FUZZ_SECONDS ?= 10

.PHONY: help build demo test netns lint fmt check-darwin bench bench-hub fuzz-smoke netns-connected clean

help:
	@echo "make demo          (root) a two-peer tunnel in network namespaces carrying 1 GiB"
	@echo "make build         build everything (release)"
	@echo "make test          the whole test suite (root runs the network-namespace tests too)"
	@echo "make netns         (root) the network-namespace suite: vpn, wireguard-go, boringtun-cli"
	@echo "make lint          rustfmt check and clippy with warnings denied"
	@echo "make check-darwin  type-check the darwin build for $(DARWIN_TARGETS)"
	@echo "make bench         benchmarks (criterion)"
	@echo "make bench-hub     one device with 100 000 peers: configure, memory, wg show, handshakes/s"
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
	$(CARGO) build -p vpn-cli -p vpn-netns-tools
	bash netns-tests/run.sh $${CARGO_TARGET_DIR:-target}/debug/vpn
	bash netns-tests/connected/test.sh $${CARGO_TARGET_DIR:-target}/debug/vpn

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

check-darwin:
	@for t in $(DARWIN_TARGETS); do \
		rustup target list --installed | grep -qx $$t || rustup target add $$t || exit 1; \
		echo "== cargo check --target $$t"; \
		$(CARGO) check --target $$t $(DARWIN_CRATES) --all-targets || exit 1; \
	done

bench:
	$(CARGO) bench -p vpn-proto --bench aead
	$(CARGO) bench -p vpn-device --bench allowedips
	$(CARGO) build --release -p vpn-cli
	bash netns-tests/bench.sh $${CARGO_TARGET_DIR:-target}/release/vpn

# A hub of HUB_PEERS (100 000) peers with 10 allowed IPs each, HUB_CLIENTS (10 000) of them
# handshaking (tests/benches/hub.rs; figures in docs/performance.md).
bench-hub:
	$(CARGO) bench -p vpn-tests --bench hub

fuzz-smoke:
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash fuzz/smoke.sh

clean:
	$(CARGO) clean

# Connected sockets (issue 6) in network namespaces (root): the checks, then the benchmark.
netns-connected:
	$(CARGO) build --release -p vpn-cli
	bash netns-tests/connected/test.sh $${CARGO_TARGET_DIR:-target}/release/vpn
	bash netns-tests/connected/bench.sh $${CARGO_TARGET_DIR:-target}/release/vpn
