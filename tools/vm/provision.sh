#!/usr/bin/env bash
# Provision everything the sched_ext VM harness needs, idempotently, with
# downloads cached under the project's ignored .cache/ directory:
#   - host packages (qemu, clang-19 for the BPF side, udev/kmod for virtme-ng, ...)
#   - virtme-ng in a venv (.cache/venv), virtiofsd (.cache/tools/bin)
#   - Debian trixie-backports cloud kernels with CONFIG_SCHED_CLASS_EXT=y
#     (.cache/vm/kernels/<series>/), one per requested series (default: 6.18 7)
#
# Usage: tools/vm/provision.sh [--host-only] [SERIES...]
# The kernels are never installed on the host; they are unpacked and booted
# under qemu (TCG) by `tailctl vm run`.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cache="$root/.cache"
mkdir -p "$cache"
host_only=0
series=()
for a in "$@"; do
  case "$a" in
    --host-only) host_only=1 ;;
    -*) echo "provision.sh: unknown flag $a" >&2; exit 2 ;;
    *) series+=("$a") ;;
  esac
done
[ ${#series[@]} -gt 0 ] || series=(6.18 7)

log() { echo "[provision] $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# ---- host packages -------------------------------------------------------
pkgs=(qemu-system-x86 kmod udev busybox-static clang-19 llvm-19 libelf-dev zlib1g-dev
      pkg-config libseccomp-dev libcap-ng-dev stress-ng redis-server redis-tools bpftool
      python3-venv tmux strace util-linux)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing host packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# redis-server's package starts a system instance; our tests run their own.
if command -v systemctl >/dev/null 2>&1; then as_root systemctl disable --now redis-server >/dev/null 2>&1 || true; fi

# ---- virtme-ng and virtiofsd --------------------------------------------
if [ ! -x "$cache/venv/bin/vng" ]; then
  log "installing virtme-ng into $cache/venv"
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install -q virtme-ng
fi
if [ ! -x "$cache/tools/bin/virtiofsd" ]; then
  log "building virtiofsd into $cache/tools (about 1.5 min)"
  cargo install -q --locked --root "$cache/tools" virtiofsd
fi
[ "$host_only" = 1 ] && exit 0

# ---- sched_ext kernels ----------------------------------------------------
# A private apt configuration: the machine's own Debian mirror, suite
# trixie-backports, lists and cache under .cache/apt. Nothing is installed.
apt_dir="$cache/apt"
mirror=$( (cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true) \
         | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -n 1 | tr -d ' ')
[ -n "$mirror" ] || { echo "provision.sh: no Debian mirror found under /etc/apt" >&2; exit 1; }
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$cache/vm/debs"
echo "deb [trusted=yes] ${mirror%/} trixie-backports main" > "$apt_dir/sources.list"
aptopts=(-o Dir::Etc::sourcelist="$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
         -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache"
         -o APT::Get::List-Cleanup=0 -o Acquire::Check-Valid-Until=false)
lists_fresh() { [ -n "$(find "$apt_dir/lists" -name '*Packages*' -mmin -1440 2>/dev/null | head -n 1)" ]; }
if ! lists_fresh; then
  log "reading trixie-backports package lists"
  apt-get "${aptopts[@]}" update -qq 2>/dev/null || apt-get "${aptopts[@]}" update
fi

# Newest cloud kernel of a series: linux-image-<ver>-cloud-amd64 (in 7.x a
# meta package over linux-binary/modules/base, fetched beside it).
pick_pkg() {
  apt-cache "${aptopts[@]}" pkgnames 2>/dev/null \
    | grep -E "^linux-image-$1[.-][0-9].*-cloud-amd64$" \
    | sort -V | tail -n 1
}

for s in "${series[@]}"; do
  dest="$cache/vm/kernels/$s"
  if [ -f "$dest/READY" ]; then continue; fi
  pkg=$(pick_pkg "$s")
  [ -n "$pkg" ] || { echo "provision.sh: no trixie-backports cloud kernel for series $s" >&2; exit 1; }
  log "kernel series $s: $pkg"
  rm -rf "$dest" && mkdir -p "$dest/tree"
  (cd "$cache/vm/debs" && apt-get "${aptopts[@]}" download -qq 2>/dev/null "$pkg" >/dev/null)
  # The 7.x split packages keep modules in a sibling package of the same version.
  ver=${pkg#linux-image-}; ver=${ver#linux-binary-}
  for extra in "linux-binary-$ver" "linux-modules-$ver" "linux-base-$ver"; do
    [ "$extra" = "$pkg" ] && continue
    # Only the 7.x packages are split; a missing (or virtual) one is fine.
    (cd "$cache/vm/debs" && apt-get "${aptopts[@]}" download -qq "$extra" >/dev/null 2>&1) || true
  done
  for deb in "$cache/vm/debs"/*"$ver"*.deb; do dpkg-deb -x "$deb" "$dest/tree"; done
  vmlinuz=$(find "$dest/tree" -name "vmlinuz*" -type f | head -n 1)
  config=$(find "$dest/tree" \( -name "config-*" -o -name config \) -type f | head -n 1)
  [ -n "$vmlinuz" ] && [ -n "$config" ] || { echo "provision.sh: $pkg has no vmlinuz/config" >&2; exit 1; }
  if ! grep -q '^CONFIG_SCHED_CLASS_EXT=y' "$config"; then
    echo "provision.sh: $pkg lacks CONFIG_SCHED_CLASS_EXT=y" >&2; exit 1
  fi
  kver=$(ls "$dest/tree/usr/lib/modules" 2>/dev/null || ls "$dest/tree/lib/modules")
  mkdir -p "$dest/boot"
  cp "$config" "$dest/boot/config-$kver"
  depmod -b "$dest/tree" "$kver" 2>/dev/null || true
  printf 'vmlinuz=%s\nrelease=%s\npackage=%s\n' "${vmlinuz#$dest/}" "$kver" "$pkg" > "$dest/READY"
  log "kernel $kver ready in $dest"
done
