#!/usr/bin/env bash
# Builds a small whole-disk image (raw) for deployment tests from Debian packages only,
# and prints one JSON object:
#   {"path": PATH, "disk_format": "raw", "sha256": HEX, "marker": TOKEN}
#
#   bash tests/vm/build-image.sh             # build (or reuse) and print it
#   KERNEL_PACKAGE=linux-image-amd64 IMAGE_SIZE_MB=64 bash tests/vm/build-image.sh
#
# What it makes: a $IMAGE_SIZE_MB MiB disk with an MBR partition table and ONE primary
# partition (type 0xEF, active, from 1 MiB to the end) holding a FAT filesystem with
#   - Debian's cloud kernel (/vmlinuz) and a tiny initramfs (/initrd.img): busybox-static,
#     the virtio, isofs and vfat modules of that kernel and /init (image-init.sh beside
#     this script), which prints `IRONIC-TEST-IMAGE-MARKER <marker>`, finds the config
#     drive (label config-2 or CONFIG-2), prints `IRONIC-TEST-IMAGE-UUID <uuid>` of its
#     openstack/latest/meta_data.json, and idles;
#   - legacy BIOS boot: syslinux's mbr.bin in the MBR, syslinux in the partition's boot
#     sector, /boot/syslinux/syslinux.cfg;
#   - UEFI boot: GRUB (grub-mkstandalone, its grub.cfg embedded) at the removable-media
#     path /EFI/BOOT/BOOTX64.EFI; OVMF takes an MBR partition of type 0xEF as an ESP.
# Both bootloaders pass console=tty0 console=ttyS0,115200: the output is on the serial
# port. Three of the four MBR slots stay free, and the space after the image on a bigger
# disk too, for the config-drive partition the agent adds at the end of the disk.
# The marker is a random token drawn at build time (kept with the cached image).
#
# Idempotent and cached: the result lives under $IRONIC_TEST_DATA/image/<hash>, where the
# hash covers this script, image-init.sh and the settings; a second run prints the JSON
# at once. The build happens in a temporary folder and the result is renamed into place,
# so an interrupted run leaves nothing half-made. No loop device and no mount: the
# filesystem is made and filled inside the image file at its offset (mkfs.fat --offset,
# mtools, syslinux --offset). Needs root (apt-get) and access to the Debian mirror; the
# kernel and busybox-static are unpacked from their .deb (not installed on this host);
# installs syslinux, syslinux-common, mtools, dosfstools, fdisk, grub-efi-amd64-bin,
# cpio and kmod with apt-get when missing. Progress goes to stderr, the JSON alone to
# stdout. tests/vm/check-image.sh boots the result in QEMU (BIOS and UEFI).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
KERNEL_PACKAGE="${KERNEL_PACKAGE:-linux-image-cloud-amd64}"
IMAGE_SIZE_MB="${IMAGE_SIZE_MB:-48}"
IRONIC_TEST_DATA="${IRONIC_TEST_DATA:-$HOME/.cache/ironic-test-data}"

# Kernel modules /init loads (their dependencies come along, built-in ones are skipped):
# the virtio disk, and the config drive's filesystems (ISO 9660, or vfat as a fallback).
MODULES=(virtio_pci virtio_blk isofs vfat nls_cp437 nls_iso8859-1 nls_ascii nls_utf8)

say() { echo "build-image: $*" >&2; }

key="$( { cat "$0" "$here/image-init.sh"; echo "$DEBIAN_SUITE $KERNEL_PACKAGE $IMAGE_SIZE_MB ${MODULES[*]}"; } | sha256sum | cut -c1-16)"
out="$IRONIC_TEST_DATA/image/$key"
complete() { [ -s "$out/disk.raw" ] && [ -s "$out/sha256" ] && [ -s "$out/marker" ]; }
print_json() {
  printf '{"path": "%s", "disk_format": "raw", "sha256": "%s", "marker": "%s"}\n' \
    "$out/disk.raw" "$(cat "$out/sha256")" "$(cat "$out/marker")"
}
if complete; then
  print_json
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  say "needs root (apt-get, mknod)"
  exit 1
