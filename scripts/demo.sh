#!/usr/bin/env bash
# `make demo`: the Timer host and its Today widget side by side, on a fresh temporary container unless
# GROUP_CONTAINER_ROOT is set.
#   - in a terminal with tmux: two panes (host left, widget right);
#   - in a terminal without tmux: both in this terminal, [host]/[widget] prefixes; keys go to the host;
#   - DEMO_HEADLESS=1 (or no terminal): the scripted scenario; prints both transcripts and exits 0 only if every
#     step happened.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(swift build --show-bin-path)
if [ -z "${GROUP_CONTAINER_ROOT:-}" ]; then
  GROUP_CONTAINER_ROOT=$(mktemp -d /tmp/simpletimer-demo.XXXXXX)
  cleanup_root=1
fi
export GROUP_CONTAINER_ROOT
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  # A host started by the widget's URL is nobody's child here: stop it by its registration.
  pkill -f "^$bin/host" 2>/dev/null || true
  [ -n "${cleanup_root:-}" ] && rm -rf "$GROUP_CONTAINER_ROOT"
  return 0
}
trap cleanup EXIT

# The alarm sound the host downloads in the background comes from the project's own HTTP server (a 1 MB file sent
# at 1 MB/s, so the download outlives the headless host). The server exits when its stdin closes: this script holds
# the write end of a FIFO, so the server goes when the script does.
start_file_server() {
  local dir portfile
  dir=$(mktemp -d)
  mkfifo "$dir/stdin"
  portfile="$dir/port"
  "$bin/gc-file-server" <"$dir/stdin" >"$portfile" 2>/dev/null &
  pids+=("$!")
  exec 9>"$dir/stdin"
  for _ in $(seq 200); do grep -q '^listening ' "$portfile" && break; sleep 0.05; done
  local port
  port=$(awk '/^listening /{print $2; exit}' "$portfile")
  rm -rf "$dir"
  if [ -n "$port" ]; then
    export SIMPLETIMER_ASSET_URL="http://127.0.0.1:$port/gen/1000000?seed=42&rate=1000000"
  else
    echo "demo: the file server did not start: no background download" >&2
  fi
}
start_file_server

headless() {
  local transcript
  transcript=$(mktemp)
  "$bin/widget" --headless >>"$transcript" 2>&1 &
  local widget=$!
  pids+=("$widget")
  until grep -q "waiting for the host" "$transcript"; do sleep 0.05; done
  "$bin/host" --headless --seconds 4 --background-after 1 >>"$transcript" 2>&1
  local widget_status=0
  wait "$widget" || widget_status=$?
  # The host that the URL launched writes into the same transcript; give it a moment to finish.
  for _ in $(seq 100); do grep -q "timer finished in the widget" "$transcript" && break; sleep 0.05; done
  # The host the download agent relaunched for the download's events writes into the agent's log (it has no
  # terminal, as a background-launched app on iOS).
  local agent_log="$GROUP_CONTAINER_ROOT/group.com.example.simpletimer/.coordination/downloads/agent.log"
  for _ in $(seq 300); do grep -q "every background event handled" "$agent_log" 2>/dev/null && break; sleep 0.05; done
  sleep 0.2
  grep -F "[host]" "$agent_log" >>"$transcript" 2>/dev/null || true
  cat "$transcript"
  local missing=0
  for step in "[host] countdown started" "[host] going to the background" "[widget] read from the suite" \
    "[widget] time left: " "[widget] time is up: opening simpletimer://finished" "[host] launched by simpletimer://finished" \
    "[host] the timer finished in the widget" "[widget] the host answered true" \
    "[host] downloading the alarm sound in the background" "[widget] the host's alarm sound: " \
    "[host] relaunched for the background session" "[host] the alarm sound arrived while the host was away" \
    "[host] every background event handled"; do
    if ! grep -qF "$step" "$transcript"; then
      echo "demo: missing step: $step" >&2
      missing=1
    fi
  done
  rm -f "$transcript"
  [ "$widget_status" = 0 ] && [ "$missing" = 0 ] && echo "demo: every step happened"
}

if [ "${DEMO_HEADLESS:-0}" = 1 ] || [ ! -t 0 ] || [ ! -t 1 ]; then
  headless
elif command -v tmux >/dev/null 2>&1 && [ -z "${TMUX:-}" ]; then
  session="simpletimer-$$"
  tmux new-session -d -s "$session" -e GROUP_CONTAINER_ROOT="$GROUP_CONTAINER_ROOT" "$bin/host"
  tmux split-window -h -t "$session" -e GROUP_CONTAINER_ROOT="$GROUP_CONTAINER_ROOT" "$bin/widget"
  tmux select-pane -t "$session:0.0"
  tmux set-option -t "$session" remain-on-exit off >/dev/null
  tmux attach -t "$session"
else
  echo "(install tmux for two panes: apt-get install tmux)"
  "$bin/widget" --follow </dev/null | cat &
  pids+=("$!")
  "$bin/host"
fi
