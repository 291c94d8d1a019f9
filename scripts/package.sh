#!/usr/bin/env bash
# Builds the release binary, the Debian package target/debian/accel_<version>_<arch>.deb
# and the image localhost/accel:<version> from that binary (Containerfile's `staged`
# target; also saved as an image archive next to the package, for nodes that import
# images instead of pulling them), and checks both:
# the package's contents, its binary run from a scratch root (`dpkg -x`), its units
# through `systemd-analyze verify`, its example configurations loaded by that binary;
# the image's binary run from the mounted image (`chroot`, as `podman run` is not
# available everywhere accel is built).
#
# The package is staged by hand and built with `dpkg-deb` rather than cargo-deb: the
# tree is a few files (binary, two units, two configurations, maintainer scripts in
# packaging/debian), dpkg-deb and dpkg-shlibdeps come with every Debian system, and
# no cargo plugin has to be built first or its metadata kept in a crate's manifest.
#
# Usage: scripts/package.sh            build everything
# Env:   ACCEL_BIN=PATH                package this binary instead of building one (the
#                                      test command packages its debug build this way:
#                                      the package is checked, not shipped)
#        SKIP_IMAGE=1                  the package only (no podman)
# Needs: dpkg-deb, podman (Debian packages dpkg-dev and podman); systemd-analyze
#        when present. Takes 10-20 minutes for the release build on a small machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
export RUST_BACKTRACE=0

say() { printf '== %s\n' "$*"; }
die() { printf 'package.sh: %s\n' "$*" >&2; exit 1; }

if [[ -n "${ACCEL_BIN:-}" ]]; then
  BIN="$ACCEL_BIN"
else
  say "cargo build --release -p accel-cli"
  # The commit `accel --version` and accel_build_info{commit} name comes from the
  # CLI's build script (git, or ACCEL_GIT_COMMIT for a tree without git).
  cargo build --release --locked -p accel-cli
  BIN="$TARGET/release/accel"
fi
[[ -x "$BIN" ]] || die "no binary at $BIN"
# `accel 0.1.0 (commit 3cc28f7f1d49)`: the package is named by the release alone.
BUILT="$("$BIN" --version)"
[[ "$BUILT" =~ ^accel\ ([0-9]+\.[0-9]+\.[0-9]+[^ ]*)\ \(commit\ [^\)]+\)$ ]] \
  || die "cannot read the version from '$BIN --version': '$BUILT'"
VERSION="${BASH_REMATCH[1]}"
ARCH="$(dpkg --print-architecture)"
OUT="$TARGET/debian"
DEB="$OUT/accel_${VERSION}_${ARCH}.deb"
say "accel $VERSION ($ARCH), binary $(du -h "$BIN" | cut -f1)"