fi
need=()
command -v syslinux >/dev/null || need+=(syslinux)
[ -e /usr/lib/syslinux/mbr/mbr.bin ] || need+=(syslinux-common)
command -v mcopy >/dev/null || need+=(mtools)
command -v mkfs.fat >/dev/null || need+=(dosfstools)
command -v sfdisk >/dev/null || need+=(fdisk)
[ -e /usr/lib/grub/x86_64-efi/linux.mod ] && command -v grub-mkstandalone >/dev/null || need+=(grub-efi-amd64-bin)
command -v cpio >/dev/null || need+=(cpio)
command -v modinfo >/dev/null || need+=(kmod)
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]}"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

started=$(date +%s)
mkdir -p "$IRONIC_TEST_DATA/image"
work="$(mktemp -d "$IRONIC_TEST_DATA/image/.build.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

say "kernel ($KERNEL_PACKAGE) and busybox-static from the $DEBIAN_SUITE archive"
# The meta package names the versioned one; both .deb are unpacked, not installed (no
# initramfs-tools, no hooks, no conflict with a busybox package on this host).
resolve() { apt-cache depends "$KERNEL_PACKAGE" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}'; }
image="$(resolve)"
if [ -z "$image" ]; then
  apt-get update -qq >&2
  image="$(resolve)"
fi
[ -n "$image" ] || { say "cannot resolve $KERNEL_PACKAGE"; exit 1; }
mkdir -p "$work/debs"
# apt's download sandbox user cannot write into this root-only folder: download as root.
(cd "$work/debs" && apt-get download -qq -o APT::Sandbox::User=root "$image" busybox-static >&2)
dpkg-deb -x "$work"/debs/linux-image-*.deb "$work/kernel"
dpkg-deb -x "$work"/debs/busybox-static_*.deb "$work/busybox"
kver="$(ls "$work/kernel/lib/modules" | head -n1)"
moddir="$work/kernel/lib/modules/$kver"

say "initramfs: busybox, init, modules of $kver"
root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,mnt,etc,lib/modules}
cp "$work/busybox/bin/busybox" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
done
# The kernel opens /dev/console for init before /init mounts devtmpfs.
mknod -m 600 "$root/dev/console" c 5 1
install -m 0755 "$here/image-init.sh" "$root/init"

# Modules in load order, dependencies first, from modinfo on the package's files (the
# package ships no modules.dep). busybox insmod takes plain .ko files: a compressed
# module is unpacked here.
loaded=" "
add_module() {
  local name="${1//-/_}" file dep
  case "$loaded" in *" $name "*) return ;; esac
  loaded+="$name "
  if grep -Eq "/${name//_/[_-]}\.ko$" "$moddir/modules.builtin"; then
    return
  fi
  file="$(find "$moddir/kernel" -regextype posix-extended -regex ".*/${name//_/[_-]}\.ko(\.xz|\.zst|\.gz)?" | head -n1)"
  [ -n "$file" ] || { say "no module $name in $kver"; exit 1; }
  for dep in $(modinfo -F depends "$file" | tr ',' ' '); do
    add_module "$dep"
  done
  case "$file" in
    *.xz) xz -dc "$file" >"$root/lib/modules/$name.ko" ;;
    *.zst) zstd -qdc "$file" >"$root/lib/modules/$name.ko" ;;
    *.gz) gzip -dc "$file" >"$root/lib/modules/$name.ko" ;;
    *) cp "$file" "$root/lib/modules/$name.ko" ;;
  esac
  echo "$name" >>"$root/lib/modules/load-order"
}
: >"$root/lib/modules/load-order"
for m in "${MODULES[@]}"; do add_module "$m"; done
say "modules: $(tr '\n' ' ' <"$root/lib/modules/load-order")"

