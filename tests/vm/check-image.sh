#!/usr/bin/env bash
# Boots the test image of tests/vm/build-image.sh in QEMU (software emulation, no KVM)
# the way a deployment leaves it, and checks what its /init prints on the serial port.
# By hand only (CI does not run it): a boot takes tens of seconds.
#
#   bash tests/vm/check-image.sh               # BIOS (SeaBIOS) then UEFI (OVMF)
#   bash tests/vm/check-image.sh uefi          # one firmware only
#   CHECK_CONFIGDRIVE=vfat bash tests/vm/check-image.sh   # iso9660 (default), vfat, none
#
# For each firmware: the image copied onto a sparse 5 GiB disk, a config-drive partition
# added at the end of that disk as ironic-python-agent does on an MBR disk (parted
# mkpart primary fat32 -64MiB -0) holding an ISO 9660 filesystem labelled config-2 (or a
# vfat one labelled CONFIG-2) with openstack/latest/meta_data.json of a made-up uuid;
# then QEMU (pc machine, 1 GiB, the disk on virtio, no network, the serial port into a
# log file) until the log has
#   IRONIC-TEST-IMAGE-MARKER <the image's marker>
#   IRONIC-TEST-IMAGE-UUID <the made-up uuid>, and IRONIC-TEST-IMAGE-META …
# (IRONIC-TEST-IMAGE-NO-CONFIGDRIVE with CHECK_CONFIGDRIVE=none), or $CHECK_TIMEOUT
# seconds pass. Prints the seconds each boot took to stderr, exits non-zero when a line
# is missing; the serial logs stay in $CHECK_LOG_DIR. Stops the QEMU it starts.
#
# Needs root. Installs with apt-get, when missing: qemu-system-x86, ovmf, parted,
# xorriso (and what build-image.sh installs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CHECK_CONFIGDRIVE="${CHECK_CONFIGDRIVE:-iso9660}"
CHECK_TIMEOUT="${CHECK_TIMEOUT:-300}"
CHECK_LOG_DIR="${CHECK_LOG_DIR:-${TMPDIR:-/tmp}}"
OVMF_CODE="${OVMF_CODE:-/usr/share/OVMF/OVMF_CODE.fd}"
OVMF_VARS="${OVMF_VARS:-/usr/share/OVMF/OVMF_VARS.fd}"
firmwares=("$@")
[ "${#firmwares[@]}" -gt 0 ] || firmwares=(bios uefi)

say() { echo "check-image: $*" >&2; }

case "$CHECK_CONFIGDRIVE" in iso9660|vfat|none) ;; *) say "CHECK_CONFIGDRIVE: iso9660, vfat or none"; exit 2 ;; esac
for fw in "${firmwares[@]}"; do
  case "$fw" in bios|uefi) ;; *) say "firmware: bios or uefi, not $fw"; exit 2 ;; esac
done

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -e "$OVMF_CODE" ] || need+=(ovmf)
command -v parted >/dev/null || need+=(parted)
command -v xorriso >/dev/null || need+=(xorriso)
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]}"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

json="$(bash "$here/build-image.sh")"
field() { echo "$json" | sed -n "s/.*\"$1\": \"\\([^\"]*\\)\".*/\\1/p"; }
image="$(field path)"
marker="$(field marker)"
say "image $image, marker $marker"

work="$(mktemp -d "${TMPDIR:-/tmp}/check-image.XXXXXX")"
qemu_pid=
cleanup() {
  if [ -n "$qemu_pid" ]; then
    kill "$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# The disk as the agent leaves it: the image at its start, the config drive at its end.
uuid="$(cat /proc/sys/kernel/random/uuid)"
disk="$work/disk5g.raw"
truncate -s 5G "$disk"
dd if="$image" of="$disk" bs=1M conv=notrunc,sparse status=none
if [ "$CHECK_CONFIGDRIVE" != none ]; then
  mkdir -p "$work/cd/openstack/latest"
  printf '{"uuid": "%s", "name": "check-image", "hostname": "check-image", "availability_zone": "nova", "public_keys": {}}\n' \
    "$uuid" >"$work/cd/openstack/latest/meta_data.json"
  parted -a optimal -s -- "$disk" mkpart primary fat32 -64MiB -0
  # The new partition: the last line of parted's machine-readable listing, in bytes.
  start="$(parted -m -s "$disk" unit B print | tail -n1 | cut -d: -f2)"
  start="${start%B}"
  if [ "$CHECK_CONFIGDRIVE" = iso9660 ]; then
    xorriso -as mkisofs -quiet -V config-2 -J -r -o "$work/cd.iso" "$work/cd" >&2
    dd if="$work/cd.iso" of="$disk" bs=1M conv=notrunc oflag=seek_bytes seek="$start" status=none
  else
    # A vfat image file of 32 MiB, like a config drive handed over as vfat.
    mkfs.fat -n CONFIG-2 -C "$work/cd.vfat" 32768 >&2
    MTOOLS_SKIP_CHECK=1 mcopy -s -i "$work/cd.vfat" "$work/cd/openstack" ::/
    dd if="$work/cd.vfat" of="$disk" bs=1M conv=notrunc oflag=seek_bytes seek="$start" status=none
  fi
  parted -s "$disk" print >&2
fi

all_seen() {
  local line
  for line in "${want[@]}"; do
    grep -aqF -- "$line" "$log" || return 1
  done
}

failed=0
for fw in "${firmwares[@]}"; do
  log="$CHECK_LOG_DIR/check-image-$fw-$CHECK_CONFIGDRIVE.log"
  : >"$log"
  firmware=()
  if [ "$fw" = uefi ]; then
    cp "$OVMF_VARS" "$work/OVMF_VARS.fd"
    firmware=(-drive "if=pflash,format=raw,readonly=on,file=$OVMF_CODE"
              -drive "if=pflash,format=raw,file=$work/OVMF_VARS.fd")
  fi
  want=("IRONIC-TEST-IMAGE-MARKER $marker")
  if [ "$CHECK_CONFIGDRIVE" = none ]; then
    want+=("IRONIC-TEST-IMAGE-NO-CONFIGDRIVE")
  else
    want+=("IRONIC-TEST-IMAGE-UUID $uuid" "IRONIC-TEST-IMAGE-META {\"uuid\": \"$uuid\"")
  fi
  say "booting ($fw, $CHECK_CONFIGDRIVE config drive), serial log $log"
  started=$(date +%s%N)
  # `timeout` too, so that QEMU ends even if this script is killed outright.
  timeout "$CHECK_TIMEOUT" qemu-system-x86_64 -machine pc -m 1024 -display none -monitor none \
    "${firmware[@]}" -serial "file:$log" -drive "file=$disk,format=raw,if=virtio" -net none \
    </dev/null >&2 &
  qemu_pid=$!
  while kill -0 "$qemu_pid" 2>/dev/null && ! all_seen; do sleep 0.5; done
  took=$(( ($(date +%s%N) - started) / 100000000 ))
  took="$(( took / 10 )).$(( took % 10 ))"
  kill "$qemu_pid" 2>/dev/null || true
  wait "$qemu_pid" 2>/dev/null || true
  qemu_pid=
  if all_seen; then
    say "$fw: ok in $took s"
  else
    failed=1
    for line in "${want[@]}"; do
      grep -aqF -- "$line" "$log" || say "$fw: missing after $took s: $line"
    done
  fi
done
exit "$failed"
