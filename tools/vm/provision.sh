#!/usr/bin/env bash
# Provision everything the sched_ext VM harness needs, idempotently, at the
# versions pinned in tools/vm/pins.sh:
#   - host packages (qemu, clang-19 for the BPF side, udev/kmod for virtme-ng, ...)
#   - virtme-ng in a venv ($cache/venv, hashes in virtme-ng.requirements)
#   - virtiofsd ($cache/tools/bin)
#   - with --bench only: the scheduler benchmark's packages (BENCH_PACKAGES)
#     and scx_bpfland ($cache/tools/bin), for tools/bench-sched.sh
#   - Debian trixie-backports cloud kernels with CONFIG_SCHED_CLASS_EXT=y
#     ($cache/vm/kernels/<series>/), one per requested series (default: 6.18 7)
#
# Usage: tools/vm/provision.sh [--host-only] [--bench] [SERIES...]
# $cache is $TAILCTL_CACHE, default the repository's ignored .cache/.
# Kernel packages are kept, verified by sha256, in $TAILCTL_DOWNLOADS
# (default $cache/downloads): a fresh cache pointed at an existing download
# directory downloads nothing that is already there with the right hash.
# The kernels are never installed on the host; they are unpacked and booted
# under qemu (TCG) by `tailctl vm run`.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${TAILCTL_CACHE:-$root/.cache}
downloads=${TAILCTL_DOWNLOADS:-$cache/downloads}
mkdir -p "$cache" "$downloads"
# shellcheck source=pins.sh
. "$here/pins.sh"
host_only=0
bench=0
series=()
for a in "$@"; do
  case "$a" in
    --host-only) host_only=1 ;;
    --bench) bench=1 ;;
    -*) echo "provision.sh: unknown flag $a" >&2; exit 2 ;;
    *) series+=("$a") ;;
  esac
done
[ ${#series[@]} -gt 0 ] || series=("${KERNEL_SERIES[@]}")

log() { echo "[provision] $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# ---- host packages -------------------------------------------------------
# install_pinned NAME=VERSION...: installs what is missing at the pinned versions.
install_pinned() {
  local missing=() pin p v have
  for pin in "$@"; do
    p=${pin%%=*}; v=${pin#*=}
    have=$(dpkg-query -W -f='${Status} ${Version}' "$p" 2>/dev/null || true)
    case "$have" in
      "install ok installed $v") ;;
      "install ok installed "*) log "note: $p ${have##* } is installed, pinned $v (kept)" ;;
      *) missing+=("$pin") ;;
    esac
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  log "installing host packages: ${missing[*]}"
  as_root apt-get update -qq
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; then
    # Only a Debian point release moves these; say which pin to update.
    log "WARNING: a pinned version is no longer served; installing the mirror's candidates."
    log "         update tools/vm/pins.sh to: $(for m in "${missing[@]}"; do
                 p=${m%%=*}; echo -n "$p=$(apt-cache policy "$p" | awk '/Candidate/{print $2}') "; done)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]%%=*}" >/dev/null
  fi
}
install_pinned "${HOST_PACKAGES[@]}"
[ "$bench" = 0 ] || install_pinned "${BENCH_PACKAGES[@]}"
# redis-server's package starts a system instance; our tests run their own.
if command -v systemctl >/dev/null 2>&1; then as_root systemctl disable --now redis-server >/dev/null 2>&1 || true; fi

# ---- virtme-ng and virtiofsd --------------------------------------------
venv_stamp="$cache/venv/.tailctl-pin"
want_venv="virtme-ng $VIRTME_NG_VERSION $(sha256sum "$here/virtme-ng.requirements" | cut -c1-16)"
if [ ! -x "$cache/venv/bin/vng" ] || [ "$(cat "$venv_stamp" 2>/dev/null)" != "$want_venv" ]; then
  log "installing virtme-ng $VIRTME_NG_VERSION into $cache/venv"
  rm -rf "$cache/venv"
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install -q --disable-pip-version-check --require-hashes \
    -r "$here/virtme-ng.requirements"
  echo "$want_venv" > "$venv_stamp"
fi
if [ "$("$cache/tools/bin/virtiofsd" --version 2>/dev/null | awk '{print $2}')" != "$VIRTIOFSD_VERSION" ]; then
  log "building virtiofsd $VIRTIOFSD_VERSION into $cache/tools (about 1.5 min)"
  cargo install -q --locked --force --version "=$VIRTIOFSD_VERSION" --root "$cache/tools" virtiofsd
