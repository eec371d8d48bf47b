#!/usr/bin/env bash
# Install the package built by build_deb.sh (root), check that everything
# is in place (the users and groups, /etc/sluice, the guard's way to a
# bridge's socket, the fail2ban action as a conffile, the shield started
# from its shipped config on a veth as its unit runs it: user sluice, the
# unit's capabilities only) and that systemd accepts the units, then purge
# it and check that the users and groups went too. First, that a login user
# `sluice` makes the install fail, cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
deb=$(ls target/debian/sluice_*_amd64.deb | head -n 1)
fail() { echo "check_deb: $*" >&2; exit 1; }
# An earlier package's purge left its `sluice` user (it kept users); this
# one's postinst would take it over and its purge would not remove it.
if [ "$(getent passwd sluice | cut -d: -f5)" = "sluice packet filter" ]; then
  userdel sluice
  getent group sluice >/dev/null && groupdel sluice
fi
for name in sluice sluice-guard; do
  ! getent passwd "$name" >/dev/null || fail "a user $name exists before the install; check on a machine without one"
done
echo "== refusing a non-system sluice user"
useradd --create-home --shell /bin/bash sluice
out=$(dpkg -i "$deb" 2>&1) && {
  dpkg --purge sluice >/dev/null 2>&1; userdel -r sluice 2>/dev/null; fail "installed over a login user sluice: $out"
}
userdel -r sluice 2>/dev/null
echo "$out" | grep -q 'refusing to install: the user `sluice` exists and is not a system account' \
  || fail "no clear refusal of a login user sluice: $out"
case "$(dpkg-query -W -f='${Status}' sluice 2>/dev/null)" in
  *" not-installed" | "") ;;
  *) fail "the refused package is in dpkg's database: $(dpkg-query -W -f='${Status}' sluice)" ;;
esac
[ ! -e /usr/bin/sluice ] || fail "the refused package left /usr/bin/sluice"
echo "== installing $deb"
# --path-include: container images often exclude /usr/share/man from installs.
dpkg -i --path-include='/usr/share/man/*' "$deb"
trap 'dpkg --purge sluice >/dev/null 2>&1 || true' EXIT
sluice --version | grep -q '^sluice ' || fail "sluice --version"
for page in sluice sluice-bridge sluice-shield sluice-http-guard sluice-filter sluice-ctl; do
  man -w "$page" >/dev/null || fail "no man page $page"
done
for f in /usr/share/bash-completion/completions/sluice /usr/share/zsh/vendor-completions/_sluice \
         /usr/share/fish/vendor_completions.d/sluice.fish /lib/systemd/system/sluice-bridge@.service \
         /lib/systemd/system/sluice-guard@.service /lib/systemd/system/sluice-shield@.service \
         /usr/share/doc/sluice/examples/edge.toml /usr/share/doc/sluice/examples/host.toml \
         /usr/share/doc/sluice/examples/host.rules /etc/fail2ban/action.d/sluice.conf; do
  [ -s "$f" ] || fail "missing $f"
done
# fail2ban's action is a conffile: an admin's edits survive an upgrade.
dpkg-query -W -f='${Conffiles}\n' sluice | grep -q '^ /etc/fail2ban/action.d/sluice.conf ' \
  || fail "/etc/fail2ban/action.d/sluice.conf is not a conffile: $(dpkg-query -W -f='${Conffiles}' sluice)"
cmp -s /etc/fail2ban/action.d/sluice.conf dist/fail2ban/action.d/sluice.conf \
  || fail "/etc/fail2ban/action.d/sluice.conf is not dist/fail2ban/action.d/sluice.conf"
for user in sluice sluice-guard; do
  entry=$(getent passwd "$user") || fail "postinst made no $user user"
  [ "$(echo "$entry" | cut -d: -f7)" = /usr/sbin/nologin ] || fail "the $user user can log in"
  [ "$(echo "$entry" | cut -d: -f3)" -lt 1000 ] || fail "$user is not a system user: $entry"
  [ "$(id -gn "$user")" = "$user" ] || fail "$user's primary group is $(id -gn "$user")"
done
for group in sluice sluice-guard sluice-ctl; do
  getent group "$group" >/dev/null || fail "postinst made no $group group"
