#!/usr/bin/env bash
# After a test run: fails (and kills them) when processes of the run are still alive — anything started from this
# package's build products or with the run's temp directory in its environment — then removes the temp directory.
# Usage: scripts/test-leftovers.sh <run-temp-dir>
set -u
run="$1"
products="$(cd "$(dirname "$0")/.." && pwd)/.build"
examples="$(cd "$(dirname "$0")/.." && pwd)/Examples/.build"
# A process in another mount namespace sees other files at these paths (another checkout mounted at the same place):
# not this run's, whatever its executable's path.
namespace=$(readlink /proc/self/ns/mnt)
left=()
for dir in /proc/[0-9]*; do
  pid=${dir#/proc/}
  [ "$pid" = "$$" ] && continue
  exe=$(readlink "$dir/exe" 2>/dev/null) || continue
  [ "$(readlink "$dir/ns/mnt" 2>/dev/null)" = "$namespace" ] || continue
  if [[ "$exe" == "$products"/* || "$exe" == "$examples"/* ]] || tr '\0' '\n' < "$dir/environ" 2>/dev/null | grep -qx "TMPDIR=$run"; then
    left+=("$pid $(tr '\0' ' ' < "$dir/cmdline" | cut -c1-160)")
  fi
done
status=0
if [ ${#left[@]} -gt 0 ]; then
  echo "test-leftovers: ${#left[@]} process(es) of the test run still alive (killed now):"
  printf '  %s\n' "${left[@]}"
  for entry in "${left[@]}"; do kill -9 "${entry%% *}" 2>/dev/null; done
  status=1
fi
# Unmount anything a test left mounted under the run (small tmpfs disks), then remove the run's directory.
grep -o " $run[^ ]*" /proc/mounts | sort -r | while read -r mount; do umount -l "$mount" 2>/dev/null; done
rm -rf "$run"
exit $status
