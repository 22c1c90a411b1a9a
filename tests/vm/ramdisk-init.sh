#!/bin/sh
# /init of the agent ramdisk built by tests/vm/build-ramdisk.sh: the kernel's
# filesystems, udev, the virtio drivers, DHCP on every NIC, then ironic-python-agent
# with its output on the console and in /var/log (what log.collect_system_logs returns).
# The agent reads its settings from the kernel command line (ipa-api-url,
# ipa-agent-token, boot_method, ipa-advertise-host/port …).
export PATH=/opt/ipa/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /run /tmp /var/log
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
hostname ironic-agent
# (The agent's token, on the command line of a virtual-media boot, is not shown: the
# console may be logged by a BMC.)
echo "ironic-agent ramdisk: $(uname -r), $(sed 's/ipa-agent-token=[^ ]*/ipa-agent-token=******/' /proc/cmdline)" > /dev/console

for m in virtio_pci virtio_blk virtio_net virtio_scsi virtio_rng sr_mod isofs vfat nls_cp437 nls_iso8859_1 ata_piix; do
  modprobe -q "$m" 2>/dev/null
done
/lib/systemd/systemd-udevd --daemon --resolve-names=never
udevadm trigger --action=add
udevadm settle --timeout=30

ip link set lo up
for dev in /sys/class/net/*; do
  n="${dev##*/}"
  [ "$n" = lo ] && continue
  ip link set "$n" up
done
dhclient -v -1 $(ls /sys/class/net | grep -v '^lo$') > /var/log/dhclient.log 2>&1 || true
ip -4 addr > /dev/console

echo "ironic-agent ramdisk: starting ironic-python-agent" > /dev/console
while :; do
  ironic-python-agent 2>&1 | tee -a /var/log/ironic-python-agent.log > /dev/console
  echo "ironic-agent ramdisk: the agent exited; restarting in 5 s" > /dev/console
  sleep 5
done
