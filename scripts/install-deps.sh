#!/usr/bin/env bash
# Install the Debian packages named as arguments that are not installed yet, without
# their recommends and without starting any service they ship: policy-rc.d answers
# 101 ("action forbidden") to invoke-rc.d and deb-systemd-invoke during the install,
# and the units the new packages enabled are disabled again (nginx on :80 and
# prometheus on :9090 are test tools here, not services of this machine).
# Quiet when nothing is missing; uses sudo when not root. Fails loudly otherwise.
set -euo pipefail
missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "embedscope: installing missing packages: ${missing[*]}" >&2
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# embedscope: no service starts while its packages install\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    trap '$SUDO rm -f "$policy"' EXIT
fi
# Another install running at the same time (a second make, unattended-upgrades) holds dpkg's lock:
# wait for it rather than fail.
lock=(-o DPkg::Lock::Timeout=600)
$SUDO apt-get "${lock[@]}" update -qq
$SUDO apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Units the new packages enabled (only where systemd runs; a container has none).
if [ -d /run/systemd/system ]; then
    for p in "${missing[@]}"; do
        dpkg-query -L "$p" 2>/dev/null | grep -E '^/(usr/)?lib/systemd/system/[^/]+\.(service|socket|timer)$' |
            while read -r unit; do
                unit=${unit##*/}
                [ "$(systemctl is-enabled "$unit" 2>/dev/null)" = enabled ] && $SUDO systemctl disable --quiet "$unit"
            done || true
    done
fi
