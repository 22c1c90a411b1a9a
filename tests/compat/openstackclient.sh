#!/usr/bin/env bash
# Compatibility check with the real clients: `openstack baremetal ...` from
# python-openstackclient + python-ironicclient (PyPI) against our API.
# Not part of CI (it needs PyPI). Creates .venv/ at the top of the repository on first use.
#   bash tests/compat/openstackclient.sh          # the all-in-one server (SQLite)
#   bash tests/compat/openstackclient.sh --split  # ironic-api + 2 ironic-conductor
#        processes over RabbitMQ (a vhost of its own) and PostgreSQL (a database of its
#        own); needs rabbitmqctl (root) and PostgreSQL trust auth on 127.0.0.1
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x .venv/bin/openstack ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q python-openstackclient python-ironicclient
fi
# bcrypt makes the htpasswd entries of the policy section below.
.venv/bin/python -c 'import bcrypt' 2>/dev/null || .venv/bin/pip install -q bcrypt
# The ramdisk agent's own API client (ironic-python-agent) drives lookup and heartbeat.
.venv/bin/python -c 'import ironic_python_agent' 2>/dev/null || .venv/bin/pip install -q ironic-python-agent
# Debian's tools the checks below run, installed as `scripts/test.sh` installs them:
# ipmitool (the `ipmi` driver) and xorriso (the direct deploy's config drive).
apt_tools=()
for t in ipmitool xorriso; do command -v "$t" >/dev/null || apt_tools+=("$t"); done
if [ "${#apt_tools[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && SUDO=sudo
  echo "== installing ${apt_tools[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_tools[@]}" >/dev/null
fi
split=0; [ "${1:-}" = --split ] && split=1
# `cmd | grep -q` fails under pipefail when grep stops reading early and cmd dies of
# the broken pipe: read everything first.
contains() { local all; all=$(cat); grep -q "$@" <<<"$all"; }
# The fake IPMI BMC below keeps up with any pace.
export IRONIC_IPMI__MIN_COMMAND_INTERVAL=0
cargo build -q --bin ironic --bin ironic-api --bin ironic-conductor --bin ironic-dbsync --bin fake-agent
T="${CARGO_TARGET_DIR:-target}/debug"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
pids=()
id="compat$$"
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ $split = 1 ]; then
    rabbitmqctl -q delete_vhost "$id" >/dev/null 2>&1 || true
    psql -q postgres://postgres@127.0.0.1:5432/postgres -c "DROP DATABASE IF EXISTS ironic_$id WITH (FORCE)" || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
if [ $split = 1 ]; then
  psql -q postgres://postgres@127.0.0.1:5432/postgres -c "CREATE DATABASE ironic_$id"
  rabbitmqctl -q add_vhost "$id" >/dev/null
  rabbitmqctl -q set_permissions -p "$id" guest '.*' '.*' '.*' >/dev/null
  export IRONIC_DATABASE__URL="postgres://postgres@127.0.0.1:5432/ironic_$id"
  export IRONIC_AMQP__URL="amqp://guest:guest@127.0.0.1:5672/$id"
  "$T/ironic-dbsync" upgrade >/dev/null
  for h in compat-a compat-b; do
    IRONIC_CONDUCTOR__HTTP_LISTEN=127.0.0.1:0 "$T/ironic-conductor" --host "$h" >>"$dir/log" 2>&1 & pids+=($!)
  done
  for _ in $(seq 1 100); do [ "$(grep -c 'ironic-conductor serving' "$dir/log")" = 2 ] && break; sleep 0.1; done
  "$T/ironic-api" --listen "127.0.0.1:$port" >>"$dir/log" 2>&1 & pids+=($!)
else
  "$T/ironic" --listen "127.0.0.1:$port" --database "sqlite://$dir/ironic.sqlite" --host compat >"$dir/log" 2>&1 &
  pids+=($!)
fi
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done

os() { .venv/bin/openstack --os-endpoint "http://127.0.0.1:$port" --os-auth-type none "$@"; }
fail() { echo "FAIL: $*" >&2; tail -20 "$dir/log" >&2; exit 1; }

echo "== driver list"
[ "$(os baremetal driver list -f value -c name | sort | tr '\n' ' ')" = "fake-hardware ipmi oneview redfish " ] \
  || fail "driver list: $(os baremetal driver list -f value)"

echo "== node create"
uuid=$(os baremetal node create --driver fake-hardware --name compat-1 --resource-class rc-compat \
  --property cpus=4 --extra rack=r1 -f value -c uuid)
[ -n "$uuid" ] || fail "node create returned no uuid"
os baremetal node create --driver fake-hardware --name compat-2 -f value -c uuid >/dev/null

echo "== node list"
[ "$(os baremetal node list -f value -c Name | sort | tr '\n' ' ')" = "compat-1 compat-2 " ] || fail "node list"
long=$(os baremetal node list --long -f json)
grep -q '"resource_class": "rc-compat"' <<<"$long" || fail "node list --long"
[ "$(os baremetal node list --resource-class rc-compat -f value -c Name)" = compat-1 ] || fail "filter"

echo "== node show"
[ "$(os baremetal node show compat-1 -f value -c uuid)" = "$uuid" ] || fail "show by name"
[ "$(os baremetal node show "$uuid" -f value -c provision_state)" = enroll ] || fail "show by uuid"

echo "== node set / unset"
os baremetal node set compat-1 --extra owner=ops --property memory_mb=1024 --description "set by compat"
extra=$(os baremetal node show compat-1 -f json -c extra)
echo "$extra" | grep >/dev/null '"owner": "ops"' || fail "set extra: $extra"
[ "$(os baremetal node show compat-1 -f value -c description)" = "set by compat" ] || fail "set description"
os baremetal node set compat-1 --name compat-renamed
[ "$(os baremetal node show "$uuid" -f value -c name)" = compat-renamed ] || fail "rename"
os baremetal node unset compat-renamed --extra owner --property cpus --description
extra=$(os baremetal node show "$uuid" -f json -c extra -c properties)
echo "$extra" | grep >/dev/null '"owner"' && fail "unset extra: $extra"
echo "$extra" | grep >/dev/null '"cpus"' && fail "unset property: $extra"
os baremetal node maintenance set "$uuid" --reason compat
[ "$(os baremetal node show "$uuid" -f value -c maintenance_reason)" = compat ] || fail "maintenance"
os baremetal node maintenance unset "$uuid"
[ "$(os baremetal node show "$uuid" -f value -c maintenance)" = False ] || fail "maintenance unset"
os baremetal node add trait "$uuid" CUSTOM_COMPAT
[ "$(os baremetal node trait list "$uuid" -f value)" = CUSTOM_COMPAT ] || fail "traits"