# The man page accel(1): the binary's own help, every subcommand's, in one page, so it
# never disagrees with the flags it documents; plus the files and the operating notes.
roff_escape() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }
subcommands() { # the subcommands a help text lists, without `help`
  awk '/^Commands:/{on=1; next} on && /^[^ ]/{on=0} on && $1 != "help" && NF {print $1}'
}
man_section() { # man_section BIN WORD...: one subcommand's help as a subsection
  local bin="$1"; shift
  local text; text="$("$bin" "$@" --help)"
  printf '.SS "accel %s"\n.nf\n' "$*"
  roff_escape <<<"$text"
  printf '.fi\n'
  local sub
  for sub in $(subcommands <<<"$text"); do man_section "$bin" "$@" "$sub"; done
}
manpage() {
  local bin="$1" date; date="$(date -u +%Y-%m-%d)"
  cat <<EOF_MAN
.TH ACCEL 1 "$date" "accel $VERSION" "User Commands"
.SH NAME
accel \\- accelerator management for clouds: Placement and Cyborg v2 compatible APIs, node agent
.SH SYNOPSIS
.B accel
.I COMMAND
.RI [ OPTIONS ]
.SH DESCRIPTION
.B accel serve
runs the OpenStack Placement compatible API (1.0\\(en1.39) and the Cyborg v2 compatible
accelerator API;
.B accel agent
discovers a compute node's accelerators, reports them, programs FPGAs for binds and
serves Kubernetes device plugins; the other commands are clients of the two APIs.
Options come from flags, then environment variables, then the TOML file given by
.BR \\-\\-config ,
then defaults; unknown keys in the file are an error.
.SH COMMANDS
EOF_MAN
  man_section "$bin" serve
  local top; top="$("$bin" --help)"
  local sub
  for sub in $(subcommands <<<"$top"); do
    [[ "$sub" == serve ]] || man_section "$bin" "$sub"
  done
  cat <<'EOF_MAN'
.SH FILES
.TP
.I /etc/accel/serve.toml
configuration of the accel-serve unit (Keystone, PostgreSQL, policy defaults)
.TP
.I /etc/accel/agent.toml
configuration of the accel-agent unit
.TP
.I /usr/sbin/accel-nvme-clean
wipes an NVMe drive passed through to VMs (bound to vfio-pci) by its PCI address, for a
[[cleaning]] rule; its header says how (README: "Devices cleaned between tenants")
.TP
.I /usr/share/accel/
Prometheus alert rules, Grafana dashboard, Kubernetes manifests
.SH ENVIRONMENT
.TP
.B ACCEL_LOG
log filter in tracing's syntax (default info), e.g. info,accel::access=off
.TP
.B NO_COLOR
no colour codes in the log
.SH SEE ALSO
.BR systemctl (1),
.I /usr/share/doc/accel/README.md
("Deployment", "Operating accel")
EOF_MAN
}

# ---------------------------------------------------------------- Debian package
STAGE="$OUT/stage"
rm -rf "$STAGE"
mkdir -p "$STAGE/DEBIAN"
install -D -m 0755 "$BIN" "$STAGE/usr/bin/accel"
# Debian ships stripped binaries; the release profile already strips symbols (a no-op
# then), a debug build loses its debug info here (103 MB to 36 MB).
strip --strip-all "$STAGE/usr/bin/accel"
for unit in accel-serve accel-agent; do
  install -D -m 0644 "packaging/systemd/$unit.service" "$STAGE/usr/lib/systemd/system/$unit.service"
done
# Passwords live in these files: the postinst gives serve.toml to the accel group.
install -D -m 0640 packaging/etc/serve.toml "$STAGE/etc/accel/serve.toml"
install -D -m 0600 packaging/etc/agent.toml "$STAGE/etc/accel/agent.toml"
install -D -m 0644 README.md "$STAGE/usr/share/doc/accel/README.md"
# The [[cleaning]] helper of docs/cleaning.md's NVMe example, on the agent unit's PATH.
install -D -m 0755 packaging/sbin/accel-nvme-clean "$STAGE/usr/sbin/accel-nvme-clean"
mkdir -p "$STAGE/usr/share/man/man1"
manpage "$BIN" | gzip -9n > "$STAGE/usr/share/man/man1/accel.1.gz"
chmod 0644 "$STAGE/usr/share/man/man1/accel.1.gz"
install -D -m 0644 packaging/debian/copyright "$STAGE/usr/share/doc/accel/copyright"
install -D -m 0644 packaging/debian/lintian-overrides "$STAGE/usr/share/lintian/overrides/accel"
# A native package's changelog: this build.
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
printf 'accel (%s) unstable; urgency=medium\n\n  * Built by scripts/package.sh from commit %s.\n\n -- accel maintainers <accel@example.org>  %s\n' \
  "$VERSION" "$commit" "$(date -R)" | gzip -9n > "$STAGE/usr/share/doc/accel/changelog.gz"
chmod 0644 "$STAGE/usr/share/doc/accel/changelog.gz"
install -D -m 0644 deploy/prometheus/accel-rules.yml "$STAGE/usr/share/accel/prometheus/accel-rules.yml"
install -D -m 0644 deploy/prometheus/prometheus.yml "$STAGE/usr/share/accel/prometheus/prometheus.yml"
install -D -m 0644 deploy/grafana/accel-dashboard.json "$STAGE/usr/share/accel/grafana/accel-dashboard.json"
# The kustomize tree as it is (base, components, overlays).
find deploy/kubernetes -type f \( -name '*.yaml' -o -name '*.toml' \) | while read -r f; do
  install -D -m 0644 "$f" "$STAGE/usr/share/accel/kubernetes/${f#deploy/kubernetes/}"
done
for script in postinst prerm postrm; do
  install -m 0755 "packaging/debian/$script" "$STAGE/DEBIAN/$script"
done
printf '/etc/accel/serve.toml\n/etc/accel/agent.toml\n' > "$STAGE/DEBIAN/conffiles"

# The shared-library dependencies, as dpkg-shlibdeps computes them for a source
# package (it wants a debian/control to sit next to it).
SHLIBS="libc6, libgcc-s1"
if command -v dpkg-shlibdeps >/dev/null; then
  work="$(mktemp -d)"
  mkdir -p "$work/debian"
  printf 'Source: accel\n\nPackage: accel\nArchitecture: any\n' > "$work/debian/control"
  line="$(cd "$work" && { dpkg-shlibdeps -O -e"$STAGE/usr/bin/accel" 2>/dev/null || true; })"
  rm -rf "$work"
  [[ "$line" == shlibs:Depends=* ]] && SHLIBS="${line#shlibs:Depends=}"
fi
SIZE="$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)"
sed -e "s/@VERSION@/$VERSION/" -e "s/@ARCH@/$ARCH/" -e "s/@SIZE@/$SIZE/" \
    -e "s/@SHLIBS@/$SHLIBS/" packaging/debian/control.in > "$STAGE/DEBIAN/control"
(cd "$STAGE" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z \
   | xargs -0 md5sum) > "$STAGE/DEBIAN/md5sums"
chmod 0644 "$STAGE/DEBIAN/control" "$STAGE/DEBIAN/conffiles" "$STAGE/DEBIAN/md5sums"
say "dpkg-deb --build $DEB"
dpkg-deb --root-owner-group -Zxz --build "$STAGE" "$DEB" >/dev/null
dpkg-deb --info "$DEB" | sed -n '/Package:/,$p'
dpkg-deb --contents "$DEB"
if command -v lintian >/dev/null; then
  say "lintian"
  tags="$(lintian --tag-display-limit 0 "$DEB" 2>&1 || true)"
  grep -v '^running with root privileges' <<<"$tags" || echo "no tags"
fi

# Install into a scratch root and run what was installed.
say "dpkg -x into a scratch root"
SCRATCH="$OUT/scratch-root"
rm -rf "$SCRATCH"
dpkg -x "$DEB" "$SCRATCH"
got="$("$SCRATCH/usr/bin/accel" --version)"
[[ "$got" == "$BUILT" ]] || die "the installed binary says '$got', the built one '$BUILT'"
echo "$SCRATCH/usr/bin/accel --version: $got"
"$SCRATCH/usr/bin/accel" serve --help >/dev/null
"$SCRATCH/usr/bin/accel" agent --help >/dev/null
# The man page renders without a groff warning and documents every subcommand.
if command -v groff >/dev/null; then
  warnings="$(zcat "$SCRATCH/usr/share/man/man1/accel.1.gz" | groff -man -ww -z 2>&1)"
  [[ -z "$warnings" ]] || die "accel.1 has groff warnings: $warnings"
fi
for sub in serve agent "agent check" arq boot unboot "device-profile"; do
  zgrep -q "^\.SS \"accel $sub\"" "$SCRATCH/usr/share/man/man1/accel.1.gz" || die "accel.1 lacks accel $sub"
done
echo "man page accel(1): $(zcat "$SCRATCH/usr/share/man/man1/accel.1.gz" | grep -c '^\.SS') command sections"
[[ "$(stat -c %a "$SCRATCH/etc/accel/serve.toml")" == 640 ]] || die "serve.toml is not mode 0640"
[[ "$(stat -c %a "$SCRATCH/etc/accel/agent.toml")" == 600 ]] || die "agent.toml is not mode 0600"
[[ -x "$SCRATCH/usr/sbin/accel-nvme-clean" ]] || die "accel-nvme-clean is not installed executable"
sh -n "$SCRATCH/usr/sbin/accel-nvme-clean" || die "accel-nvme-clean does not parse"

if command -v systemd-analyze >/dev/null; then
  say "systemd-analyze verify (the package's units, its binary)"
  units="$(mktemp -d)"
  for unit in accel-serve accel-agent; do
    sed "s|/usr/bin/accel|$SCRATCH/usr/bin/accel|" \
      "$SCRATCH/usr/lib/systemd/system/$unit.service" > "$units/$unit.service"
  done
  said="$(systemd-analyze verify "$units/accel-serve.service" "$units/accel-agent.service" 2>&1)" \
    || die "systemd-analyze verify failed: $said"
  [[ -z "$said" ]] || die "systemd-analyze verify warns: $said"
  rm -rf "$units"
  echo "clean"
fi

say "the packaged example configurations load"
scripts/check-deploy.sh --configs-only "$SCRATCH/usr/bin/accel" "$SCRATCH/etc/accel"

# ------------------------------------------------------------------------- image
if [[ "${SKIP_IMAGE:-}" == 1 ]]; then
  echo "package: $DEB (image skipped)"
  exit 0
fi
command -v podman >/dev/null || die "podman is needed for the image (apt-get install podman), or SKIP_IMAGE=1"
CTX="$TARGET/oci"
# The image's files (scripts/image-rootfs.sh, which Containerfile's from-source
# stage runs too): the packaged binary, its libraries, CA bundle, users, state dir.
scripts/image-rootfs.sh "$SCRATCH/usr/bin/accel" "$CTX"
cp Containerfile "$CTX/Containerfile"
IMAGE="localhost/accel:$VERSION"
say "podman build -t $IMAGE"
old_id="$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
# No intermediate images: the recipe is a few COPY steps, cheap to redo.
# --target staged: the files from this context; the from-source stage is not run.
podman build --quiet --layers=false --target staged --build-arg "VERSION=$VERSION" \
  -t "$IMAGE" -f "$CTX/Containerfile" "$CTX"
new_id="$(podman image inspect --format '{{.Id}}' "$IMAGE")"
# The previous build of this tag, now untagged.
if [[ -n "$old_id" && "$old_id" != "$new_id" ]]; then
  podman rmi "$old_id" >/dev/null 2>&1 || true
fi

say "run the image's binary from the mounted image"
MNT="$(podman image mount "$IMAGE")"
trap 'podman image unmount "$IMAGE" >/dev/null 2>&1 || true' EXIT
got="$(chroot "$MNT" /usr/bin/accel --version)"
[[ "$got" == "$BUILT" ]] || die "the image's binary says '$got', the built one '$BUILT'"
echo "chroot $MNT /usr/bin/accel --version: $got"
chroot --userspec=65532:65532 "$MNT" /usr/bin/accel serve --help >/dev/null
[[ "$(stat -c %u:%g "$MNT/var/lib/accel")" == 65532:65532 ]] || die "the image's /var/lib/accel is not the server user's"
cmp "$MNT/usr/bin/accel" "$SCRATCH/usr/bin/accel" || die "the image and the package hold different binaries"
podman image unmount "$IMAGE" >/dev/null
trap - EXIT
podman image inspect "$IMAGE" --format 'entrypoint {{.Config.Entrypoint}} user {{.Config.User}} size {{.Size}}'

ARCHIVE="$OUT/accel_${VERSION}_${ARCH}.image.tar"
rm -f "$ARCHIVE"
podman save --quiet --format docker-archive -o "$ARCHIVE" "$IMAGE"
echo "package: $DEB ($(du -h "$DEB" | cut -f1))"
echo "image:   $IMAGE (also $ARCHIVE, $(du -h "$ARCHIVE" | cut -f1))"
