#!/usr/bin/env bash
# A test bed of QEMU machines (software emulation) behind sushy-tools' Redfish emulator
# (its libvirt driver, with virtual media), for people and scripts alike.
#
#   bash tests/vm/bed.sh up N     # start N machines; one JSON object per machine and line
#   bash tests/vm/bed.sh service  # the IRONIC_*=… variables an all-in-one needs to serve them
#   bash tests/vm/bed.sh down     # stop everything it started; leaves nothing running
#   bash tests/vm/bed.sh prepare  # install what it needs, start nothing
#
# Each machine: 1 vCPU, $BED_MEMORY_MB MiB, a sparse 5 GiB virtio disk, a virtio NIC on
# QEMU's user network (no traffic leaves this host: the guest reaches the host's loopback
# at 10.0.2.2, and the host reaches the guest's agent on a forwarded 127.0.0.1 port), a
# serial console logged to a file, a virtio RNG. libvirtd and virtlogd run as daemons the
# bed starts itself (no systemd needed); their state, the machines' disks, the storage
# pool sushy-tools uploads virtual media into, and the logs live under $BED_DIR.
#
# Each machine also answers IPMI through VirtualBMC (its `ipmi_driver_info`), and a
# machine whose boot mode is set to UEFI runs on OVMF. Booted from the network, a
# machine's NIC (QEMU's iPXE ROM) gets `http://10.0.2.2:$BED_HTTP_PORT/boot.ipxe` from
# the user network's DHCP: the `ipxe` boot interface's script on the service's image
# server (give `up` the same BED_HTTP_PORT as `service`). The NIC's boot index is the
# last (9): libvirt numbers the disk and CD from 1 when the boot device is one of them,
# and none when it is the network, which leaves the NIC alone to boot from.
#
# Needs root. Installs with apt-get, when missing: qemu-system-x86, qemu-utils, ovmf,
# libvirt (daemon, qemu driver, clients, dev headers), pkg-config, python3-venv; and into
# a virtualenv under the test data folder: sushy-tools, VirtualBMC and libvirt-python.
#
# What it leaves of the host as it found it: the bed runs a libvirtd of its own, in a
# mount namespace where /etc/libvirt, /run/libvirt, /var/lib/libvirt, /var/log/libvirt
# and /var/cache/libvirt are folders under $BED_DIR/libvirt (its QEMU runs as root
# without a security driver there only); the host's libvirt configuration, daemons and
# machines are never touched, and clients reach the bed's daemon through its own socket
# ($URI). `down` stops only the processes `up` started (their pid files) and removes
# only what `up` made. The Redfish emulator listens on 127.0.0.1 with a user and a
# password of the bed's own ($BED_DIR/redfish-password) and sees only the bed's
# machines. VirtualBMC's control port (127.0.0.1:$BED_VBMC_PORT) takes commands from
# any local user, as VirtualBMC does: run the bed on a host whose users you trust.
set -euo pipefail
IRONIC_TEST_DATA="${IRONIC_TEST_DATA:-$HOME/.cache/ironic-test-data}"
BED_DIR="${BED_DIR:-$IRONIC_TEST_DATA/bed}"
BED_MEMORY_MB="${BED_MEMORY_MB:-2560}"
BED_REDFISH_PORT="${BED_REDFISH_PORT:-8021}"
BED_AGENT_PORT_BASE="${BED_AGENT_PORT_BASE:-9910}"
BED_IPMI_PORT_BASE="${BED_IPMI_PORT_BASE:-6230}"
BED_VBMC_PORT="${BED_VBMC_PORT:-50891}"
BED_API_PORT="${BED_API_PORT:-6385}"
BED_HTTP_PORT="${BED_HTTP_PORT:-8088}"
venv="$IRONIC_TEST_DATA/bed-venv"
# The bed's own libvirt (see above): its folders, and the socket clients use.
LV="$BED_DIR/libvirt"
URI="qemu+unix:///system?socket=$LV/run/libvirt-sock"
POOL=ironic-bed

say() { echo "bed: $*" >&2; }

