#!/usr/bin/env bash
# `make demo`: the Timer host and its Today widget side by side, then the video widget and its host, on a FRESH
# temporary container each run.
#
#   - inside tmux ($TMUX set): a new window "simpletimer" with two panes (host left, widget right), a window
#     "simpletimer-video" with the video screens (`host video` left, `widget video` right) and a window
#     "simpletimer-scoreboard" with the Live Activity (`host scoreboard` left, `widget scoreboard` right); all
#     closed at the end;
#   - in a terminal with tmux: a new tmux session with the same windows (Ctrl-b n: the next window);
#   - in a terminal without tmux: both in this terminal, [host]/[widget] prefixes; keys go to the host;
#   - DEMO_HEADLESS=1 (or no terminal): the scripted scenario; prints the transcript and exits 0 only if every step
#     happened, in the order the scenario makes them happen.
#
# Keys. Host pane: s start/stop, b background/foreground, q quit. Widget pane: o open the app when the time is up,
# q quit. Video host pane: m memory warning to the group (what `groupctl cache pressure warning` sends), q quit.
# Video widget pane: q quit (its background download goes on; the host receives it). Scoreboard host pane: h home
# goal, a away goal, e end the match, q quit. Scoreboard widget pane: 1 / 2 like a team (an intent performed in the
# host's process), x dismiss the match, q quit. In tmux, Ctrl-b o (or Ctrl-b ←/→) moves to the other pane (the pane borders say so too). q in either pane,
# or Ctrl-C, ends the demo: every process it started — host, widget, the file server, a host the widget's URL
# launched, the download agent — is stopped by its pid (never by a name pattern), and the window closes.
#
# Environment:
#   DEMO_HEADLESS=1      the scripted scenario; DEMO_HEADLESS=0 the interactive one even without a terminal (tests)
#   DEMO_KEEP=1          keep the fresh container root after the demo (its path is printed)
#   DEMO_ROOT=DIR        use DIR as the container root (kept); a DIR from an earlier run shows that run's state
#   DEMO_PIDFILE=FILE    append "<pid> <start time>" for every process the demo started (tests check they are gone)
#   DEMO_BIN=DIR         the built products: groupctl, the agent, the file server (default: `swift build --show-bin-path`)
#   DEMO_EXAMPLES_BIN=DIR the built host and widget, a package of their own in Examples/ (default:
#                        `swift build --package-path Examples --show-bin-path`)
#   GROUP_CONTAINER_ROOT is ignored: a root left from an earlier run made the demo read that run's state.
#
# The video widget (headless, after the Timer): the host saves a watch history and five image URLs to the suite and
# fetches four PNG/JPEG images from the file server (made at the demo's start by `host video --make-images`; the
# fifth is missing: the widget's placeholder) into the shared image cache; the widget rotates them, starts a
# 64 MB throttled background download and reports its peak memory; `groupctl cache pressure warning` makes both
# trim; both leave while the download runs, and the agent relaunches the host for its events.
#
# The scoreboard (headless, after the Timer): the host starts a Live Activity and updates the score; the widget
# follows it live, likes the teams with an intent performed in the host's process, shows the final score after the
# host ends the match, and dismisses it; the host sees the dismissal.
#
# scripts/demo.sh --check FILE   checks a transcript only: exit 0 when every step is there and in order.
set -euo pipefail
cd "$(dirname "$0")/.."

group=group.com.example.simpletimer

