#!/usr/bin/env bash
# Builds an ironic-python-agent ramdisk from Debian packages and PyPI only, and prints
# one JSON object: {"kernel": PATH, "ramdisk": PATH}.
#
#   bash tests/vm/build-ramdisk.sh            # build (or reuse) and print the paths
#   IPA_VERSION=13.0.0 DEBIAN_SUITE=bookworm bash tests/vm/build-ramdisk.sh
#
# What it makes: Debian's cloud kernel (virtio disk, NIC and CD drivers as modules) and an
# initramfs made by debootstrap (minbase) with the tools the agent calls (util-linux,
# parted, gdisk, lshw, dmidecode, qemu-utils, udev, iproute2, a DHCP client …), the agent
# in a virtualenv at /opt/ipa (pinned version, byte-compiled), and a small /init that
# mounts the kernel's filesystems, starts udev, loads the virtio drivers, brings every
# NIC up with DHCP and runs the agent with its output on the serial console and in
# /var/log/ironic-python-agent.log (what `log.collect_system_logs` returns).
#
# Idempotent and cached: the result lives under $IRONIC_TEST_DATA/ramdisk/<hash>, where
# the hash covers this script and its settings; a second run prints the same paths at
# once. Needs root (debootstrap, chroot) and network access to the Debian mirror and
# PyPI; installs debootstrap, cpio and zstd with apt-get when missing. Progress goes to
# stderr, the JSON alone to stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

IPA_VERSION="${IPA_VERSION:-13.0.0}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KERNEL_PACKAGE="${KERNEL_PACKAGE:-linux-image-cloud-amd64}"
IRONIC_TEST_DATA="${IRONIC_TEST_DATA:-$HOME/.cache/ironic-test-data}"

say() { echo "build-ramdisk: $*" >&2; }

# Packages of the root filesystem: what the agent runs (see docs/deploy.md).
PACKAGES=(
  python3 python3-venv ca-certificates
  udev kmod iproute2 isc-dhcp-client procps
  util-linux mount fdisk parted gdisk e2fsprogs dosfstools
  lshw dmidecode pciutils hdparm mdadm qemu-utils
  psmisc efibootmgr
  busybox
  # hexdump: the agent reads a whole-disk image's disk identifier with it after
  # writing (the instance's `root uuid`); without it, five retries cost ~4 s.
  bsdextrautils
)

key="$( { cat "$0" "$here/ramdisk-init.sh" "$here/ipa-requirements.txt"; echo "$IPA_VERSION $DEBIAN_SUITE $KERNEL_PACKAGE ${PACKAGES[*]}"; } | sha256sum | cut -c1-16)"
out="$IRONIC_TEST_DATA/ramdisk/$key"
if [ -s "$out/vmlinuz" ] && [ -s "$out/initramfs" ]; then
  printf '{"kernel": "%s", "ramdisk": "%s"}\n' "$out/vmlinuz" "$out/initramfs"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  say "needs root (debootstrap and chroot)"
  exit 1
fi
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v cpio >/dev/null || need+=(cpio)
command -v zstd >/dev/null || need+=(zstd)
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]}"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