fi
# The benchmark's peer scheduler, only on demand (not in the test path). Its
# build needs clang for the BPF side (BPF_CLANG, as for scx_tailctl).
if [ "$bench" = 1 ] && [ "$("$cache/tools/bin/scx_bpfland" --version 2>/dev/null | awk '{print $2}')" != "$SCX_BPFLAND_VERSION" ]; then
  log "building scx_bpfland $SCX_BPFLAND_VERSION into $cache/tools (several minutes)"
  env -u CARGO_TARGET_DIR BPF_CLANG="${BPF_CLANG:-clang-19}" \
    cargo install -q --locked --force --version "=$SCX_BPFLAND_VERSION" --root "$cache/tools" scx_bpfland
fi
[ "$host_only" = 1 ] && exit 0

# ---- sched_ext kernels ----------------------------------------------------
# Packages come through a private apt configuration (the machine's own Debian
# mirror, suite trixie-backports, lists under $cache/apt; nothing is
# installed), only when $downloads lacks a copy with the pinned hash.
apt_dir="$cache/apt"
aptopts=(-o Dir::Etc::sourcelist="$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
         -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache"
         -o APT::Get::List-Cleanup=0 -o Acquire::Check-Valid-Until=false)
apt_ready=0
apt_setup() {
  [ "$apt_ready" = 1 ] && return 0
  local mirror
  mirror=$( (cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true) \
           | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -n 1 | tr -d ' ')
  [ -n "$mirror" ] || { echo "provision.sh: no Debian mirror found under /etc/apt" >&2; exit 1; }
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  echo "deb [trusted=yes] ${mirror%/} trixie-backports main" > "$apt_dir/sources.list"
  log "reading trixie-backports package lists"
  apt-get "${aptopts[@]}" update -qq 2>/dev/null || apt-get "${aptopts[@]}" update
  apt_ready=1
}
# fetch NAME VERSION SHA256 -> path of the verified .deb (on stdout)
fetch_deb() {
  local name=$1 ver=$2 sha=$3 file
  file="$downloads/${name}_${ver//:/%3a}_amd64.deb"
  if [ -f "$file" ] && echo "$sha  $file" | sha256sum -c --status; then echo "$file"; return; fi
  apt_setup
  log "downloading $name $ver"
  local tmp; tmp=$(mktemp -d "$downloads/.dl.XXXXXX")
  (cd "$tmp" && apt-get "${aptopts[@]}" download -qq "$name=$ver" >/dev/null) \
    || { echo "provision.sh: $name=$ver is not in trixie-backports any more; update tools/vm/pins.sh" >&2; exit 1; }
  local got; got=$(ls "$tmp"/*.deb)
  if ! echo "$sha  $got" | sha256sum -c --status; then
    echo "provision.sh: $name $ver has sha256 $(sha256sum "$got" | cut -d' ' -f1), pinned $sha" >&2; exit 1
  fi
  mv "$got" "$file"; rmdir "$tmp"
  echo "$file"
}

for s in "${series[@]}"; do
  var="KERNEL_${s//./_}[@]"
  pins=("${!var-}")
  [ -n "${pins[0]:-}" ] || { echo "provision.sh: no pinned kernel for series $s (tools/vm/pins.sh)" >&2; exit 1; }
  want="${pins[*]}"
  dest="$cache/vm/kernels/$s"
  if [ -f "$dest/READY" ] && grep -qxF "pins=$want" "$dest/READY"; then continue; fi
  log "kernel series $s: ${pins[0]%% *}"
  rm -rf "$dest" && mkdir -p "$dest/tree"
  for pin in "${pins[@]}"; do
    read -r name ver sha <<<"$pin"
    deb=$(fetch_deb "$name" "$ver" "$sha")
    dpkg-deb -x "$deb" "$dest/tree"
  done
  vmlinuz=$(find "$dest/tree" -name "vmlinuz*" -type f | head -n 1)
  config=$(find "$dest/tree" \( -name "config-*" -o -name config \) -type f | head -n 1)
  [ -n "$vmlinuz" ] && [ -n "$config" ] || { echo "provision.sh: ${pins[0]%% *} has no vmlinuz/config" >&2; exit 1; }
  if ! grep -q '^CONFIG_SCHED_CLASS_EXT=y' "$config"; then
    echo "provision.sh: ${pins[0]%% *} lacks CONFIG_SCHED_CLASS_EXT=y" >&2; exit 1
  fi
  kver=$(ls "$dest/tree/usr/lib/modules" 2>/dev/null || ls "$dest/tree/lib/modules")
  mkdir -p "$dest/boot"
  cp "$config" "$dest/boot/config-$kver"
  depmod -b "$dest/tree" "$kver" 2>/dev/null || true
  printf 'vmlinuz=%s\nrelease=%s\npackage=%s\npins=%s\n' "${vmlinuz#"$dest"/}" "$kver" "${pins[0]%% *}" "$want" > "$dest/READY"
  log "kernel $kver ready in $dest"
done