echo "== conductors"
if [ $split = 1 ]; then want="compat-a compat-b "; else want="compat "; fi
[ "$(os baremetal conductor list -f value -c Hostname | sort | tr '\n' ' ')" = "$want" ] || fail "conductor list"
owner=$(os baremetal node show "$uuid" -f value -c conductor)
case " $want" in *" $owner "*) ;; *) fail "node conductor field: $owner";; esac
[ "$(os baremetal conductor show "$owner" -f value -c alive)" = True ] || fail "conductor show"

echo "== provisioning and cleaning"
wait_state() {
  for _ in $(seq 1 100); do
    [ "$(os baremetal node show "$1" -f value -c provision_state)" = "$2" ] && return 0
    sleep 0.1
  done
  fail "$1 never reached $2"
}
os baremetal node manage compat-2
wait_state compat-2 manageable
echo '[{"interface": "vendor", "step": "log_passthrough"}, {"interface": "bios", "step": "apply_configuration", "args": {"settings": [{"name": "x", "value": 1}]}}]' >"$dir/steps.json"
os baremetal node clean compat-2 --clean-steps "$dir/steps.json"
wait_state compat-2 manageable
echo '[{"interface": "deploy", "step": "sleep", "args": {"seconds": 60}}]' | os baremetal node clean compat-2 --clean-steps -
wait_state compat-2 "clean wait"
os baremetal node abort compat-2
wait_state compat-2 "clean failed"
os baremetal node show compat-2 -f value -c last_error | grep >/dev/null "aborted" || fail "abort message"
os baremetal node manage compat-2
os baremetal node provide compat-2
wait_state compat-2 available
os baremetal node deploy compat-2
wait_state compat-2 active
os baremetal node power off compat-2
[ "$(os baremetal node show compat-2 -f value -c power_state)" = "power off" ] || fail "power off"
os baremetal node power on compat-2
os baremetal node validate compat-2 -f value -c Interface -c Result | grep >/dev/null "power True" || fail "validate"
os baremetal node undeploy compat-2
wait_state compat-2 available

echo "== allocations"
os baremetal node set compat-2 --resource-class rc-alloc
os baremetal node add trait compat-2 CUSTOM_ALLOC
a=$(os baremetal allocation create --resource-class rc-alloc --trait CUSTOM_ALLOC --name compat-alloc \
  --extra purpose=compat --wait 30 -f value -c uuid)
[ -n "$a" ] || fail "allocation create"
[ "$(os baremetal allocation show compat-alloc -f value -c state)" = active ] || fail "allocation state"
node2=$(os baremetal node show compat-2 -f value -c uuid)
[ "$(os baremetal allocation show "$a" -f value -c node_uuid)" = "$node2" ] || fail "allocation node"
[ "$(os baremetal node show compat-2 -f value -c allocation_uuid)" = "$a" ] || fail "node allocation_uuid"
# ?associated= (partial indexes, migrations/*/0018_associated_indexes.sql)
[ "$(os baremetal node list --associated -f value -c Name)" = compat-2 ] || fail "node list --associated"
[ "$(os baremetal node list --unassociated -f value -c Name)" = compat-renamed ] || fail "node list --unassociated"
[ "$(os baremetal allocation list -f value -c UUID)" = "$a" ] || fail "allocation list"
[ "$(os baremetal allocation list --state active --resource-class rc-alloc -f value -c UUID)" = "$a" ] \
  || fail "allocation list filters"
[ "$(os baremetal allocation list --node compat-2 -f value -c UUID)" = "$a" ] || fail "allocation list --node"
os baremetal allocation set compat-alloc --name compat-alloc-2 --extra more=yes
[ "$(os baremetal allocation show "$a" -f value -c name)" = compat-alloc-2 ] || fail "allocation set"
os baremetal allocation unset compat-alloc-2 --extra more
os baremetal allocation show "$a" -f json -c extra | grep >/dev/null '"more"' && fail "allocation unset"
if os baremetal allocation create --resource-class rc-nothing --wait 30 2>"$dir/err" >/dev/null; then
  fail "an allocation with no node succeeded"
fi
grep -q "no available nodes match the resource class rc-nothing" "$dir/err" || fail "allocation error: $(cat "$dir/err")"
os baremetal allocation delete "$a"
[ -z "$(os baremetal node show compat-2 -f value -c instance_uuid | grep -v None)" ] || fail "allocation delete"
for x in $(os baremetal allocation list -f value -c UUID); do os baremetal allocation delete "$x"; done
[ -z "$(os baremetal allocation list -f value -c UUID)" ] || fail "allocation cleanup"

echo "== deploy templates"
os baremetal deploy template create CUSTOM_COMPAT_RAID1 \
  --steps '[{"interface": "raid", "step": "apply_configuration", "args": {"raid_config": {"logical_disks": [{"size_gb": "MAX", "raid_level": "1"}]}}, "priority": 150}]' \
  --extra team=storage -f value -c uuid >/dev/null
[ "$(os baremetal deploy template list -f value -c Name)" = CUSTOM_COMPAT_RAID1 ] || fail "deploy template list"
os baremetal deploy template show CUSTOM_COMPAT_RAID1 -f json -c steps | grep >/dev/null apply_configuration \
  || fail "deploy template show"
os baremetal deploy template list --long -f json | grep >/dev/null '"team": "storage"' || fail "deploy template list --long"
os baremetal deploy template set CUSTOM_COMPAT_RAID1 --name CUSTOM_COMPAT_RAID1_V2 --extra more=yes
[ "$(os baremetal deploy template show CUSTOM_COMPAT_RAID1_V2 -f value -c name)" = CUSTOM_COMPAT_RAID1_V2 ] \
  || fail "deploy template set"