ensure_packages() {
  local need=()
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v qemu-img >/dev/null || need+=(qemu-utils)
  command -v libvirtd >/dev/null || need+=(libvirt-daemon libvirt-daemon-driver-qemu)
  command -v virsh >/dev/null || need+=(libvirt-clients)
  [ -e /usr/include/libvirt/libvirt.h ] || need+=(libvirt-dev)
  command -v pkg-config >/dev/null || need+=(pkg-config)
  python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
  # UEFI machines (a node's boot mode set to uefi): the emulator boots them with OVMF.
  [ -e /usr/share/OVMF/OVMF_CODE.fd ] || need+=(ovmf)
  if [ "${#need[@]}" -gt 0 ]; then
    say "installing ${need[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
  fi
  # Debian's qemu-system-x86 removes a backported qemu-utils it does not match.
  if ! command -v qemu-img >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-utils >&2
  fi
  if ! "$venv/bin/python" -c 'import sushy_tools, libvirt, virtualbmc' 2>/dev/null; then
    say "installing sushy-tools, VirtualBMC and libvirt-python into $venv"
    [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'sushy-tools==2.2.0' 'virtualbmc==3.3.0' "libvirt-python==$(libvirtd --version | awk '{print $NF}')" >&2
  fi
}

# libvirt without systemd, and without touching the host's: virtlogd and libvirtd as
# daemons (pid files under $BED_DIR/run) in a mount namespace of their own, where the
# folders libvirt keeps its configuration, state, sockets and logs in are the bed's.
ensure_libvirtd() {
  mkdir -p "$BED_DIR/run" "$BED_DIR/pool" "$BED_DIR/machines" \
    "$LV/etc/qemu" "$LV/run" "$LV/lib/qemu" "$LV/log/qemu" "$LV/cache"
  getent group kvm >/dev/null || groupadd -r kvm
  getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
  getent passwd libvirt-qemu >/dev/null || useradd -r -g kvm libvirt-qemu
  cat >"$LV/etc/qemu.conf" <<'CONF'
# The bed's libvirtd only (tests/vm/bed.sh): no systemd, no security driver, QEMU as root
user = "root"
group = "root"
dynamic_ownership = 0
security_driver = "none"
cgroup_controllers = [ ]
CONF
  : >"$LV/etc/libvirtd.conf"
  if ! virsh -c "$URI" version >/dev/null 2>&1; then
    say "starting the bed's virtlogd and libvirtd (private folders under $LV)"
    local d
    for d in /etc/libvirt /run/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt; do
      [ -d "$d" ] || mkdir -p "$d"
    done
    LV="$LV" PIDS="$BED_DIR/run" unshare --mount --propagation private -- /bin/sh -ec '
      mount --bind "$LV/etc" /etc/libvirt
      mount --bind "$LV/run" /run/libvirt
      mount --bind "$LV/lib" /var/lib/libvirt
      mount --bind "$LV/log" /var/log/libvirt
      mount --bind "$LV/cache" /var/cache/libvirt
      virtlogd -d -p "$PIDS/virtlogd.pid"
      libvirtd -d -p "$PIDS/libvirtd.pid"
    '
    for _ in $(seq 1 100); do virsh -c "$URI" version >/dev/null 2>&1 && break; sleep 0.1; done
    virsh -c "$URI" version >/dev/null
  fi
  if ! virsh -c "$URI" pool-info "$POOL" >/dev/null 2>&1; then
    virsh -c "$URI" pool-define-as "$POOL" dir --target "$BED_DIR/pool" >/dev/null
  fi
  if [ "$(virsh -c "$URI" pool-info "$POOL" | awk '/^State:/ {print $2}')" != running ]; then
    virsh -c "$URI" pool-start "$POOL" >/dev/null
  fi
}

mac_of() { printf '52:54:00:1b:ed:%02x' "$1"; }

define_machine() {
  local i=$1 name="ironic-bed-$1" port=$((BED_AGENT_PORT_BASE + $1))
  local disk="$BED_DIR/machines/$name.qcow2" log="$BED_DIR/machines/$name.serial.log"
  if virsh -c "$URI" dominfo "$name" >/dev/null 2>&1; then
    [ -e "$disk" ] && return
    # Left from an earlier bed whose disk is gone: defined again below.
    virsh -c "$URI" destroy "$name" >/dev/null 2>&1 || true
    virsh -c "$URI" undefine --nvram "$name" >/dev/null 2>&1 \
      || virsh -c "$URI" undefine "$name" >/dev/null
  fi
  qemu-img create -q -f qcow2 "$disk" 5G
  : >"$log"
  cat >"$BED_DIR/machines/$name.xml" <<XML
<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>$name</name>
  <memory unit='MiB'>$BED_MEMORY_MB</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/><bios useserial='yes'/></os>
  <features><acpi/><apic/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='unsafe'/>
      <source file='$disk'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <serial type='file'><source path='$log' append='on'/><target port='0'/></serial>
    <console type='file'><source path='$log' append='on'/><target type='serial' port='0'/></console>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    <memballoon model='none'/>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-netdev'/>
    <qemu:arg value='user,id=bednet,hostfwd=tcp:127.0.0.1:$port-:9999,bootfile=http://10.0.2.2:$BED_HTTP_PORT/boot.ipxe'/>
    <qemu:arg value='-device'/>
    <qemu:arg value='virtio-net-pci,netdev=bednet,mac=$(mac_of "$i"),bus=pci.0,addr=0x10,bootindex=9'/>
  </qemu:commandline>
</domain>
XML
  virsh -c "$URI" define "$BED_DIR/machines/$name.xml" >/dev/null
}

# VirtualBMC: each machine also answers IPMI on 127.0.0.1:<BED_IPMI_PORT_BASE + i>
# (user admin, password password), for the `ipmi` hardware type.
export VIRTUALBMC_CONFIG="$BED_DIR/vbmc/virtualbmc.conf"
vbmc() { "$venv/bin/vbmc" "$@"; }
ensure_vbmc() {
  mkdir -p "$BED_DIR/vbmc/domains"
  cat >"$VIRTUALBMC_CONFIG" <<CONF
[default]
config_dir = $BED_DIR/vbmc/domains
pid_file = $BED_DIR/vbmc/vbmcd.pid
server_port = $BED_VBMC_PORT
[log]
logfile = $BED_DIR/vbmc/vbmcd.log
CONF
  # (vbmcd's own pid file holds 0 after it daemonises: it is found by name instead.)
  if ! pgrep -f "$venv/bin/vbmcd" >/dev/null; then
    say "starting VirtualBMC"
    "$venv/bin/vbmcd" >&2
    for _ in $(seq 1 50); do vbmc list >/dev/null 2>&1 && break; sleep 0.2; done
  fi
}

ensure_ipmi() {
  local i=$1 name="ironic-bed-$1"
  if ! vbmc show "$name" >/dev/null 2>&1; then
    vbmc add "$name" --port $((BED_IPMI_PORT_BASE + i)) --address 127.0.0.1 \
      --username admin --password password --libvirt-uri "$URI" >&2
  fi
  vbmc start "$name" >/dev/null 2>&1 || true
}

# The emulator's user and password: the bed's own, made once (0600).
redfish_password() {
  local f="$BED_DIR/redfish-password"
  if [ ! -s "$f" ]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$f")
  fi
  cat "$f"
}

ensure_sushy() {
  local n="$1"
  if [ -s "$BED_DIR/run/sushy.pid" ] && kill -0 "$(cat "$BED_DIR/run/sushy.pid")" 2>/dev/null; then return; fi
  (umask 077
   BED_PASSWORD="$(redfish_password)" "$venv/bin/python" -c \
     'import bcrypt, os; print("admin:" + bcrypt.hashpw(os.environ["BED_PASSWORD"].encode(), bcrypt.gensalt(4)).decode())' \
     >"$BED_DIR/redfish-htpasswd")
  local uuids="" i
  for i in $(seq 1 "$n"); do
    uuids="$uuids'$(virsh -c "$URI" domuuid "ironic-bed-$i" | tr -d '[:space:]')', "
  done
  cat >"$BED_DIR/sushy.conf" <<CONF
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_LISTEN_PORT = $BED_REDFISH_PORT
SUSHY_EMULATOR_LIBVIRT_URI = '$URI'
SUSHY_EMULATOR_AUTH_FILE = '$BED_DIR/redfish-htpasswd'
SUSHY_EMULATOR_ALLOWED_INSTANCES = [$uuids]
SUSHY_EMULATOR_STORAGE_POOL = '$POOL'
SUSHY_EMULATOR_IGNORE_BOOT_DEVICE = False
SUSHY_EMULATOR_BOOT_LOADER_MAP = {'UEFI': {'x86_64': '/usr/share/OVMF/OVMF_CODE.fd'}, 'Legacy': {'x86_64': None}}
CONF
  say "starting sushy-emulator on 127.0.0.1:$BED_REDFISH_PORT"
  setsid "$venv/bin/sushy-emulator" --config "$BED_DIR/sushy.conf" >"$BED_DIR/sushy.log" 2>&1 &
  echo $! >"$BED_DIR/run/sushy.pid"
  for _ in $(seq 1 100); do
    curl -sf -u "admin:$(redfish_password)" "http://127.0.0.1:$BED_REDFISH_PORT/redfish/v1/Systems" >/dev/null && return
    sleep 0.2
  done
  say "sushy-emulator does not answer (see $BED_DIR/sushy.log)"
  exit 1
}

# The agent's kernel parameters: the serial console, where the agent listens (QEMU's
# user network forwards it to loopback), and no download retries (a wrong checksum
# fails at once; ironic-python-agent retries 9 times, 10 s apart, by default).
machine_json() {
  local i=$1 name="ironic-bed-$1" port=$((BED_AGENT_PORT_BASE + $1))
  local uuid; uuid="$(virsh -c "$URI" domuuid "$name" | tr -d '[:space:]')"
  printf '{"name": "%s", "driver": "redfish", "driver_info": {"redfish_address": "http://127.0.0.1:%s", "redfish_system_id": "/redfish/v1/Systems/%s", "redfish_username": "admin", "redfish_password": "%s", "kernel_append_params": "console=ttyS0,115200 ipa-advertise-host=127.0.0.1 ipa-advertise-port=%s ipa-image-download-connection-retries=0"}, "ipmi_driver_info": {"ipmi_address": "127.0.0.1", "ipmi_port": %s, "ipmi_username": "admin", "ipmi_password": "password"}, "mac": "%s", "agent_port": %s, "serial_log": "%s"}\n' \
    "$name" "$BED_REDFISH_PORT" "$uuid" "$(redfish_password)" "$port" $((BED_IPMI_PORT_BASE + i)) "$(mac_of "$i")" "$port" "$BED_DIR/machines/$name.serial.log"
}

up() {
  local n="${1:-1}"
  ensure_packages
  ensure_libvirtd
  for i in $(seq 1 "$n"); do define_machine "$i"; done
  ensure_sushy "$n"
  ensure_vbmc
  for i in $(seq 1 "$n"); do ensure_ipmi "$i"; done
  for i in $(seq 1 "$n"); do machine_json "$i"; done
}

down() {
  # Only the bed's own daemon is asked (its socket); none of the host's.
  if command -v virsh >/dev/null && virsh -c "$URI" version >/dev/null 2>&1; then
    for name in $(virsh -c "$URI" list --all --name | grep '^ironic-bed-' || true); do
      virsh -c "$URI" destroy "$name" >/dev/null 2>&1 || true
      # A machine switched to UEFI has an NVRAM file, which plain undefine refuses.
      virsh -c "$URI" undefine --nvram "$name" >/dev/null 2>&1 \
        || virsh -c "$URI" undefine "$name" >/dev/null 2>&1 || true
    done
    virsh -c "$URI" pool-destroy "$POOL" >/dev/null 2>&1 || true
    virsh -c "$URI" pool-undefine "$POOL" >/dev/null 2>&1 || true
  fi
  # The processes `up` started, by the pid files it wrote; nothing by name but what
  # runs from the bed's own virtualenv.
  for p in sushy libvirtd virtlogd; do
    f="$BED_DIR/run/$p.pid"
    if [ -s "$f" ]; then
      pid="$(cat "$f" 2>/dev/null || true)"
      # Never 0 or 1: `kill 0` would stop the caller's whole process group.
      if [[ "$pid" =~ ^[0-9]+$ ]] && [ "$pid" -gt 1 ]; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
      fi
      rm -f "$f"
    fi
  done
  pkill -f "$venv/bin/sushy-emulator" 2>/dev/null || true
  pkill -f "$venv/bin/vbmcd" 2>/dev/null || true
  for _ in $(seq 1 50); do pgrep -f "$venv/bin/vbmcd" >/dev/null || break; sleep 0.1; done
  pkill -9 -f "$venv/bin/vbmcd" 2>/dev/null || true
  # The bed's machines: their QEMU runs with -name guest=ironic-bed-N and a disk under
  # $BED_DIR (a machine of the host's of that name has its disk elsewhere).
  pkill -f "qemu-system-x86_64.*guest=ironic-bed-.*$BED_DIR/machines" 2>/dev/null || true
  # What `up` made (the private libvirt's folders are plain folders outside its
  # namespace, which ended with its daemons).
  rm -rf --one-file-system "$BED_DIR/machines" "$BED_DIR/pool" "$BED_DIR/vbmc" "$LV"
}

# What an all-in-one on this host needs to serve the bed's machines: the machines reach
# the host's loopback at 10.0.2.2 (QEMU's user network), sushy-tools fetches virtual
# media on the host itself; heartbeats every 9-18 s instead of 90-180 s; automated
# cleaning erases the disks' metadata but not the whole disks (as upstream's devstack:
# shredding 5 GiB under emulation takes long).
service() {
  cat <<ENV
IRONIC_API__LISTEN=127.0.0.1:$BED_API_PORT
IRONIC_API__RAMDISK_HEARTBEAT_TIMEOUT=30
IRONIC_DEPLOY__HTTP_LISTEN=127.0.0.1:$BED_HTTP_PORT
IRONIC_DEPLOY__HTTP_URL=http://10.0.2.2:$BED_HTTP_PORT
IRONIC_DEPLOY__EXTERNAL_HTTP_URL=http://127.0.0.1:$BED_HTTP_PORT
IRONIC_DEPLOY__EXTERNAL_CALLBACK_URL=http://10.0.2.2:$BED_API_PORT
IRONIC_DEPLOY__ERASE_DEVICES_PRIORITY=0
IRONIC_CONDUCTOR__FILE_URL_ALLOWED_PATHS=["$IRONIC_TEST_DATA/ramdisk"]
ENV
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  service) service ;;
  prepare) ensure_packages ;;
  *) echo "usage: $0 up N | service | down | prepare" >&2; exit 2 ;;
esac
