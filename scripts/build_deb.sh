#!/usr/bin/env bash
# Build the Debian package target/debian/sluice_VERSION_amd64.deb (cargo-deb):
# the release binary, the systemd units of dist/systemd, man pages and shell
# completions generated from the clap definitions, example configs, docs.
# Not the benchmark binary. Needs cargo-deb (`cargo install cargo-deb`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p sluice-cli
rm -rf target/release/assets
target/release/sluice assets target/release/assets
cargo deb -p sluice-cli --no-build