os baremetal deploy template unset CUSTOM_COMPAT_RAID1_V2 --extra more
os baremetal deploy template show CUSTOM_COMPAT_RAID1_V2 -f json -c extra | grep >/dev/null '"more"' && fail "deploy template unset"
if os baremetal deploy template create not-a-trait --steps '[]' 2>"$dir/err" >/dev/null; then
  fail "an invalid deploy template was created"
fi
grep -q "Schema error" "$dir/err" || fail "deploy template error: $(cat "$dir/err")"
# A deploy through the template runs its step (the fake journal shows it).
os baremetal node add trait compat-2 CUSTOM_COMPAT_RAID1_V2
os baremetal node set compat-2 --instance-info 'traits=["CUSTOM_COMPAT_RAID1_V2"]'
os baremetal node deploy compat-2
wait_state compat-2 active
os baremetal node show compat-2 -f json -c driver_internal_info | grep >/dev/null '"raid.apply_configuration"' \
  || fail "the template's step did not run: $(os baremetal node show compat-2 -f json -c driver_internal_info -c instance_info -c traits)"
os baremetal node undeploy compat-2
wait_state compat-2 available
os baremetal deploy template delete CUSTOM_COMPAT_RAID1_V2
[ -z "$(os baremetal deploy template list -f value -c Name)" ] || fail "deploy template delete"

echo "== retirement"
os baremetal node manage compat-2
wait_state compat-2 manageable
os baremetal node set compat-2 --retired --retired-reason "end of life"
[ "$(os baremetal node show compat-2 -f value -c retired)" = True ] || fail "node set --retired"
[ "$(os baremetal node show compat-2 -f value -c retired_reason)" = "end of life" ] || fail "retired_reason"
[ "$(os baremetal node list --retired -f value -c Name)" = compat-2 ] || fail "node list --retired"
if os baremetal node provide compat-2 2>"$dir/err"; then fail "a retired node was provided"; fi
grep -q "retired" "$dir/err" || fail "provide error: $(cat "$dir/err")"
os baremetal node unset compat-2 --retired
[ "$(os baremetal node show compat-2 -f value -c retired)" = False ] || fail "node unset --retired"
[ -z "$(os baremetal node list --retired -f value -c Name)" ] || fail "node list --retired after unset"
os baremetal node provide compat-2
wait_state compat-2 available

echo "== errors reach the user"
if os baremetal node show no-such-node 2>"$dir/err"; then fail "show of a missing node succeeded"; fi
grep -q "could not be found" "$dir/err" || fail "error message: $(cat "$dir/err")"

echo "== chassis"
ch=$(os baremetal chassis create --description "rack 1" --extra row=a -f value -c uuid)
[ -n "$ch" ] || fail "chassis create"
[ "$(os baremetal chassis list -f value -c UUID)" = "$ch" ] || fail "chassis list"
[ "$(os baremetal chassis show "$ch" -f value -c description)" = "rack 1" ] || fail "chassis show"
os baremetal chassis list --long -f json | grep >/dev/null '"row": "a"' || fail "chassis list --long"
os baremetal chassis set "$ch" --description "rack 1, row a" --extra power=pdu-3
os baremetal chassis show "$ch" -f json -c extra | grep >/dev/null '"power": "pdu-3"' || fail "chassis set"
os baremetal chassis unset "$ch" --extra power
os baremetal chassis show "$ch" -f json -c extra | grep >/dev/null '"power"' && fail "chassis unset"
os baremetal node create --driver fake-hardware --name compat-ch --chassis-uuid "$ch" -f value -c uuid >/dev/null
[ "$(os baremetal node list --chassis "$ch" -f value -c Name)" = compat-ch ] || fail "node list --chassis"
if os baremetal chassis delete "$ch" 2>"$dir/err"; then fail "a chassis with nodes was deleted"; fi
grep -q "contains nodes" "$dir/err" || fail "chassis delete error: $(cat "$dir/err")"
os baremetal node delete compat-ch
os baremetal chassis delete "$ch"
[ -z "$(os baremetal chassis list -f value -c UUID)" ] || fail "chassis delete"

echo "== ports and port groups"
pn=$(os baremetal node create --driver fake-hardware --name compat-nic -f value -c uuid)
pg=$(os baremetal port group create --node "$pn" --name bond0 --address 52:54:00:00:aa:00 \
  --mode 802.3ad --property miimon=100 --support-standalone-ports -f value -c uuid)
[ -n "$pg" ] || fail "port group create"
[ "$(os baremetal port group list -f value -c Name)" = bond0 ] || fail "port group list"
[ "$(os baremetal port group show bond0 -f value -c mode)" = 802.3ad ] || fail "port group show"
os baremetal port group set bond0 --extra team=net --name bond1
os baremetal port group show bond1 -f json -c extra | grep >/dev/null '"team": "net"' || fail "port group set"
os baremetal port group unset bond1 --extra team
os baremetal port group show bond1 -f json -c extra | grep >/dev/null '"team"' && fail "port group unset"
p1=$(os baremetal port create 52:54:00:00:AA:01 --node "$pn" --physical-network physnet1 \
  --local-link-connection switch_id=0a:1b:2c:3d:4e:5f --local-link-connection port_id=Eth1/1 \
  --port-group "$pg" -f value -c uuid)
[ -n "$p1" ] || fail "port create"
[ "$(os baremetal port show "$p1" -f value -c address)" = 52:54:00:00:aa:01 ] || fail "port show"
[ "$(os baremetal port show "$p1" -f value -c portgroup_uuid)" = "$pg" ] || fail "port in group"
p2=$(os baremetal port create 52:54:00:00:aa:02 --node "$pn" -f value -c uuid)
[ "$(os baremetal port list --node compat-nic -f value -c Address | sort | tr '\n' ' ')" = "52:54:00:00:aa:01 52:54:00:00:aa:02 " ] \
  || fail "port list --node: $(os baremetal port list --node compat-nic -f value)"
