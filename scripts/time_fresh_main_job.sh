#!/usr/bin/env bash
# Times the README's main command (bash scripts/setup.sh && bash scripts/chat.sh) on a fresh
# Debian 12: a minbase debootstrap of bookworm in a scratch folder, chrooted (root only; needs
# debootstrap). The machine's own CA certificates are copied in (a machine of this workplace
# trusts its egress proxy). Prints rc, the set-up seconds and the total seconds.
#   sudo bash scripts/time_fresh_main_job.sh [COMMIT] [ROOT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
COMMIT=${1:-HEAD}
R=${2:-/tmp/mimo-fresh-debian}
command -v debootstrap >/dev/null || { echo "debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
rm -rf "$R"
debootstrap --variant=minbase bookworm "$R" http://deb.debian.org/debian >/dev/null
cleanup() { for d in dev/pts dev sys proc; do umount "$R/$d" 2>/dev/null || true; done; }
trap cleanup EXIT
for d in proc sys dev dev/pts; do mount --bind "/$d" "$R/$d"; done
cp /etc/resolv.conf "$R/etc/resolv.conf"
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  mkdir -p "$R/usr/local/share/ca-certificates" "$R/etc/ssl/certs"
  cp /usr/local/share/ca-certificates/*.crt "$R/usr/local/share/ca-certificates/"
  cat /etc/ssl/certs/ca-certificates.crt > "$R/etc/ssl/certs/ca-certificates.crt"
fi
git clone -q . "$R/root/mimo"
git -C "$R/root/mimo" checkout -q "$(git rev-parse "$COMMIT")"
chroot "$R" /bin/bash -c '
  cd /root/mimo
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
         NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
  t0=$(date +%s.%N)
  bash scripts/setup.sh > /root/setup.log 2>&1
  t1=$(date +%s.%N)
  bash scripts/chat.sh > /root/chat.log 2>&1; rc=$?
  t2=$(date +%s.%N)
  python3 -c "print(f\"rc=$rc setup_s={$t1 - $t0:.0f} total_s={$t2 - $t0:.0f}\")"'