# The steps of the headless scenario. Each chain is a causal order (a step cannot happen before the one to its
# left); steps of different chains may interleave (the widget may see the countdown before the host says it left).
order_chains=(
  "[host] countdown started|[widget] read from the suite|[widget] time is up: opening simpletimer://finished|[host] launched by simpletimer://finished|[host] the timer finished in the widget|[widget] the host answered true"
  "[host] countdown started|[host] downloading the alarm sound in the background|[host] going to the background"
  "[host] relaunched for the background session|[host] the alarm sound arrived while the host was away|[host] every background event handled"
  # The video widget: images cached by the host, rotated by the widget (a placeholder for the missing one), the
  # group's memory warning in both, the widget's download handed to the relaunched host.
  "[host] saved the watch history|[host] cached sunrise.jpg|[host] could not fetch lost-episode.jpg|[host] images cached: 4 of 5|[widget] showing 1/5: sunrise.jpg — image|[widget] showing 5/5: lost-episode.jpg — placeholder|[widget] peak memory after a full rotation|[widget] memory warning (group): released|[widget] leaving with the episode at"
  "[host] images cached: 4 of 5|[host] memory warning (group): released|[host] leaving the video screen with the widget's episode at"
  "[widget] downloading the episode in the background|[host] following the widget's download|[host] relaunched for the video download session|[host] the widget's episode arrived while the host was away|[host] every video download event handled"
  # The scoreboard: each process's steps in order (the two print independently of each other).
  "[host] match started: LYO 0–0 NAN|[host] score: LYO 1–0 NAN|[host] likes from the widget: Lyon ♥ 2, Nantes ♥ 1|[host] final score: LYO 2–1 NAN · FT|[host] the widget's user dismissed the match"
  "[widget] following the match|[widget] liked Lyon: ♥ 1 (performed in the app)|[widget] liked Nantes: ♥ 1 (performed in the app)|[widget] final: LYO 2–1 NAN · FT|[widget]   Full time|[widget] dismissed the match"
)
present_steps=("[widget] live: LYO 1–0 NAN" "[widget] time left: " "[widget] the host's alarm sound: " "[widget] history: " "[widget] episode download: [" "[host] the widget's episode: [")

# Exit status 0 when every step of the scenario is in the transcript FILE and each chain in order.
check_transcript() {
  local file=$1 failed=0 chain step line previous previous_line
  for step in "${present_steps[@]}"; do
    grep -qF -- "$step" "$file" || { echo "demo: missing step: $step" >&2; failed=1; }
  done
  for chain in "${order_chains[@]}"; do
    previous="" previous_line=0
    IFS='|' read -r -a steps <<<"$chain"
    for step in "${steps[@]}"; do
      line=$(grep -nF -m1 -- "$step" "$file" | cut -d: -f1 || true)
      if [ -z "$line" ]; then
        echo "demo: missing step: $step" >&2
        failed=1
      elif [ "$line" -le "$previous_line" ]; then
        echo "demo: out of order: \"$step\" (line $line) came before \"$previous\" (line $previous_line)" >&2
        failed=1
      fi
      [ -n "$line" ] && previous=$step previous_line=$line
    done
  done
  return "$failed"
}

if [ "${1:-}" = --check ]; then
  check_transcript "$2" && echo "demo: every step happened, in order"
  exit
fi

bin=${DEMO_BIN:-$(swift build --show-bin-path)}
examples_bin=${DEMO_EXAMPLES_BIN:-$(swift build --package-path Examples --show-bin-path)}
# The Examples build has no agent beside the host and widget: their sessions start this build's.
export GROUPCONTAINER_DOWNLOAD_AGENT="$bin/gc-download-agent"
if [ -n "${GROUP_CONTAINER_ROOT:-}" ]; then
  echo "demo: ignoring GROUP_CONTAINER_ROOT (each run gets a fresh container; DEMO_ROOT=dir chooses one)" >&2
fi
if [ -n "${DEMO_ROOT:-}" ]; then
  mkdir -p "$DEMO_ROOT"
  GROUP_CONTAINER_ROOT=$(cd "$DEMO_ROOT" && pwd)
  keep_root=1
else
  GROUP_CONTAINER_ROOT=$(mktemp -d /tmp/simpletimer-demo.XXXXXX)
  keep_root=${DEMO_KEEP:-0}
  [ "$keep_root" = 1 ] || keep_root=
fi
export GROUP_CONTAINER_ROOT
container="$GROUP_CONTAINER_ROOT/$group"
echo "demo: container root $GROUP_CONTAINER_ROOT" >&2

