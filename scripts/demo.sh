#!/usr/bin/env bash
# Two processes sharing one container: a "widget" presenting a file and a "host" writing it — through the
# coordinator, and once behind its back with the shell. Runs on a fresh temporary container unless
# GROUP_CONTAINER_ROOT is set.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(swift build --show-bin-path)/groupctl
if [ -z "${GROUP_CONTAINER_ROOT:-}" ]; then
  GROUP_CONTAINER_ROOT=$(mktemp -d /tmp/groupcontainer-demo.XXXXXX)
  trap 'rm -rf "$GROUP_CONTAINER_ROOT"' EXIT
fi
export GROUP_CONTAINER_ROOT
group=group.com.example.demo
item=Documents/countdown.txt

host() { echo "[host]   $*"; }

# The widget: a presenter in its own process, printing each callback it gets.
"$bin" present "$group" "$item" > >(sed -u 's/^/[widget] /') &
widget=$!
trap 'kill $widget 2>/dev/null || true; rm -rf "${GROUP_CONTAINER_ROOT:?}/$group"' EXIT
sleep 0.5

for left in 30 20 10; do
  host "coordinated write: $left seconds left"
  echo "$left" | "$bin" write "$group" "$item"
  sleep 0.3
done
host "coordinated read: $("$bin" read "$group" "$item")"
sleep 0.3
host "uncoordinated write (shell echo), seen through inotify"
echo 0 > "$GROUP_CONTAINER_ROOT/$group/$item"
sleep 0.5
host "status:"
"$bin" status "$group" | sed 's/^/[host]   /'
host "refusing a path that escapes the container:"
"$bin" read "$group" ../../etc/passwd 2>&1 | sed 's/^/[host]   /' || true
kill "$widget" 2>/dev/null || true
wait "$widget" 2>/dev/null || true
sleep 0.1