done
# The guard reads /etc/sluice and reaches a bridge's socket opened to
# sluice-ctl; the bridge's user gives its socket to sluice-ctl and is not
# in the guard's group.
groups() { id -Gn "$1" | tr ' ' '\n' | sort | tr '\n' ' '; }
[ "$(groups sluice-guard)" = "sluice sluice-ctl sluice-guard " ] || fail "sluice-guard's groups: $(groups sluice-guard)"
[ "$(groups sluice)" = "sluice sluice-ctl " ] || fail "sluice's groups: $(groups sluice)"
[ "$(stat -c '%a %U:%G' /etc/sluice)" = "750 root:sluice" ] || fail "/etc/sluice is $(stat -c '%a %U:%G' /etc/sluice)"
grep -q '^User=sluice$' /lib/systemd/system/sluice-bridge@.service || fail "the bridge does not run as sluice"
grep -q '^User=sluice-guard$' /lib/systemd/system/sluice-guard@.service || fail "the guard does not run as sluice-guard"
grep -q '^User=sluice$' /lib/systemd/system/sluice-shield@.service || fail "the shield does not run as sluice"
# The shield holds CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON, each way
# (ambient and bounding), on one line each, and nothing else: no
# CAP_SYS_ADMIN, no raw sockets.
shield_unit=/lib/systemd/system/sluice-shield@.service
for key in AmbientCapabilities CapabilityBoundingSet; do
  [ "$(grep -c "^$key=" "$shield_unit")" = 1 ] || fail "sluice-shield@.service: not one $key= line"
  caps=$(sed -n "s/^$key=//p" "$shield_unit" | tr ' ' '\n' | sort | tr '\n' ' ')
  [ "$caps" = "CAP_BPF CAP_NET_ADMIN CAP_PERFMON " ] || fail "sluice-shield@.service: $key=$caps"
done
! grep -v '^#' "$shield_unit" | grep -q CAP_SYS_ADMIN || fail "sluice-shield@.service grants CAP_SYS_ADMIN"
grep -q '^NoNewPrivileges=yes$' "$shield_unit" || fail "sluice-shield@.service: no NoNewPrivileges=yes"
grep -q '^Restart=on-failure$' "$shield_unit" || fail "sluice-shield@.service: no Restart=on-failure"
for unit in sluice-bridge@ sluice-guard@ sluice-shield@; do
  for key in MemoryMax TasksMax; do
    grep -Eq "^$key=[0-9]+[KMG]?$" "/lib/systemd/system/$unit.service" || fail "$unit.service has no $key="
  done
done
# The guard's user reaches a control socket that the bridge's user opens to
# sluice-ctl (for adds only), where /proc hides other users' processes (the units'
# ProtectProc=invisible), and nobody else does. The guard's own socket
# stands in for the bridge's (the same code) so no interfaces are needed.
echo "== sluice-guard reaches a socket that sluice opens to sluice-ctl"
sock_dir=$(mktemp -d); chown sluice "$sock_dir"; chmod 0755 "$sock_dir"
unshare --mount --propagation private sh -c "mount -t proc -o hidepid=invisible proc /proc && exec setpriv \
  --reuid sluice --regid sluice --init-groups sluice http-guard --listen 127.0.0.1:0 --upstream 127.0.0.1:9 \
  --control $sock_dir/ctl.sock --control-add-group sluice-ctl" >"$sock_dir/log" 2>&1 &
server=$!
for _ in $(seq 100); do [ -S "$sock_dir/ctl.sock" ] && break; sleep 0.1; done
[ "$(stat -c '%a %U:%G' "$sock_dir/ctl.sock" 2>/dev/null)" = "660 sluice:sluice-ctl" ] \
  || { kill "$server"; fail "no socket 0660 sluice:sluice-ctl: $(cat "$sock_dir/log")"; }
setpriv --reuid sluice-guard --regid sluice-guard --init-groups sluice ctl --socket "$sock_dir/ctl.sock" blocks \
  || { kill "$server"; fail "sluice-guard was refused"; }
# The add group's role: what a forwarder needs, not lifting blocks.
out=$(setpriv --reuid sluice-guard --regid sluice-guard --init-groups sluice ctl --socket "$sock_dir/ctl.sock" \
  unblock 192.0.2.1 2>&1) && { kill "$server"; fail "sluice-guard lifted a block through the add group"; }
echo "$out" | grep -q 'control-add-group' || { kill "$server"; fail "the refusal does not name the role: $out"; }
setpriv --reuid nobody --regid nogroup --clear-groups sluice ctl --socket "$sock_dir/ctl.sock" blocks 2>/dev/null \
  && { kill "$server"; fail "nobody got in"; }
kill "$server"; wait "$server" 2>/dev/null || true; rm -rf "$sock_dir"
# A guard config in the shipped place is readable by the guard's user.
cp /usr/share/doc/sluice/examples/site.toml /etc/sluice/check-site.toml
setpriv --reuid sluice-guard --regid sluice-guard --init-groups cat /etc/sluice/check-site.toml >/dev/null \
  || fail "sluice-guard cannot read /etc/sluice/check-site.toml"
setpriv --reuid nobody --regid nogroup --clear-groups cat /etc/sluice/check-site.toml >/dev/null 2>&1 \
  && fail "another user reads /etc/sluice/check-site.toml"
rm /etc/sluice/check-site.toml
[ ! -e /usr/bin/sluice-bench ] || fail "the benchmark binary is in the package"
# The example config is valid: it fails only on the missing interfaces.
out=$(sluice bridge --config /usr/share/doc/sluice/examples/edge.toml \
  --rules /usr/share/doc/sluice/examples/edge.rules --iface nope-a0 --iface nope-b0 --io afpacket 2>&1) && fail "bridge started: $out"
echo "$out" | grep -q 'nope-a0' || fail "the example config is not accepted: $out"
# The shield's likewise: its rules are loaded before any interface is
# looked at, so failing on the missing interface means the kernel took them.
out=$(sluice shield --config /usr/share/doc/sluice/examples/host.toml \
  --rules /usr/share/doc/sluice/examples/host.rules --iface nope-h0 2>&1) && fail "shield started: $out"