[ "$(os baremetal port list --port-group bond1 -f value -c UUID)" = "$p1" ] || fail "port list --port-group"
[ "$(os baremetal port list --address 52:54:00:00:aa:02 -f value -c UUID)" = "$p2" ] || fail "port list --address"
os baremetal port list --long -f json | grep >/dev/null '"physical_network": "physnet1"' || fail "port list --long"
os baremetal port set "$p2" --extra slot=two --pxe-disabled
os baremetal port show "$p2" -f json -c extra | grep >/dev/null '"slot": "two"' || fail "port set"
[ "$(os baremetal port show "$p2" -f value -c pxe_enabled)" = False ] || fail "port set --pxe-enabled"
os baremetal port unset "$p2" --extra slot
os baremetal port show "$p2" -f json -c extra | grep >/dev/null '"slot"' && fail "port unset"
if os baremetal port create 52:54:00:00:aa:02 --node "$pn" 2>"$dir/err"; then fail "a duplicate MAC was accepted"; fi
grep -q "already exists" "$dir/err" || fail "duplicate MAC error: $(cat "$dir/err")"
if os baremetal port group delete bond1 2>"$dir/err"; then fail "a port group with ports was deleted"; fi
grep -q "contains ports" "$dir/err" || fail "port group delete error: $(cat "$dir/err")"
echo "== VIFs"
os baremetal node set compat-nic --network-interface flat
os baremetal node vif attach compat-nic vif-a
os baremetal node vif attach compat-nic vif-b --port-uuid "$p2"
[ "$(os baremetal node vif list compat-nic -f value -c ID | sort | tr '\n' ' ')" = "vif-a vif-b " ] \
  || fail "node vif list: $(os baremetal node vif list compat-nic -f value)"
os baremetal port group show bond1 -f json -c internal_info | grep >/dev/null '"tenant_vif_port_id": "vif-a"' \
  || fail "the VIF went to the port group first"
if os baremetal node vif attach compat-nic vif-c 2>"$dir/err"; then fail "a VIF without a free port was attached"; fi
grep -q "not enough free physical ports" "$dir/err" || fail "vif attach error: $(cat "$dir/err")"
os baremetal node vif detach compat-nic vif-a
os baremetal node vif detach compat-nic vif-b
[ -z "$(os baremetal node vif list compat-nic -f value -c ID)" ] || fail "node vif detach"
os baremetal port delete "$p1"
os baremetal port group delete bond1
[ -z "$(os baremetal port group list -f value -c UUID)" ] || fail "port group delete"
os baremetal node delete compat-nic
[ -z "$(os baremetal port list -f value -c UUID)" ] || fail "a deleted node's ports remain"

echo "== volume connectors and targets"
vn=$(os baremetal node create --driver fake-hardware --name compat-vol -f value -c uuid)
vc=$(os baremetal volume connector create --node "$vn" --type iqn \
  --connector-id iqn.2017-07.org.openstack:01:compat -f value -c uuid)
[ "$(os baremetal volume connector list -f value -c UUID)" = "$vc" ] || fail "volume connector list"
[ "$(os baremetal volume connector show "$vc" -f value -c type)" = iqn ] || fail "volume connector show"
vt=$(os baremetal volume target create --node "$vn" --type iscsi --boot-index 0 --volume-id vol-1 \
  --property target_lun=0 -f value -c uuid)
[ "$(os baremetal volume target list --node compat-vol -f value -c UUID)" = "$vt" ] || fail "volume target list"
if os baremetal volume target set "$vt" --volume-id vol-2 2>"$dir/err"; then fail "a target changed on a node not powered off"; fi
grep -q "can not be performed on node" "$dir/err" || fail "volume target set error: $(cat "$dir/err")"
os baremetal node power off compat-vol
os baremetal volume target set "$vt" --volume-id vol-2 --extra a=b
[ "$(os baremetal volume target show "$vt" -f value -c volume_id)" = vol-2 ] || fail "volume target set"
os baremetal volume target unset "$vt" --extra a
os baremetal volume connector set "$vc" --extra a=b
os baremetal volume connector show "$vc" -f json -c extra | grep >/dev/null '"a": "b"' || fail "volume connector set"
os baremetal volume connector unset "$vc" --extra a
if os baremetal volume target create --node "$vn" --type iscsi --boot-index 0 --volume-id vol-3 2>"$dir/err"; then
  fail "a second boot index 0 was accepted"; fi
grep -q "boot index '0'" "$dir/err" || fail "boot index error: $(cat "$dir/err")"
os baremetal volume target delete "$vt"
os baremetal volume connector delete "$vc"
[ -z "$(os baremetal volume connector list -f value -c UUID)$(os baremetal volume target list -f value -c UUID)" ] \
  || fail "volume delete"
os baremetal node delete compat-vol

echo "== console, boot device, NMI, RAID, BIOS, passthru"
os baremetal node create --driver fake-hardware --name compat-hw -f value -c uuid >/dev/null
[ "$(os baremetal node console show compat-hw -f value -c console_enabled)" = False ] || fail "console show"
os baremetal node console enable compat-hw
[ "$(os baremetal node console show compat-hw -f value -c console_enabled)" = True ] || fail "console enable"
os baremetal node console disable compat-hw
[ "$(os baremetal node console show compat-hw -f value -c console_enabled)" = False ] || fail "console disable"
os baremetal node boot device set compat-hw pxe --persistent
[ "$(os baremetal node boot device show compat-hw -f value -c boot_device)" = pxe ] || fail "boot device show"
os baremetal node boot device show compat-hw --supported -f value | grep >/dev/null 'pxe' || fail "boot device --supported"
if os baremetal node inject nmi compat-hw 2>"$dir/err"; then fail "the fake injected an NMI"; fi
grep -q "does not support inject_nmi" "$dir/err" || fail "inject nmi error: $(cat "$dir/err")"
os baremetal node set compat-hw --target-raid-config '{"logical_disks": [{"size_gb": 10, "raid_level": "1"}]}'
os baremetal node show compat-hw -f json -c target_raid_config | grep >/dev/null '"raid_level": "1"' || fail "target raid config"
os baremetal driver raid property list fake-hardware -f value | grep >/dev/null raid_level || fail "driver raid property list"
[ "$(os baremetal node bios setting show compat-hw LogicalProc -f value -c value)" = Enabled ] || fail "bios setting show"
os baremetal node bios setting list compat-hw -f value | grep >/dev/null BootMode || fail "bios setting list"
os baremetal node passthru list compat-hw -f value | grep >/dev/null echo || fail "node passthru list"
os baremetal driver passthru list fake-hardware -f value | grep >/dev/null echo || fail "driver passthru list"
os baremetal node passthru call compat-hw echo --arg x=1 || fail "node passthru call"
os baremetal node delete compat-hw
if os baremetal node show compat-hw 2>/dev/null; then fail "node delete"; fi