started=$(date +%s)
work="$(mktemp -d "${TMPDIR:-/tmp}/ipa-ramdisk.XXXXXX")"
root="$work/root"
# The host's /dev, /proc and /sys are bound into the root while the agent installs: the
# folder is removed only once nothing is mounted under it, and never across a mount.
cleanup() {
  for m in dev/pts dev proc sys; do umount -l "$root/$m" 2>/dev/null || true; done
  for m in dev/pts dev proc sys; do
    if mountpoint -q "$root/$m" 2>/dev/null; then
      say "$root/$m is still mounted: $work is left in place"
      return
    fi
  done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

say "debootstrap $DEBIAN_SUITE (minbase) into $root"
include="$(IFS=,; echo "${PACKAGES[*]}")"
debootstrap --variant=minbase --include="$include" "$DEBIAN_SUITE" "$root" "$DEBIAN_MIRROR" >&2

say "kernel: $KERNEL_PACKAGE"
(
  cd "$work"
  # The meta package names the versioned one; take the image package out of the archive
  # without installing it (no initramfs-tools, no hooks).
  chroot "$root" apt-get update -qq >&2
  image="$(chroot "$root" apt-cache depends "$KERNEL_PACKAGE" | awk '/Depends: linux-image-/ {print $2; exit}')"
  [ -n "$image" ] || { say "cannot resolve $KERNEL_PACKAGE"; exit 1; }
  chroot "$root" sh -c "cd /tmp && apt-get download -qq $image" >&2
  dpkg-deb -x "$root"/tmp/"$image"_*.deb "$work/kernel"
  rm -f "$root"/tmp/*.deb
)
kver="$(ls "$work/kernel/lib/modules" | head -n1)"
mkdir -p "$root/lib/modules"
cp -a "$work/kernel/lib/modules/$kver" "$root/lib/modules/"
# Only the drivers a virtual (or plain) machine needs: the rest of the tree is most of
# the kernel package's size.
mods="$root/lib/modules/$kver/kernel"
keep=(drivers/virtio drivers/block drivers/net/virtio_net.ko drivers/net/net_failover.ko
      drivers/net/ethernet/intel drivers/scsi drivers/ata drivers/cdrom drivers/char/hw_random
      drivers/nvme drivers/md fs/isofs fs/fat fs/nls fs/efivarfs net/core/failover.ko lib drivers/firmware)
mkdir -p "$work/keep"
for k in "${keep[@]}"; do
  if [ -e "$mods/$k" ]; then
    mkdir -p "$work/keep/$(dirname "$k")"
    cp -a "$mods/$k" "$work/keep/$k"
  fi
done
rm -rf "$mods"
mv "$work/keep" "$mods"
chroot "$root" depmod -a "$kver"

say "ironic-python-agent $IPA_VERSION into /opt/ipa"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount --bind /dev "$root/dev"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
chroot "$root" python3 -m venv /opt/ipa >&2
# The wheels come through the host's pip (its index, proxy and trust settings apply),
# for the chroot's Python version; the chroot installs them without the network.
pyver="$(chroot "$root" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
mkdir -p "$root/tmp/wheels"
# Exactly the pinned packages, each checked against its hash (ipa-requirements.txt):
# the ramdisk runs as root on every machine it boots.
grep -q "^ironic_python_agent==$IPA_VERSION " "$here/ipa-requirements.txt" \
  || { say "ipa-requirements.txt pins another ironic-python-agent than $IPA_VERSION"; exit 1; }
python3 -m pip download -q --only-binary=:all: --python-version "$pyver" --no-deps \
  --require-hashes -r "$here/ipa-requirements.txt" -d "$root/tmp/wheels" >&2
cp "$here/ipa-requirements.txt" "$root/tmp/wheels/requirements.txt"
chroot "$root" /opt/ipa/bin/pip install -q --no-cache-dir --no-index --find-links /tmp/wheels \
  --no-deps --require-hashes -r /tmp/wheels/requirements.txt >&2
rm -rf "$root/tmp/wheels"
chroot "$root" /opt/ipa/bin/python -m compileall -q /opt/ipa/lib >&2 || true
umount -l "$root/sys" "$root/proc" "$root/dev"

say "init, configuration, pruning"
install -m 0755 "$here/ramdisk-init.sh" "$root/init"
mkdir -p "$root/etc/ironic-python-agent.d" "$root/var/log"
# The ramdisk has no systemd: power off and reboot through the kernel after a sync.
for verb in poweroff reboot; do
  letter=o; [ "$verb" = reboot ] && letter=b
  rm -f "$root/sbin/$verb" "$root/usr/sbin/$verb"
  printf '#!/bin/sh\nsync\necho 1 > /proc/sys/kernel/sysrq\necho %s > /proc/sysrq-trigger\n' "$letter" \
    > "$root/usr/sbin/$verb"
  chmod 0755 "$root/usr/sbin/$verb"
done
rm -rf "$root"/usr/share/{doc,man,info,locale,lintian} "$root"/var/lib/apt/lists/* \
       "$root"/var/cache/apt/* "$root"/opt/ipa/lib/python3*/site-packages/pip \
       "$root"/boot/*
find "$root/opt/ipa" -name tests -type d -prune -exec rm -rf {} + 2>/dev/null || true
echo "nameserver 10.0.2.3" > "$root/etc/resolv.conf"

say "packing"
mkdir -p "$out.tmp"
cp "$work/kernel/boot/vmlinuz-$kver" "$out.tmp/vmlinuz"
(cd "$root" && find . -xdev -print0 | cpio --null -o -H newc --quiet) | zstd -q -T0 -10 > "$out.tmp/initramfs"
rm -rf "$out"
mv "$out.tmp" "$out"
say "done in $(( $(date +%s) - started )) s: kernel $(du -h "$out/vmlinuz" | cut -f1), ramdisk $(du -h "$out/initramfs" | cut -f1)"
printf '{"kernel": "%s", "ramdisk": "%s"}\n' "$out/vmlinuz" "$out/initramfs"