marker="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
echo "$marker" >"$root/etc/ironic-test-image.marker"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -9 >"$work/initrd.img"

say "bootloaders: syslinux (BIOS), GRUB standalone (UEFI)"
cmdline="console=tty0 console=ttyS0,115200"
cat >"$work/syslinux.cfg" <<CFG
SERIAL 0 115200
DEFAULT image
PROMPT 0
TIMEOUT 0
LABEL image
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND $cmdline
CFG
# GRUB runs from its own memdisk: it finds the image's partition by a file only this
# image has, then boots the same kernel and initramfs.
cat >"$work/grub.cfg" <<CFG
set timeout=0
search --no-floppy --set=root --file /ironic-test-image.$marker
linux /vmlinuz $cmdline
initrd /initrd.img
boot
CFG
grubmods="part_msdos fat search search_fs_file linux boot echo normal efi_gop"
grub-mkstandalone -O x86_64-efi --modules="$grubmods" --install-modules="$grubmods" \
  --locales= --themes= --fonts= -o "$work/BOOTX64.EFI" "boot/grub/grub.cfg=$work/grub.cfg" >&2

say "disk: $IMAGE_SIZE_MB MiB, MBR, one FAT partition (type 0xEF, active) from 1 MiB"
disk="$work/disk.raw"
truncate -s "${IMAGE_SIZE_MB}M" "$disk"
printf 'label: dos\nstart=2048, type=ef, bootable\n' | sfdisk -q "$disk" >&2
# The partition's filesystem, at its offset in the image file: sectors of 512 bytes,
# mkfs.fat counts 1 KiB blocks; its boot sector names the 2048 sectors before it
# ("hidden sectors"), where syslinux's boot code looks for ldlinux.sys on the disk.
sectors=$(( IMAGE_SIZE_MB * 2048 - 2048 ))
mkfs.fat -F 16 -n IRONICIMAGE -h 2048 --offset 2048 "$disk" $(( sectors / 2 )) >&2
export MTOOLS_SKIP_CHECK=1
fat="$disk@@1048576"
mmd -i "$fat" ::/boot ::/boot/syslinux ::/EFI ::/EFI/BOOT
mcopy -i "$fat" "$work/kernel/boot/vmlinuz-$kver" ::/vmlinuz
mcopy -i "$fat" "$work/initrd.img" ::/initrd.img
mcopy -i "$fat" "$work/syslinux.cfg" ::/boot/syslinux/syslinux.cfg
mcopy -i "$fat" "$work/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
echo "$marker" >"$work/marker"
mcopy -i "$fat" "$work/marker" "::/ironic-test-image.$marker"
# syslinux's boot sector and ldlinux.sys/.c32 in the partition, then its MBR code (the
# first 440 bytes: the partition table after them stays).
syslinux --install --offset 1048576 --directory /boot/syslinux "$disk" >&2
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$disk" bs=440 count=1 conv=notrunc status=none

say "storing under $out"
sha256sum "$disk" | cut -d' ' -f1 >"$work/sha256"
mkdir -p "$work/out"
mv "$disk" "$work/sha256" "$work/marker" "$work/out/"
# A run alongside may have stored its build (another marker) meanwhile: the first one
# stays, so that a marker once printed keeps matching the image at that path.
if ! complete; then
  rm -rf "$out"
  mv -T "$work/out" "$out" 2>/dev/null || complete || { say "cannot store $out"; exit 1; }
fi
say "done in $(( $(date +%s) - started )) s: kernel $kver $(du -h "$work/kernel/boot/vmlinuz-$kver" | cut -f1), initramfs $(du -h "$work/initrd.img" | cut -f1), disk $(du -h --apparent-size "$out/disk.raw" | cut -f1) ($(du -h "$out/disk.raw" | cut -f1) used)"
print_json