echo "== above 1.62: shards, boot mode, inspection rules, inspection and inventory, history, BIOS registry, children, firmware, virtual media"
os baremetal node create --driver fake-hardware --name compat-new --shard compat-shard -f value -c uuid >/dev/null
os baremetal shard list -f value | grep >/dev/null "compat-shard" || fail "shard list: $(os baremetal shard list -f value)"
[ "$(os baremetal node list --shards compat-shard -f value -c Name)" = compat-new ] || fail "node list --shards"
os baremetal node boot mode set compat-new uefi
os baremetal node secure boot on compat-new
[ "$(os baremetal node show compat-new -f value -c boot_mode)" = uefi ] || fail "boot mode set"
[ "$(os baremetal node show compat-new -f value -c secure_boot)" = True ] || fail "secure boot on"
os baremetal node manage compat-new
wait_state compat-new manageable
rule=$(os baremetal inspection rule create --description compat --priority 10 \
  --conditions '[{"op": "eq", "args": {"values": ["{inventory[cpu][architecture]}", "x86_64"]}}]' \
  --actions '[{"op": "add-trait", "args": {"name": "CUSTOM_COMPAT_IR"}}, {"op": "set-attribute", "args": {"path": "/extra/arch", "value": "arch-{inventory[cpu][architecture]}"}}]' \
  -f value -c uuid)
os baremetal inspection rule create --actions '[{"op": "log", "args": {"msg": "seen {node.name}"}}]' -f value -c uuid >"$dir/rule2"
[ "$(os baremetal inspection rule list -f value -c UUID | wc -l)" = 2 ] || fail "inspection rule list"
os baremetal inspection rule set "$rule" --priority 20
[ "$(os baremetal inspection rule show "$rule" -f value -c priority)" = 20 ] || fail "inspection rule set"
os baremetal inspection rule unset "$rule" --description
[ "$(os baremetal inspection rule show "$rule" -f value -c description)" = None ] || fail "inspection rule unset"
os baremetal inspection rule list --long -f value -c Actions | grep >/dev/null CUSTOM_COMPAT_IR || fail "inspection rule list --long"
os baremetal inspection rule delete "$(cat "$dir/rule2")"
os baremetal node inspect compat-new
wait_state compat-new manageable
os baremetal node trait list compat-new -f value | grep >/dev/null CUSTOM_COMPAT_IR || fail "inspection rule did not add its trait"
os baremetal node show compat-new -f json -c extra | grep >/dev/null '"arch": "arch-x86_64"' || fail "inspection rule did not set extra"
os baremetal inspection rule delete "$rule"
[ -z "$(os baremetal inspection rule list -f value -c UUID)" ] || fail "inspection rule delete"
os baremetal node inventory save compat-new --file "$dir/inventory.json"
grep -q '"architecture": "x86_64"' "$dir/inventory.json" || fail "inventory save: $(cat "$dir/inventory.json")"
[ "$(os baremetal node show compat-new -f value -c properties | grep -c "'cpus': 8")" = 1 ] || fail "inspected properties"
[ "$(os baremetal port list --node compat-new -f value -c Address | wc -l)" = 1 ] || fail "inspection ports"
os baremetal node history list compat-new -f value | grep >/dev/null "Provision state changed from enroll to verifying" \
  || fail "history list: $(os baremetal node history list compat-new -f value)"
event=$(os baremetal node history list compat-new -f value -c UUID | sed -n 1p)
os baremetal node history get compat-new "$event" -f value | grep >/dev/null "provisioning" || fail "history get"
os baremetal node bios setting list compat-new --long -f value | grep >/dev/null LogicalProc || fail "bios setting list --long"
os baremetal node create --driver fake-hardware --name compat-child --parent-node compat-new -f value -c uuid >/dev/null
[ "$(os baremetal node children list compat-new -f value | wc -l)" = 1 ] || fail "node children list"
os baremetal node list -f value -c Name | grep >/dev/null compat-child && fail "a child node in the default list"
os baremetal node list --include-children -f value -c Name | grep >/dev/null compat-child || fail "node list --include-children"
[ "$(os baremetal node list --parent-node compat-new -f value -c Name)" = compat-child ] || fail "node list --parent-node"
os baremetal node delete compat-child
[ "$(os baremetal node firmware list compat-new -f value -c Component | sort | tr '\n' ' ')" = "bios bmc " ] \
  || fail "node firmware list: $(os baremetal node firmware list compat-new -f value)"
# Virtual media (1.89, 1.93): the CLI has no command for it; openstacksdk (installed
# with the CLI) drives it, and the GET of 1.93 shows what is inserted.
.venv/bin/python - "http://127.0.0.1:$port" >"$dir/vm" 2>&1 <<'PY' || fail "vmedia: $(cat "$dir/vm")"
import json, sys, time, urllib.request
import openstack
url = sys.argv[1]
c = openstack.connect(auth_type="none", auth={"endpoint": url}, baremetal_endpoint_override=url)
req = urllib.request.Request(url + "/v1/nodes/compat-new/vmedia", headers={"X-OpenStack-Ironic-API-Version": "1.93"})
def shown_soon(inserted):
    # Done in the background after the 204, as upstream's: looked at for up to 10 s.
    for _ in range(100):
        shown = json.load(urllib.request.urlopen(req))
        if ("http://192.0.2.1/boot.iso" in json.dumps(shown)) == inserted:
            return
        time.sleep(0.1)
    raise AssertionError(shown)
c.baremetal.attach_vmedia_to_node("compat-new", device_type="cdrom", image_url="http://192.0.2.1/boot.iso")
shown_soon(True)
c.baremetal.detach_vmedia_from_node("compat-new")
shown_soon(False)
print("vmedia ok")
PY

