#!/usr/bin/env bash
# Invariants docs/architecture.md states, checked at grep level (CI runs this before the
# tests). Each check prints what breaks it and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
breach() { echo "invariant broken: $1"; echo "$2" | sed 's/^/  /'; bad=1; }

# One save path under a node lock: `Held::save` (history, reservation). Nothing else in
# the conductor writes a node row (its tests set rows up through `t.db`).
hits=$(grep -rn 'node_save' crates/ironic-conductor/src --include='*.rs' \
  | grep -v '^crates/ironic-conductor/src/lock.rs:' | grep -v 't\.db\.node_save' || true)
[ -z "$hits" ] || breach "a node written under a lock other than by Held::save (lock.rs)" "$hits"
hits=$(grep -rn 'reservation = Some' crates/ironic-conductor/src --include='*.rs' \
  | grep -v '^crates/ironic-conductor/src/lock.rs:' || true)
[ -z "$hits" ] || breach "a reservation set by hand (Held::save keeps it)" "$hits"

# Typed errors: no function outside tests returns `Result<_, String>` (a line before a
# file's `#[cfg(test)]` is outside its tests).
hits=$(grep -rn --include='*.rs' -e '-> Result<.*, String>' crates \
  | grep -v '/tests/\|/tests\.rs:' \
  | while IFS=: read -r f l _; do
      awk -v l="$l" 'NR < l && /#\[cfg\(test\)\]/ { t = 1 } END { exit !t }' "$f" || echo "$f:$l"
    done || true)
[ -z "$hits" ] || breach "a Result<_, String> outside tests (use a typed error)" "$hits"

# Boot interfaces are implementations (`ironic-drivers` `boot/`), named once in
# `boot::named`: nothing outside the drivers matches on a boot interface's name.
hits=$(grep -rn --include='*.rs' -e '"redfish-virtual-media"' -e 'Some("ipxe"' -e 'Some("pxe"' \
    -e '"ipxe" |' -e '| "pxe"' crates/ironic-conductor/src crates/ironic-api/src || true)
[ -z "$hits" ] || breach "a boot interface chosen by its name outside ironic-drivers boot::named" "$hits"

[ "$bad" = 0 ] && echo "invariants hold"
exit "$bad"
