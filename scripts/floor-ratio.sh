#!/usr/bin/env bash
# Compares builds on the paired benchmarks: the 64-process write against its floor (`Scale: 64 presenter processes vs
# the floor (paired)` and its tmpfs twin, Benchmarks/CoordinationBenchmarks/ScaleBenchmarks.swift), and the empty
# access against a flock pair (CoordinationBenchmarks.swift). This machine's speed
# swings by 2x within minutes, so two builds' absolute p50s compare only by luck; their ratios to the floor, measured
# in the same iterations, do. Run the builds alternately and compare medians.
#
#   scripts/floor-ratio.sh snapshot DIR         copy the current release build of Benchmarks/ into DIR (build it
#                                               first: cd Benchmarks && swift build -c release --product
#                                               CoordinationBenchmarks)
#   scripts/floor-ratio.sh compare ROUNDS DIR…  ROUNDS times, one run of each DIR in turn; prints the p50 of the
#                                               framework and of the floor (ms) and their ratio, ext4 then tmpfs
#   scripts/floor-ratio.sh empty ROUNDS DIR…    the same for `Coordinated empty access vs flock pair (paired)`:
#                                               the p50 of the flock pair and of the empty access (ns), their ratio
set -euo pipefail
cd "$(dirname "$0")/.."

# ROUNDS times, each DIR in turn: its benchmarks matching FILTER, their output read by the awk PROGRAM.
alternate() {
  local rounds="$1" filter="$2" program="$3"
  shift 3
  for _ in $(seq 1 "$rounds"); do
    for dir in "$@"; do
      printf '%s ' "$(basename "$dir")"
      (cd "$dir" && ./CoordinationBenchmarks --filter "$filter" 2>&1) | awk "$program"
    done
  done
}

case "${1:-}" in
  snapshot)
    dir="${2:?usage: floor-ratio.sh snapshot DIR}"
    mkdir -p "$dir"
    release=Benchmarks/.build/release
    cp "$release/CoordinationBenchmarks" "$release/groupctl" "$release/gc-bench-answerer" "$release"/*.so "$dir/"
    ;;
  compare)
    rounds="${2:?usage: floor-ratio.sh compare ROUNDS DIR...}"
    shift 2
    # The p50 line of the custom metrics "framework (ns)" and "floor (ns)" of each benchmark, in order.
    alternate "$rounds" '.*vs the floor.*' '
      /Debug results for/ { metric = "" }
      /^framework \(ns\):$/ { metric = "framework" }
      /^floor \(ns\):$/ { metric = "floor" }
      metric != "" && / 0\.500000000000 / { value[metric] = $1; metric = "" }
      /Debug results for .*tmpfs/ { if ("framework" in value) report("ext4"); delete value }
      function report(name) {
        printf "%s: %.2f / %.2f ms = %.3f  ", name, value["framework"] / 1e6, value["floor"] / 1e6,
          value["framework"] / value["floor"]
      }
      END { if ("framework" in value) report("tmpfs"); print "" }' "$@"
    ;;
  empty)
    rounds="${2:?usage: floor-ratio.sh empty ROUNDS DIR...}"
    shift 2
    alternate "$rounds" '.*vs flock pair.*' '
      /^flock pair \(ns\):$/ { metric = "flock" }
      /^empty access \(ns\):$/ { metric = "empty" }
      metric != "" && / 0\.500000000000 / { value[metric] = $1; metric = "" }
      END {
        if (value["flock"] > 0) printf "flock pair %d ns, empty access %d ns = %.2f", value["flock"], value["empty"],
          value["empty"] / value["flock"]
        print ""
      }' "$@"
    ;;
  *)
    sed -n '2,14p' "$0"
    exit 2
    ;;
esac
