# Every version the provisioning installs, in one place (sourced by
# provision.sh). Change a pin here, run `tools/vm/provision.sh`, then the
# tests; the fresh-machine check in tools/test.sh proves the new set boots.

# Debian packages on the host (bookworm). A pin that the mirror no longer
# serves is reported and the candidate installed instead (Debian stable
# moves only by point releases; the warning says which pin to update).
HOST_PACKAGES=(
  "qemu-system-x86=1:7.2+dfsg-7+deb12u18+b3"
  "kmod=30+20221128-1"
  "udev=252.39-1~deb12u2"
  "busybox-static=1:1.35.0-4+deb12u1+b1"
  "clang-19=1:19.1.7-3~deb12u1"
  "llvm-19=1:19.1.7-3~deb12u1"
  "libelf-dev=0.188-2.1"
  "zlib1g-dev=1:1.2.13.dfsg-1"
  "pkg-config=1.8.1-1"
  "libseccomp-dev=2.5.4-1+deb12u1"
  "libcap-ng-dev=0.8.3-1+b3"
  "stress-ng=0.15.06-2"
  "redis-server=5:7.0.15-1~deb12u10"
  "redis-tools=5:7.0.15-1~deb12u10"
  "bpftool=7.1.0+6.1.192-2"
  "python3-venv=3.11.2-1+b1"
  "tmux=3.3a-3"
  "strace=6.1-0.1"
  "util-linux=2.38.1-5+deb12u3"
)

# Only for the scheduler benchmark (tools/bench-sched.sh; provision.sh
# --bench): rt-tests (hackbench, cyclictest) and perf (perf bench sched
# pipe, the wake-up latency benchmark: Debian packages no schbench).
# stress-ng and redis come from HOST_PACKAGES.
BENCH_PACKAGES=(
  "rt-tests=2.4-1"
  "linux-perf=6.1.192-2"
)
# The peer scheduler of the benchmark, from its crate (cargo install
# --locked), into $cache/tools/bin beside virtiofsd; only with --bench.
SCX_BPFLAND_VERSION=1.1.4

# virtme-ng and its dependencies, installed with --require-hashes from
# virtme-ng.requirements beside this file.
VIRTME_NG_VERSION=1.42

# virtiofsd from its crate, built with --locked.
VIRTIOFSD_VERSION=1.14.0

# sched_ext kernels from Debian trixie-backports: series -> the packages to
# unpack, each "name version sha256". 7.x splits the image into
# binary/modules/base packages of the same version.
KERNEL_SERIES=(6.18 7)
# The oldest sched_ext kernel Debian packages (not in the default series: run
# `tools/vm/provision.sh 6.16` and `KERNELS=6.16 tools/test.sh`).
KERNEL_6_16=(
  "linux-image-6.16.12+deb13-cloud-amd64 6.16.12-1~bpo13+1 b56d926c1dc9bbdf151794753df57bd427af2398a033999016dcbbd211e8e461"
)
# The last series before 6.18 (Ubuntu 25.10's): the release-path kick of
# 6.16 applies to it too (not in the default series: `tools/vm/provision.sh
# 6.17` and `KERNELS=6.17 tools/test.sh`).
KERNEL_6_17=(
  "linux-image-6.17.13+deb13-cloud-amd64 6.17.13-1~bpo13+1 2ac533a36b0c5107527166716414a4d04b00f7108e419df2084ca5aec268d1ff"
)
KERNEL_6_18=(
  "linux-image-6.18.15+deb13-cloud-amd64 6.18.15-1~bpo13+1 5a507681ea8c978d02265a7fec2f02c9588fb48b54b7f71edc1059e86007f3ec"
)
KERNEL_7=(
  "linux-image-7.3.4+deb13-cloud-amd64 7.3.4-1~bpo13+1 4545cda1cab2f7e975e9b3ad1744b4a360092a85a793156bf48f1bdf02906cc9"
  "linux-binary-7.3.4+deb13-cloud-amd64 7.3.4-1~bpo13+1 c4fbc8e404958693b28825474c20742d70594d65ca58aea7be6a279c81eb6fa0"
  "linux-modules-7.3.4+deb13-cloud-amd64 7.3.4-1~bpo13+1 359f04c363b7d3c5f9ce999ccb7351e00cc8eec0a30d6bc1cda37734987fc43d"
  "linux-base-7.3.4+deb13-cloud-amd64 7.3.4-1~bpo13+1 e08baa43706ba6e8daff58029b039f46beecfb3b3750c6fa0d6d5ca508a46a43"
)