echo "$out" | grep -q 'nope-h0' || fail "the shield's example config is not accepted: $out"
# And as its unit runs it, on an interface named as host.toml names it
# (eth0, a veth in a namespace of its own): the examples copied to
# /etc/sluice as docs/service.md says, /run/sluice made as the unit's
# RuntimeDirectory= makes it, user sluice, only the unit's capabilities
# (ambient, bounding), no new privileges, /proc as ProtectProc=invisible
# and ProcSubset=pid leave it. Attached (xdp on eth0), its control socket
# taking a ban into host.rules' f2b set as fail2ban's action sends it,
# until SIGTERM: exit 0, detached, the socket gone.
echo "== sluice shield from /etc/sluice/host.toml as sluice-shield@host runs it"
ns="sluice-check-$$"
ip netns add "$ns"
trap 'ip netns del "$ns" 2>/dev/null; dpkg --purge sluice >/dev/null 2>&1 || true' EXIT
ip -n "$ns" link add eth0 type veth peer name eth0p
ip -n "$ns" link set dev eth0 up
ip -n "$ns" link set dev eth0p up
cp /usr/share/doc/sluice/examples/host.toml /usr/share/doc/sluice/examples/host.rules /etc/sluice/
[ ! -e /run/sluice ] || fail "/run/sluice exists before the check"
install -d -o sluice -g sluice -m 0755 /run/sluice
caps=$(sed -n 's/^AmbientCapabilities=//p' "$shield_unit" | tr 'A-Z' 'a-z' | sed 's/cap_/+/g; s/ /,/g')
log=$(mktemp)
ip netns exec "$ns" unshare --mount --propagation private sh -c "mount -t proc -o hidepid=invisible,subset=pid proc /proc \
  && exec setpriv --reuid sluice --regid sluice --init-groups --no-new-privs --inh-caps=-all,$caps \
  --ambient-caps=$caps --bounding-set=-all,$caps sluice shield --config /etc/sluice/host.toml" >"$log" 2>&1 &
shield=$!
for _ in $(seq 100); do grep -q 'shield on eth0 ' "$log" && break; kill -0 "$shield" 2>/dev/null || break; sleep 0.1; done
grep -q 'shield on eth0 ' "$log" || { kill "$shield" 2>/dev/null; fail "the shield did not come up: $(cat "$log")"; }
ip -n "$ns" link show dev eth0 | grep -q xdp || { kill "$shield"; fail "the shield is on, eth0 carries no XDP: $(cat "$log")"; }
[ "$(stat -c '%a %U' /run/sluice/host.sock 2>/dev/null)" = "600 sluice" ] \
  || { kill "$shield"; fail "no control socket 0600 sluice at /run/sluice/host.sock: $(cat "$log")"; }
sluice ctl --socket /run/sluice/host.sock add f2b 192.0.2.7 timeout 600 >/dev/null \
  && sluice ctl --socket /run/sluice/host.sock list f2b | grep -q '^192.0.2.7/32 ' \
  || { kill "$shield"; fail "the shield's control socket did not take a ban into f2b: $(cat "$log")"; }
kill -TERM "$shield"
code=0; wait "$shield" || code=$?
[ "$code" = 0 ] || fail "the shield exited $code on SIGTERM: $(cat "$log")"
! ip -n "$ns" link show dev eth0 | grep -q xdp || fail "eth0 still carries XDP after the shield stopped"
grep -q 'drop saddr @bogons' "$log" || fail "no summary of host.rules: $(cat "$log")"
[ ! -e /run/sluice/host.sock ] || fail "the shield left its control socket"
ip netns del "$ns"
rm -rf /run/sluice
rm -f /etc/sluice/host.toml /etc/sluice/host.rules "$log"
trap 'dpkg --purge sluice >/dev/null 2>&1 || true' EXIT
echo "== systemd-analyze verify dist/systemd/*.service"
systemd-analyze verify dist/systemd/*.service
for unit in sluice-bridge@edge.service sluice-guard@site.service sluice-shield@host.service; do
  tmpl=dist/systemd/${unit%%@*}@.service
  dir=$(mktemp -d); cp "$tmpl" "$dir/$unit"
  systemd-analyze security --offline=yes "$dir/$unit" 2>/dev/null | tail -n 1
  rm -rf "$dir"
done
dpkg --purge sluice
trap - EXIT
[ ! -e /usr/bin/sluice ] || fail "purge left /usr/bin/sluice"
[ ! -e /etc/sluice ] || fail "purge left /etc/sluice"
[ ! -e /etc/fail2ban/action.d/sluice.conf ] || fail "purge left /etc/fail2ban/action.d/sluice.conf"
for name in sluice sluice-guard; do
  ! getent passwd "$name" >/dev/null || fail "purge left the user $name"
done
for name in sluice sluice-guard sluice-ctl; do
  ! getent group "$name" >/dev/null || fail "purge left the group $name"
done
echo "check_deb: ok"