echo "== runbooks, hold and unhold, servicing"
echo '[{"interface": "vendor", "step": "log_passthrough", "args": {}, "order": 0}, {"interface": "deploy", "step": "hold", "args": {}, "order": 1}]' >"$dir/rb.json"
os baremetal runbook create --name CUSTOM_COMPAT_RB --steps "$dir/rb.json" --extra team=ops -f value -c uuid >/dev/null
[ "$(os baremetal runbook list -f value -c Name)" = CUSTOM_COMPAT_RB ] || fail "runbook list"
os baremetal runbook set CUSTOM_COMPAT_RB --extra team=infra
os baremetal runbook show CUSTOM_COMPAT_RB -f json -c extra | grep >/dev/null '"team": "infra"' || fail "runbook set"
# From 1.112 a runbook runs on a node that shares one of its traits.
os baremetal runbook trait add CUSTOM_COMPAT_RB CUSTOM_COMPAT_RB CUSTOM_OTHER
[ "$(os baremetal runbook trait list CUSTOM_COMPAT_RB -f value | sort | tr '\n' ' ')" = "CUSTOM_COMPAT_RB CUSTOM_OTHER " ] \
  || fail "runbook trait list: $(os baremetal runbook trait list CUSTOM_COMPAT_RB -f value)"
os baremetal runbook trait remove CUSTOM_COMPAT_RB CUSTOM_OTHER
os baremetal node add trait compat-new CUSTOM_COMPAT_RB
os baremetal node clean compat-new --runbook CUSTOM_COMPAT_RB
wait_state compat-new "clean hold"
os baremetal node unhold compat-new
wait_state compat-new manageable
os baremetal runbook delete CUSTOM_COMPAT_RB
os baremetal node provide compat-new
wait_state compat-new available
os baremetal node deploy compat-new
wait_state compat-new active
echo '[{"interface": "vendor", "step": "log_passthrough", "args": {}}]' | os baremetal node service compat-new --service-steps -
wait_state compat-new active
os baremetal node show compat-new -f json -c driver_internal_info | grep >/dev/null '"step": "vendor.log_passthrough"' \
  || fail "service steps not run"
os baremetal node maintenance set compat-new
os baremetal node delete compat-new

echo "== ramdisk agent: lookup and heartbeat (ironic-python-agent's client)"
agent_node=$(os baremetal node create --driver fake-hardware --name compat-agent -f value -c uuid)
os baremetal port create 52:54:00:aa:bb:cc --node "$agent_node" -f value -c uuid >/dev/null
os baremetal node manage compat-agent
wait_state compat-agent manageable
echo '[{"interface": "deploy", "step": "sleep", "args": {"seconds": 600}}]' | os baremetal node clean compat-agent --clean-steps -
wait_state compat-agent "clean wait"
.venv/bin/python - "http://127.0.0.1:$port" >"$dir/agent" 2>&1 <<'PY' || fail "agent: $(cat "$dir/agent")"
import sys, types
from oslo_config import cfg
from ironic_python_agent import config, ironic_api_client
config.populate_config()
cfg.CONF(args=[], default_config_files=[])
client = ironic_api_client.APIClient(sys.argv[1])
nic = types.SimpleNamespace(mac_address="52:54:00:AA:BB:CC")
found = client.lookup_node({"interfaces": [nic]}, timeout=10, starting_interval=1)
assert found["config"]["agent_token_required"] is True, found
client.agent_token = found["config"]["agent_token"]
assert client.agent_token and client.agent_token != "******", found
# [agent] require_tls (the default): an agent that advertises plain http is refused.
from ironic_python_agent import errors
try:
    client.heartbeat(found["node"]["uuid"], ("192.0.2.20", 9999), advertise_protocol="http")
    raise SystemExit("an http callback URL was accepted")
except errors.HeartbeatError as e:
    assert "require_tls" in str(e), e
client.heartbeat(found["node"]["uuid"], ("192.0.2.20", 9999), advertise_protocol="https")
print("agent ok", found["node"]["uuid"])
PY
os baremetal node show compat-agent -f json -c driver_internal_info | grep >/dev/null '"agent_url": "https://192.0.2.20:9999"' \
  || fail "heartbeat not recorded: $(os baremetal node show compat-agent -f json -c driver_internal_info)"
os baremetal node show compat-agent -f json -c driver_internal_info | grep >/dev/null '"agent_secret_token": "\*\*\*\*\*\*"' \
  || fail "token not masked"
os baremetal node abort compat-agent
wait_state compat-agent "clean failed"
os baremetal node show compat-agent -f json -c driver_internal_info | grep >/dev/null agent_secret_token \
  && fail "the token outlived the cleaning"
os baremetal node manage compat-agent
wait_state compat-agent manageable
os baremetal node delete compat-agent

echo "== in-band inspection (ironic-python-agent's inspector client posts to /v1/continue_inspection)"
insp_node=$(os baremetal node create --driver fake-hardware --name compat-insp --inspect-interface agent -f value -c uuid)
os baremetal port create 52:54:00:aa:bb:dd --node "$insp_node" -f value -c uuid >/dev/null
os baremetal node manage compat-insp
wait_state compat-insp manageable
os baremetal node inspect compat-insp
wait_state compat-insp "inspect wait"
.venv/bin/python - "http://127.0.0.1:$port" "$insp_node" >"$dir/insp" 2>&1 <<'PY' || fail "inspector client: $(cat "$dir/insp")"
import sys
from oslo_config import cfg
from ironic_python_agent import config, inspector, utils
config.populate_config()
cfg.CONF(args=[], default_config_files=[])
cfg.CONF.set_override("api_url", sys.argv[1])
data = {
    "inventory": {
        "interfaces": [{"name": "eth0", "mac_address": "52:54:00:aa:bb:dd"},
                       {"name": "eth1", "mac_address": "52:54:00:aa:bb:de"}],
        "cpu": {"architecture": "aarch64", "count": 2},
    },
    "boot_interface": "01-52-54-00-aa-bb-dd",
}
resp = inspector.call_inspector(data, utils.AccumulatedFailures())
assert resp == {"uuid": sys.argv[2]}, resp
print("inspector ok")
PY
wait_state compat-insp manageable
os baremetal node show compat-insp -f json -c properties | grep >/dev/null '"cpu_arch": "aarch64"' \
  || fail "inspection not applied: $(os baremetal node show compat-insp -f json -c properties)"