# --- Processes: every one the demo starts is remembered as "<pid> <start time>" and stopped by that pid.
started=()
start_time() { # field 22 of /proc/<pid>/stat (after the command name, which may hold spaces)
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  echo "${20}"
}
track() {
  local pid=$1 start
  start=${2:-$(start_time "$pid")} || return 0
  local entry="$pid $start"
  for known in "${started[@]}"; do [ "$known" = "$entry" ] && return 0; done
  started+=("$entry")
  [ -n "${DEMO_PIDFILE:-}" ] && echo "$entry" >>"$DEMO_PIDFILE"
  return 0
}
# Processes of the container the demo made (each registers as processes/<pid>.<start>.lock: a host the widget's
# URL launched, a host the agent relaunched) and the download agent (the holder of its lock, from /proc/locks).
track_container_processes() {
  local lock name pid
  for lock in "$container"/.coordination/processes/*.lock; do
    [ -e "$lock" ] || continue
    name=${lock##*/}
    name=${name%.lock}
    pid=${name%%.*}
    [ "$(start_time "$pid" 2>/dev/null)" = "${name#*.}" ] && track "$pid" "${name#*.}"
  done
  local agent_lock="$container/.coordination/downloads/agent.lock" inode
  if inode=$(stat -c %i "$agent_lock" 2>/dev/null); then
    for pid in $(awk -v inode="$inode" '$2 == "FLOCK" { n = split($6, id, ":"); if (id[n] == inode) print $5 }' /proc/locks); do
      track "$pid"
    done
  fi
  return 0
}
# SIGTERM to every tracked process still the same process (pid and start time), then SIGKILL to any left.
stop_tracked() {
  local entry pid start left
  for entry in "${started[@]}"; do
    pid=${entry%% *} start=${entry#* }
    [ "$(start_time "$pid" 2>/dev/null)" = "$start" ] && kill "$pid" 2>/dev/null
  done
  for _ in $(seq 40); do
    left=0
    for entry in "${started[@]}"; do
      pid=${entry%% *} start=${entry#* }
      if [ "$(start_time "$pid" 2>/dev/null)" = "$start" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; then
        left=1
      fi
    done
    [ "$left" = 0 ] && return 0
    sleep 0.05
  done
  for entry in "${started[@]}"; do
    pid=${entry%% *} start=${entry#* }
    [ "$(start_time "$pid" 2>/dev/null)" = "$start" ] && kill -KILL "$pid" 2>/dev/null
  done
  return 0
}

tmux_target=""
video_target=""
scoreboard_target=""
tmux_session=""
cleanup() {
  trap - EXIT INT TERM HUP
  set +e # stop everything, whatever fails on the way
  exec 9>&- # the file server exits when its stdin closes
  # Twice: stopping the agent may not stop a host it relaunched a moment before.
  for _ in 1 2; do
    track_container_processes
    stop_tracked
  done
  if [ -n "$tmux_session" ]; then
    tmux kill-session -t "$tmux_session" 2>/dev/null || true
  elif [ -n "$tmux_target" ]; then
    tmux kill-window -t "$tmux_target" 2>/dev/null || true
    [ -n "$video_target" ] && tmux kill-window -t "$video_target" 2>/dev/null
    [ -n "$scoreboard_target" ] && tmux kill-window -t "$scoreboard_target" 2>/dev/null
  fi
  [ -n "${images:-}" ] && rm -rf "$images"
  if [ -z "$keep_root" ]; then
    rm -rf "$GROUP_CONTAINER_ROOT"
  else
    echo "demo: the container stays in $GROUP_CONTAINER_ROOT" >&2
  fi
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# The alarm sound the host downloads in the background comes from the project's own HTTP server (a 1 MB file sent
# at 1 MB/s, so the download outlives the headless host). The server exits when its stdin closes: this script holds
# the write end of a FIFO, so the server goes when the script does (and cleanup stops it by its pid too).
start_file_server() {
  local dir portfile
  dir=$(mktemp -d)
  mkfifo "$dir/stdin"
  portfile="$dir/port"
  # The video widget's images, made now (libpng, libjpeg-turbo) and served from --root.
  images=$(mktemp -d /tmp/simpletimer-images.XXXXXX)
  "$examples_bin/host" video --make-images "$images" >/dev/null || echo "demo: the video images could not be made" >&2
  "$bin/gc-file-server" --root "$images" <"$dir/stdin" >"$portfile" 2>/dev/null &
  track "$!"
  exec 9>"$dir/stdin"
  for _ in $(seq 200); do grep -q '^listening ' "$portfile" && break; sleep 0.05; done
  local port
  port=$(awk '/^listening /{print $2; exit}' "$portfile")
  rm -rf "$dir"
  if [ -n "$port" ]; then
    export SIMPLETIMER_ASSET_URL="http://127.0.0.1:$port/gen/1000000?seed=42&rate=1000000"
    export VIDEO_IMAGES_URL="http://127.0.0.1:$port/files/"
    # 64 MiB at 4 MB/s: about 17 s, so it ends after the widget has left (about 7 s in), with room on a loaded machine.
    export VIDEO_DOWNLOAD_URL="http://127.0.0.1:$port/gen/67108864?seed=7&rate=4000000"
  else
    echo "demo: the file server did not start: no background download" >&2
  fi
}
start_file_server

# Waits up to $1 tenths of a second for `grep -qF "$3" "$2"`.
wait_for_line() {
  local tenths=$1 file=$2 text=$3
  for _ in $(seq "$((tenths * 2))"); do
    grep -qF -- "$text" "$file" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

headless() {
  local transcript
  transcript=$(mktemp)
  "$examples_bin/widget" --headless >>"$transcript" 2>&1 &
  local widget=$!
  track "$widget"
  if ! wait_for_line 300 "$transcript" "waiting for the host"; then
    cat "$transcript"
    echo "demo: the widget did not start" >&2
    rm -f "$transcript"
    return 1
  fi
  "$examples_bin/host" --headless --seconds 4 --background-after 1 >>"$transcript" 2>&1 &
  local host=$!
  track "$host"
  local host_status=0 widget_status=0
  wait "$host" || host_status=$?
  wait "$widget" || widget_status=$?
  track_container_processes
  # The host that the URL launched writes into the same transcript.
  wait_for_line 50 "$transcript" "timer finished in the widget" || true
  # The host the download agent relaunched for the download's events writes into the agent's log (it has no
  # terminal, as a background-launched app on iOS).
  local agent_log="$container/.coordination/downloads/agent.log"
  wait_for_line 150 "$agent_log" "every background event handled" || true
  track_container_processes
  local scoreboard_status=0
  scoreboard_headless "$transcript" || scoreboard_status=$?
  local video_status=0
  video_headless "$transcript" || video_status=$?
  wait_for_line 300 "$agent_log" "every video download event handled" || true
  track_container_processes
  sleep 0.2
  grep -F "[host]" "$agent_log" >>"$transcript" 2>/dev/null || true
  cat "$transcript"
  local ordered=0
  check_transcript "$transcript" || ordered=1
  rm -f "$transcript"
  [ "$host_status" = 0 ] || echo "demo: the host exited with status $host_status" >&2
  [ "$widget_status" = 0 ] || echo "demo: the widget exited with status $widget_status" >&2
  [ "$video_status" = 0 ] || echo "demo: the video scenario failed (status $video_status)" >&2
  [ "$scoreboard_status" = 0 ] || echo "demo: the scoreboard scenario failed (status $scoreboard_status)" >&2
  [ "$host_status" = 0 ] && [ "$widget_status" = 0 ] && [ "$video_status" = 0 ] && [ "$scoreboard_status" = 0 ] &&
    [ "$ordered" = 0 ] &&
    echo "demo: every step happened, in order"
}

# The video widget, scripted: host first (it lists and caches the images), then the widget (1 s a picture instead of
# 5); once the widget has shown every picture and the host follows the download, the group's memory warning.
# Waits for a scenario's host ($2) and widget ($3), named $1 in what it says of a failure; 0 when both exited 0.
wait_pair() {
  local host_status=0 widget_status=0
  wait "$2" || host_status=$?
  wait "$3" || widget_status=$?
  track_container_processes
  [ "$host_status" = 0 ] || echo "demo: the $1 host exited with status $host_status" >&2
  [ "$widget_status" = 0 ] || echo "demo: the $1 widget exited with status $widget_status" >&2
  [ "$host_status" = 0 ] && [ "$widget_status" = 0 ]
}

scoreboard_headless() {
  local transcript=$1 host widget
  "$examples_bin/widget" scoreboard --headless >>"$transcript" 2>&1 &
  widget=$!
  track "$widget"
  if ! wait_for_line 300 "$transcript" "[widget] waiting for a match"; then
    echo "demo: the scoreboard widget did not start" >&2
    return 1
  fi
  "$examples_bin/host" scoreboard --headless >>"$transcript" 2>&1 &
  host=$!
  track "$host"
  wait_pair scoreboard "$host" "$widget"
}

video_headless() {
  local transcript=$1 host widget
  "$examples_bin/host" video --headless >>"$transcript" 2>&1 &
  host=$!
  track "$host"
  if ! wait_for_line 600 "$transcript" "[host] images cached: "; then
    echo "demo: the video host did not cache its images" >&2
    return 1
  fi
  "$examples_bin/widget" video --headless --interval 1 >>"$transcript" 2>&1 &
  widget=$!
  track "$widget"
  track_container_processes
  wait_for_line 600 "$transcript" "[widget] peak memory after a full rotation" || echo "demo: the widget did not rotate" >&2
  wait_for_line 300 "$transcript" "[host] following the widget's download" || echo "demo: the host saw no download" >&2
  "$bin/groupctl" cache pressure warning "$group" >/dev/null 2>&1 || echo "demo: groupctl could not send the warning" >&2
  wait_pair video "$host" "$widget"
}

# Returns when a pane's program has ended (remain-on-exit keeps the pane to tell) or a window is gone.
watch_panes() {
  local states window
  while true; do
    for window in "$tmux_target" ${video_target:+"$video_target"} ${scoreboard_target:+"$scoreboard_target"}; do
      states=$(tmux list-panes -t "$window" -F '#{pane_dead}' 2>/dev/null) || return 0
      case "$states" in *1*) return 0 ;; esac
      [ "$(printf '%s\n' "$states" | wc -l)" -ge 2 ] || return 0
    done
    sleep 0.3
  done
}

# A window of two panes named $2, after window $1: `host $3` left, `widget $3` right, the same environment as the
# Timer's panes, with the pane borders $4; its id goes to the variable named $5 as soon as it exists (cleanup
# closes it).
side_window() {
  local created
  created=$(tmux new-window -d -P -F '#{window_id}' -t "$1" -a -n "$2" "${env[@]}" \
    "exec $(printf '%q' "$examples_bin/host") $3")
  printf -v "$5" '%s' "$created"
  tmux set-option -w -t "$created" remain-on-exit on >/dev/null
  tmux split-window -d -h -t "$created" "${env[@]}" "exec $(printf '%q' "$examples_bin/widget") $3"
  tmux set-option -w -t "$created" pane-border-status top >/dev/null
  tmux set-option -w -t "$created" pane-border-format "$4" >/dev/null
  local pid
  for pid in $(tmux list-panes -t "$created" -F '#{pane_pid}'); do track "$pid"; done
}

video_window() {
  side_window "$tmux_target" simpletimer-video video \
    " #{?pane_at_left,VIDEO HOST  m memory warning · q quit,VIDEO WIDGET  q quit}  │  #{?pane_active,keys go here,Ctrl-b o to type here} · Ctrl-b p: the Timer · Ctrl-b n: scoreboard " \
    video_target
}

scoreboard_window() {
  side_window "$video_target" simpletimer-scoreboard scoreboard \
    " #{?pane_at_left,SCOREBOARD HOST  h/a goal · e end · q quit,SCOREBOARD WIDGET  1/2 like · x dismiss · q quit}  │  #{?pane_active,keys go here,Ctrl-b o to type here} · Ctrl-b p: video " \
    scoreboard_target
}

in_tmux() {
  local env=(-e "GROUP_CONTAINER_ROOT=$GROUP_CONTAINER_ROOT" -e "GROUPCONTAINER_DOWNLOAD_AGENT=$GROUPCONTAINER_DOWNLOAD_AGENT")
  [ -n "${SIMPLETIMER_ASSET_URL:-}" ] && env+=(-e "SIMPLETIMER_ASSET_URL=$SIMPLETIMER_ASSET_URL")
  [ -n "${VIDEO_IMAGES_URL:-}" ] && env+=(-e "VIDEO_IMAGES_URL=$VIDEO_IMAGES_URL" -e "VIDEO_DOWNLOAD_URL=$VIDEO_DOWNLOAD_URL")
  local host_command widget_command
  host_command="exec $(printf '%q' "$examples_bin/host")"
  widget_command="exec $(printf '%q' "$examples_bin/widget")"
  local created host_pane
  if [ -n "${TMUX:-}" ]; then
    created=$(tmux new-window -d -P -F '#{window_id} #{pane_id}' -n simpletimer "${env[@]}" "$host_command")
  else
    tmux_session="simpletimer-$$"
    created=$(tmux new-session -d -P -F '#{window_id} #{pane_id}' -s "$tmux_session" -n simpletimer "${env[@]}" \
      "$host_command")
    tmux set-option -t "$tmux_session" status-right " Ctrl-b o: other pane │ Ctrl-b n: next window │ q: quit " >/dev/null
    tmux set-option -t "$tmux_session" status-right-length 60 >/dev/null
  fi
  tmux_target=${created% *}
  host_pane=${created#* }
  tmux set-option -w -t "$tmux_target" remain-on-exit on >/dev/null
  tmux split-window -d -h -t "$tmux_target" "${env[@]}" "$widget_command"
  # Each pane's border says what it is, its keys, and how to reach the other one.
  tmux set-option -w -t "$tmux_target" pane-border-status top >/dev/null
  tmux set-option -w -t "$tmux_target" pane-border-format \
    " #{?pane_at_left,HOST  s start/stop · b background · q quit,WIDGET  o open the app at zero · q quit}  │  #{?pane_active,keys go here,Ctrl-b o (or Ctrl-b ←/→) to type here} · Ctrl-b n: video " \
    >/dev/null
  local pid
  for pid in $(tmux list-panes -t "$tmux_target" -F '#{pane_pid}'); do track "$pid"; done
  video_window
  scoreboard_window
  tmux select-pane -t "$host_pane"
  if [ -n "$tmux_session" ]; then
    (watch_panes && tmux kill-session -t "$tmux_session" 2>/dev/null) &
    tmux attach -t "$tmux_session" || true
  else
    tmux select-window -t "$tmux_target"
    echo "demo: running in the tmux window 'simpletimer' (q in a pane or Ctrl-C here ends it)"
    watch_panes
  fi
}

interactive=1
case "${DEMO_HEADLESS:-}" in
  1) interactive= ;;
  0) ;;
  *) { [ -t 0 ] && [ -t 1 ]; } || interactive= ;;
esac

if [ -z "$interactive" ]; then
  headless
elif command -v tmux >/dev/null 2>&1; then
  in_tmux
else
  echo "(install tmux for two panes: apt-get install tmux)"
  # Through a process substitution, so $! is the widget's pid (a pipe would give cat's) and it has no terminal.
  "$examples_bin/widget" --follow </dev/null > >(cat) 2>&1 &
  track "$!"
  "$examples_bin/host"
fi
