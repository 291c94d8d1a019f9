#!/usr/bin/env bash
# Stages the image's files for Containerfile: OUT/rootfs (the accel binary at
# /usr/bin/accel, the loader and every shared library `ldd` names for it at the paths
# it asks for, the CA bundle for https to Keystone, Nova and Glance, minimal
# /etc/passwd, /etc/group, /etc/nsswitch.conf, a /tmp) and OUT/state (/var/lib/accel,
# owned in the image by the user the server runs as). One script for both ways to the
# image: scripts/package.sh runs it on the binary it packaged, Containerfile's `build`
# stage on the binary it compiled.
#
# Usage: scripts/image-rootfs.sh BIN OUT       (OUT is emptied first)
# Needs: ldd (libc-bin), and the CA bundle of Debian's ca-certificates where present.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 BIN OUT" >&2; exit 2; }
BIN="$1"
OUT="$2"
[[ -x "$BIN" ]] || { echo "image-rootfs.sh: no binary at $BIN" >&2; exit 1; }
rm -rf "$OUT"
RFS="$OUT/rootfs"
mkdir -p "$RFS/usr/bin" "$RFS/etc" "$RFS/var/lib" "$OUT/state/accel"
mkdir -m 1777 "$RFS/tmp"
install -m 0755 "$BIN" "$RFS/usr/bin/accel"
# The loader and every library it resolves, at the paths the binary asks for.
ldd "$RFS/usr/bin/accel" | awk '/=> \//{print $3} /^[[:space:]]*\/[^ ]+ \(/{print $1}' | while read -r lib; do
  mkdir -p "$RFS$(dirname "$lib")"
  cp -L "$lib" "$RFS$lib"
done
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$RFS/etc/ssl/certs/ca-certificates.crt"
else
  echo "warning: no /etc/ssl/certs/ca-certificates.crt (Debian package ca-certificates): the image has no CA bundle" >&2
fi
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\naccel:x:65532:65532:accel:/var/lib/accel:/usr/sbin/nologin\n' > "$RFS/etc/passwd"
printf 'root:x:0:\naccel:x:65532:\n' > "$RFS/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$RFS/etc/nsswitch.conf"