os baremetal node inventory save compat-insp --file "$dir/insp-inv.json"
grep -q '52:54:00:aa:bb:de' "$dir/insp-inv.json" || fail "inventory not stored: $(cat "$dir/insp-inv.json")"
os baremetal node delete compat-insp

echo "== real hardware types: ipmi against pyghmi's fake BMC (Debian's ipmitool), redfish details"
.venv/bin/python -c 'import pyghmi' 2>/dev/null || .venv/bin/pip install -q pyghmi
bport=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$dir/bmc.py" <<'PY'
import sys
import pyghmi.ipmi.bmc as bmc
from pyghmi.cmd.fakebmc import FakeBmc

class LoopbackBmc(FakeBmc):
    def __init__(self, port, password):
        bmc.Bmc.__init__(self, {'admin': password}, port=port, address='127.0.0.1')
        self.powerstate = 'off'
        self.bootdevice = 'default'

LoopbackBmc(int(sys.argv[1]), sys.argv[2]).listen()
PY
.venv/bin/python "$dir/bmc.py" "$bport" c0mpat-s3cret >"$dir/bmc.log" 2>&1 & pids+=($!)
[ "$(os baremetal driver show ipmi -f value -c default_power_interface)" = ipmitool ] || fail "driver show ipmi"
os baremetal driver property list redfish -f value -c Property | contains -x redfish_address \
  || fail "redfish properties: $(os baremetal driver property list redfish -f value)"
os baremetal driver property list redfish -f value -c Property | contains -x deploy_ramdisk \
  || fail "redfish properties: no deploy_ramdisk"
# In-band inspection booted by virtual media: the interfaces a node needs are accepted.
os baremetal node create --driver redfish --name compat-vmedia \
  --driver-info redfish_address=http://127.0.0.1:9 --driver-info deploy_kernel=http://127.0.0.1:9/ipa/vmlinuz \
  --driver-info deploy_ramdisk=http://127.0.0.1:9/ipa/initramfs --boot-interface redfish-virtual-media \
  --inspect-interface agent -f value -c uuid >/dev/null
