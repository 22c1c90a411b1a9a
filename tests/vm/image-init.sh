#!/bin/sh
# /init of the test image built by tests/vm/build-image.sh (busybox, PID 1 of its
# initramfs). It prints on the console (the serial port: console=ttyS0 comes last on the
# kernel command line), for a test that reads the machine's serial log:
#   IRONIC-TEST-IMAGE-MARKER <marker>   the token baked into this build of the image
#   IRONIC-TEST-IMAGE-UUID <uuid>       the `uuid` of the config drive's meta_data.json
#   IRONIC-TEST-IMAGE-META <json>       that whole meta_data.json, on one line
# or IRONIC-TEST-IMAGE-NO-CONFIGDRIVE when no config drive turns up, then stays alive.
# Only busybox applets (linked in /bin at build time) and the modules listed, in load
# order, in /lib/modules/load-order.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
say() { echo "ironic-test-image: $*"; }

echo "IRONIC-TEST-IMAGE-MARKER $(cat /etc/ironic-test-image.marker)"
say "$(uname -r), $(cat /proc/cmdline)"

# virtio (PCI and disk), isofs and vfat with their code pages: modules of the Debian
# kernel, uncompressed and ordered (dependencies first) by the build.
while read -r m; do
  insmod "/lib/modules/$m.ko" || say "insmod $m failed"
done </lib/modules/load-order

# The config drive: a partition whose filesystem label is config-2 (ISO 9660, what the
# agent writes) or CONFIG-2 (vfat). The disk shows up a moment after virtio_blk loads:
# look for the label for up to $wait half-seconds.
find_by_label() {
  for label in config-2 CONFIG-2; do
    findfs "LABEL=$label" 2>/dev/null && return 0
  done
  return 1
}
mount_ro() { mount -o ro -t iso9660 "$1" "$2" 2>/dev/null || mount -o ro -t vfat "$1" "$2" 2>/dev/null; }
mkdir -p /mnt/config
meta=/mnt/config/openstack/latest/meta_data.json
found=
wait=20
while [ "$wait" -gt 0 ]; do
  if dev="$(find_by_label)"; then
    if mount_ro "$dev" /mnt/config; then
      found="$dev (label)"
    else
      say "cannot mount $dev"
    fi
    break
  fi
  wait=$((wait - 1))
  usleep 500000
done
# No label found (a filesystem findfs does not know): any partition holding
# openstack/latest/meta_data.json.
if [ -z "$found" ]; then
  for dev in $(awk 'NR > 2 && $4 ~ /[0-9]$/ {print $4}' /proc/partitions); do
    mount_ro "/dev/$dev" /mnt/config || continue
    if [ -f "$meta" ]; then found="/dev/$dev (scan)"; break; fi
    umount /mnt/config
  done
fi

if [ -n "$found" ] && [ -f "$meta" ]; then
  say "config drive: $found"
  json="$(tr -d '\r\n' <"$meta")"
  uuid="$(echo "$json" | sed -n 's/.*"uuid"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')"
  echo "IRONIC-TEST-IMAGE-UUID $uuid"
  echo "IRONIC-TEST-IMAGE-META $json"
else
  [ -n "$found" ] && say "config drive $found has no openstack/latest/meta_data.json"
  echo "IRONIC-TEST-IMAGE-NO-CONFIGDRIVE"
  cat /proc/partitions
fi
say "up; idling"

# PID 1 must never exit (the kernel would panic): the machine stays a running server.
while :; do sleep 3600; done
