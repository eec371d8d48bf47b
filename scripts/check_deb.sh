#!/usr/bin/env bash
# Install the package built by build_deb.sh (root), check that everything
# is in place and that systemd accepts the units, then purge it.
set -euo pipefail
cd "$(dirname "$0")/.."
deb=$(ls target/debian/sluice_*_amd64.deb | head -n 1)
echo "== installing $deb"
# --path-include: container images often exclude /usr/share/man from installs.
dpkg -i --path-include='/usr/share/man/*' "$deb"
trap 'dpkg --purge sluice >/dev/null 2>&1 || true' EXIT
fail() { echo "check_deb: $*" >&2; exit 1; }
sluice --version | grep -q '^sluice ' || fail "sluice --version"
for page in sluice sluice-bridge sluice-http-guard sluice-filter sluice-ctl; do
  man -w "$page" >/dev/null || fail "no man page $page"
done
for f in /usr/share/bash-completion/completions/sluice /usr/share/zsh/vendor-completions/_sluice \
         /usr/share/fish/vendor_completions.d/sluice.fish /lib/systemd/system/sluice-bridge@.service \
         /lib/systemd/system/sluice-guard@.service /usr/share/doc/sluice/examples/edge.toml; do
  [ -s "$f" ] || fail "missing $f"
done
getent passwd sluice >/dev/null || fail "postinst made no sluice user"
[ "$(getent passwd sluice | cut -d: -f7)" = /usr/sbin/nologin ] || fail "the sluice user can log in"
[ ! -e /usr/bin/sluice-bench ] || fail "the benchmark binary is in the package"
# The example config is valid: it fails only on the missing interfaces.
out=$(sluice bridge --config /usr/share/doc/sluice/examples/edge.toml \
  --rules /usr/share/doc/sluice/examples/edge.rules --iface nope-a0 --iface nope-b0 --io afpacket 2>&1) && fail "bridge started: $out"
echo "$out" | grep -q 'nope-a0' || fail "the example config is not accepted: $out"
echo "== systemd-analyze verify dist/systemd/*.service"
systemd-analyze verify dist/systemd/*.service
for unit in sluice-bridge@edge.service sluice-guard@site.service; do
  tmpl=dist/systemd/${unit%%@*}@.service
  dir=$(mktemp -d); cp "$tmpl" "$dir/$unit"
  systemd-analyze security --offline=yes "$dir/$unit" 2>/dev/null | tail -n 1
  rm -rf "$dir"
done
dpkg --purge sluice
trap - EXIT
[ ! -e /usr/bin/sluice ] || fail "purge left /usr/bin/sluice"
[ ! -e /etc/sluice ] || fail "purge left /etc/sluice"
echo "check_deb: ok"