# A file:// reference the conductor may not read (none by default: [conductor]
# file_url_allowed_paths is empty), and kernel parameters that would add iPXE commands,
# are refused when set, with the reason.
if out=$(os baremetal node set compat-vmedia --driver-info deploy_kernel=file:///etc/passwd 2>&1); then
  fail "file:///etc/passwd accepted"
fi
contains "file_url_allowed_paths" <<<"$out" || fail "file:// refusal: $out"
if out=$(os baremetal node set compat-vmedia --instance-info 'kernel_append_params=nofb || chain http://x/y' 2>&1); then
  fail "kernel parameters with || accepted"
fi
contains "kernel parameters" <<<"$out" || fail "kernel parameters refusal: $out"
if os baremetal node show compat-vmedia -f json -c driver_info | contains passwd; then
  fail "the refused reference was stored"
fi
[ "$(os baremetal node show compat-vmedia -f value -c inspect_interface)" = agent ] || fail "inspect_interface agent"
os baremetal node set compat-vmedia --inspect-interface redfish
os baremetal node delete compat-vmedia
os baremetal node create --driver ipmi --name compat-ipmi --driver-info ipmi_address=127.0.0.1 \
  --driver-info ipmi_port="$bport" --driver-info ipmi_username=admin \
  --driver-info ipmi_password=c0mpat-s3cret -f value -c uuid >/dev/null
shown=$(os baremetal node show compat-ipmi -f json -c driver_info)
grep -q '"ipmi_password": "\*\*\*\*\*\*"' <<<"$shown" || fail "password not masked: $shown"
if grep -q c0mpat-s3cret <<<"$shown"; then fail "password shown: $shown"; fi
os baremetal node validate compat-ipmi -f value -c Interface -c Result | contains -x "power True" \
  || fail "validate: $(os baremetal node validate compat-ipmi -f value)"
os baremetal node manage compat-ipmi --wait 60
[ "$(os baremetal node show compat-ipmi -f value -c power_state)" = "power off" ] || fail "power state read"
os baremetal node power on compat-ipmi
for _ in $(seq 1 100); do [ "$(os baremetal node show compat-ipmi -f value -c power_state)" = "power on" ] && break; sleep 0.2; done
ipmitool -I lanplus -H 127.0.0.1 -p "$bport" -U admin -P c0mpat-s3cret power status | contains "is on" \
  || fail "the BMC is not on"
os baremetal node boot device set compat-ipmi pxe --persistent
[ "$(os baremetal node boot device show compat-ipmi -f value -c boot_device)" = pxe ] || fail "boot device"
os baremetal node power off compat-ipmi
for _ in $(seq 1 100); do [ "$(os baremetal node show compat-ipmi -f value -c power_state)" = "power off" ] && break; sleep 0.2; done
ipmitool -I lanplus -H 127.0.0.1 -p "$bport" -U admin -P c0mpat-s3cret power status | contains "is off" \
  || fail "the BMC is not off"
if grep -q c0mpat-s3cret "$dir/log"; then fail "the password reached the log"; fi
os baremetal node delete compat-ipmi

echo "== the direct deploy (a second all-in-one whose agents may call back over plain HTTP; ironic-fake-agent's simulated agent)"
# The real agent on a real machine is crates/ironic/tests/machines.rs; here the clients'
# side: validate, provide, instance_info, deploy with a JSON config drive, undeploy.
dport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
IRONIC_AGENT__REQUIRE_TLS=false IRONIC_DEPLOY__FAST_TRACK=true IRONIC_DEPLOY__ERASE_DEVICES_PRIORITY=0 \
  "$T/ironic" --listen "127.0.0.1:$dport" --database "sqlite://$dir/direct.sqlite" --host compat-d \
  >"$dir/direct.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$dport/" >/dev/null && break; sleep 0.1; done
od() { .venv/bin/openstack --os-endpoint "http://127.0.0.1:$dport" --os-auth-type none baremetal "$@"; }
od_state() {
  for _ in $(seq 1 300); do
    [ "$(od node show compat-direct -f value -c provision_state)" = "$1" ] && return
    sleep 0.2
  done
  fail "compat-direct not $1: $(od node show compat-direct -f json -c provision_state -c last_error)"
}
agent() {
  "$T/fake-agent" --api "http://127.0.0.1:$dport" --mac 52:54:00:aa:bb:e1 --heartbeat-secs 1 \
    >>"$dir/fake-agent.log" 2>&1 &
  apid=$!; pids+=($apid)
}
direct_node=$(od node create --driver fake-hardware --deploy-interface direct --name compat-direct -f value -c uuid)
od port create 52:54:00:aa:bb:e1 --node "$direct_node" -f value -c uuid >/dev/null
od node manage compat-direct --wait 60
od node validate compat-direct -f value -c Interface -c Result -c Reason | grep "^deploy False" | contains image_source \
  || fail "validate without an image: $(od node validate compat-direct -f value)"
od node provide compat-direct
od_state "clean wait"
agent
od_state available
od node show compat-direct -f json -c driver_internal_info | contains '"step": "erase_devices_metadata"' \
  || fail "the agent's clean steps are not cached"
od node set compat-direct --instance-info image_source=http://images.example/disk.raw \
  --instance-info image_os_hash_algo=sha256 --instance-info image_disk_format=raw \
  --instance-info image_os_hash_value=5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03
od node validate compat-direct -f value -c Interface -c Result | contains -x "deploy True" \
  || fail "validate with an image: $(od node validate compat-direct -f value)"
# Fast-track: the agent that cleaned the node deploys it.
od node deploy compat-direct --config-drive '{"meta_data": {"hostname": "compat"}, "user_data": "#cloud-config\n"}' --wait 120
od node show compat-direct -f json -c driver_internal_info | contains '"step": "write_image"' || fail "no write_image step"
[ "$(od node boot device show compat-direct -f value -c boot_device)" = disk ] || fail "boot device after deploy"
od node show compat-direct -f json -c instance_info | contains configdrive && fail "the config drive outlived the deploy"
kill "$apid"
# Rebuild with a config drive file (JSON) whose user data is ~2.7 MiB: the provision
# route takes bodies up to [api] provision_max_body_bytes (64 MiB), as upstream.
python3 -c 'import base64, json, os, sys; json.dump({"meta_data": {"hostname": "big"}, "user_data": base64.b64encode(os.urandom(2 << 20)).decode()}, open(sys.argv[1], "w"))' "$dir/big-drive.json"
od node rebuild compat-direct --config-drive "$dir/big-drive.json"
od_state "wait call-back"
agent
od_state active
od node show compat-direct -f value -c last_error | contains -x None || fail "rebuild: $(od node show compat-direct -f value -c last_error)"
kill "$apid"
od node undeploy compat-direct
od_state "clean wait"
agent
od_state available
[ "$(od node show compat-direct -f value -c instance_info)" = "{}" ] || fail "instance_info after undeploy"
kill "$apid"
od node delete compat-direct

echo "== node delete"
os baremetal node delete compat-renamed compat-2
[ -z "$(os baremetal node list -f value -c UUID)" ] || fail "delete"
echo "== projects and roles (http_basic, a second all-in-one server)"
pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
.venv/bin/python - "$dir/htpasswd" <<'PY'
import bcrypt, sys
h = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
open(sys.argv[1], "w").write("".join(f"{u}:{h}\n" for u in ("admin", "alice", "bob")))
PY
cat >"$dir/roles.toml" <<'TOML'
[users.admin]
roles = ["admin"]
[users.alice]
project = "p1"
roles = ["member"]
[users.bob]
project = "p2"
roles = ["reader"]
TOML
IRONIC_API__AUTH_STRATEGY=http_basic IRONIC_API__HTTP_BASIC_AUTH_USER_FILE="$dir/htpasswd" \
  IRONIC_API__HTTP_BASIC_ROLES_FILE="$dir/roles.toml" \
  "$T/ironic" --listen "127.0.0.1:$pport" --database "sqlite://$dir/policy.sqlite" --host compat-p \
  >"$dir/policy.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$pport/" >/dev/null && break; sleep 0.1; done
as() {
  local user=$1; shift
  .venv/bin/openstack --os-auth-type http_basic --os-endpoint "http://127.0.0.1:$pport" \
    --os-username "$user" --os-password pw "$@"
}
as admin baremetal node create --driver fake-hardware --name pol-1 --owner p1 -f value -c uuid >/dev/null
as admin baremetal node create --driver fake-hardware --name pol-2 -f value -c uuid >/dev/null
[ "$(as admin baremetal node list -f value -c Name | sort | tr '\n' ' ')" = "pol-1 pol-2 " ] || fail "admin list"
[ "$(as alice baremetal node list -f value -c Name)" = pol-1 ] || fail "project list"
[ -z "$(as bob baremetal node list -f value -c Name)" ] || fail "another project's list"
if as bob baremetal node show pol-1 2>"$dir/err" >/dev/null; then fail "bob saw p1's node"; fi
grep -q "could not be found" "$dir/err" || fail "hidden node: $(cat "$dir/err")"
as alice baremetal node set pol-1 --extra rack=r2
as alice baremetal node show pol-1 -f json -c extra | grep >/dev/null '"rack": "r2"' || fail "member set extra"
if as alice baremetal node set pol-1 --owner p2 2>"$dir/err"; then fail "a member changed the owner"; fi
grep -q "Access was denied to the following resource: baremetal:node:update:owner" "$dir/err" \
  || fail "owner change error: $(cat "$dir/err")"
if as alice baremetal driver list 2>"$dir/err" >/dev/null; then fail "a project listed drivers"; fi
grep -q "baremetal:driver:get" "$dir/err" || fail "driver list error: $(cat "$dir/err")"
if as alice --os-password wrong baremetal node list 2>/dev/null; then fail "a wrong password got in"; fi

echo "openstack baremetal compatibility: OK"
