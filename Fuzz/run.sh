#!/usr/bin/env bash
# Builds the libFuzzer harnesses (release, ASan + coverage) and fuzzes them.
#
# Usage:
#   Fuzz/run.sh <harness> [seconds] [libFuzzer flags...]   one harness (default 60 s) over its working corpus
#                                                          Fuzz/corpus-<harness>/ (kept between runs, not committed)
#   Fuzz/run.sh all [seconds]                              every harness in turn the same way (`make fuzz`)
#   Fuzz/run.sh check [seconds]                            CI (`make fuzz-check`): every harness for `seconds`
#                                                          (default 30) from the committed corpus only; fails on any
#                                                          crash, leak or timeout; prints each harness's runs and
#                                                          coverage
#   Fuzz/run.sh merge [harness...]                         minimizes each committed corpus Fuzz/corpora/<harness>/
#                                                          with its seeds and working corpus (libFuzzer
#                                                          -set_cover_merge=1)
#
# The harnesses (seeds are hand-made inputs kept readable; Fuzz/corpora/<harness>/ is the minimized corpus CI starts
# from, a few hundred KB in all):
#   PropertyListFuzz: the plist readers and writers (seeds: Fuzz/seeds/, and Fuzz/openstep-seeds/ for the old-style
#   text reader: the regression tests read every file of Fuzz/seeds/ as a binary or XML plist).
#   ContainerFilesFuzz: the defaults journal, presenter records, coordination messages, download records (task, control,
#   status, event, relaunch, commit, attach.lock's event format), activity records, suite images, the URL rule (URLs,
#   schemes, scheme registrations, handed-over file URLs, handler names), intent requests and replies, the group's
#   memory-level file (seeds: Fuzz/container-seeds/, the first byte picks the parser).
#   ImageHeadersFuzz: the PNG/JPEG/GIF/WebP header parsers and the disk cache's entry format (seeds: the image test
#   fixtures and Fuzz/image-seeds/).
#   DownloadHeadersFuzz: the download agent's resume decisions from response headers (seeds: Fuzz/download-seeds/).
#   ThumbnailDecodeFuzz: the video widget's PNG/JPEG decoding through libpng/libjpeg-turbo and its C shim (a harness
#   of the Examples package, Examples/Fuzz/; seeds: the image test fixtures).
# Crashers are written to Fuzz/artifacts/ (named crash-*, leak-*, timeout-*, oom-*): fix the bug, then keep the input
# as a regression (CONTRIBUTING.md, "Fuzz").
#
# libFuzzer's own main (-sanitize=fuzzer with -parse-as-library) does not link from SwiftPM on this toolchain, so a
# harness has its own main and calls LLVMFuzzerRunDriver from libclang_rt.fuzzer_no_main.
set -euo pipefail
cd "$(dirname "$0")/.."

root_harnesses=(PropertyListFuzz ContainerFilesFuzz ImageHeadersFuzz DownloadHeadersFuzz)
examples_harnesses=(ThumbnailDecodeFuzz)
all_harnesses=("${root_harnesses[@]}" "${examples_harnesses[@]}")

# Sets `seeds` (directories), `flags` (libFuzzer options) and `package` ("." or "Examples") for harness $1.
configure() {
  package=.
  case "$1" in
    PropertyListFuzz) seeds=(Fuzz/seeds Fuzz/openstep-seeds); flags=(-dict=Fuzz/plist.dict -max_len=8192) ;;
    ContainerFilesFuzz) seeds=(Fuzz/container-seeds); flags=(-max_len=4096) ;;
    ImageHeadersFuzz) seeds=(Tests/ImageCacheTests/Fixtures Fuzz/image-seeds); flags=(-max_len=4096) ;;
    DownloadHeadersFuzz) seeds=(Fuzz/download-seeds); flags=(-max_len=1024) ;;
    ThumbnailDecodeFuzz) seeds=(Tests/ImageCacheTests/Fixtures); flags=(-max_len=8192); package=Examples ;;
    *) echo "unknown fuzz harness '$1' (one of: ${all_harnesses[*]})" >&2; exit 2 ;;
  esac
}

swift_bin="$(command -v swift || echo /opt/swift/usr/bin/swift)"
toolchain_usr="$(cd "$(dirname "$(readlink -f "$swift_bin")")/.." && pwd)"
fuzzer_lib="$(ls "$toolchain_usr"/lib/clang/*/lib/linux/libclang_rt.fuzzer_no_main-x86_64.a 2>/dev/null | head -n 1)"
if [[ ! -f "$fuzzer_lib" ]]; then
  echo "libclang_rt.fuzzer_no_main-x86_64.a not found under $toolchain_usr/lib/clang" >&2
  exit 1
fi

# The scratch directory of a package's fuzz build: every harness of the package is built there with the same flags,
# so the libraries are compiled once and each further harness costs its own file and a link.
scratch() { echo "$PWD/.build-fuzz$([[ $1 == . ]] || echo "-$1")"; }

# Builds harness $1 (-enable-testing: ContainerFilesFuzz and ImageHeadersFuzz reach internal parsers with
# @testable import).
build() {
  configure "$1"
  "$swift_bin" build -c release --product "$1" --package-path "$package" \
    -Xswiftc -DFUZZING -Xswiftc -enable-testing \
    -Xswiftc -sanitize=address \
    -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp \
    -Xcc -fsanitize=address \
    -Xcc -fsanitize-coverage=inline-8bit-counters,pc-table,trace-cmp \
    -Xlinker "$fuzzer_lib" -Xlinker -lstdc++ \
    --scratch-path "$(scratch "$package")"
}

# Runs harness $1 (built) with the remaining arguments: corpus directories first, then libFuzzer options.
fuzz() {
  local harness=$1
  shift
  configure "$harness"
  mkdir -p Fuzz/artifacts
  # libFuzzer handles the traps: Swift's own backtracer would take the signal first and can hang under ASan, so
  # no crash artifact would ever be written.
  SWIFT_BACKTRACE=enable=no "$(scratch "$package")/release/$harness" "$@" "${seeds[@]}" -timeout=10 \
    -rss_limit_mb=2048 "${flags[@]}" -artifact_prefix=Fuzz/artifacts/ -print_final_stats=1
}

# The committed corpus of harness $1, when there is one.
corpus() { [[ -d Fuzz/corpora/$1 ]] && echo "Fuzz/corpora/$1" || true; }

mode="${1:-PropertyListFuzz}"
shift || true
case "$mode" in
  all)
    seconds="${1:-300}"
    for harness in "${all_harnesses[@]}"; do build "$harness"; done
    for harness in "${all_harnesses[@]}"; do
      mkdir -p "Fuzz/corpus-$harness"
      fuzz "$harness" "Fuzz/corpus-$harness" $(corpus "$harness") -max_total_time="$seconds"
    done
    ;;

  check)
    seconds="${1:-30}"
    started=$(date +%s)
    # Every build first: a harness that does not build fails the check before any fuzzing time is spent.
    for harness in "${all_harnesses[@]}"; do
      t=$(date +%s)
      build "$harness"
      echo "fuzz-check: built $harness in $(($(date +%s) - t)) s"
    done
    built=$(date +%s)
    work=$(mktemp -d /tmp/gc-fuzz-check.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    status=0
    summary=()
    for harness in "${all_harnesses[@]}"; do
      # New inputs go to a scratch directory: the committed corpus is read, never written, by a check.
      mkdir -p "$work/$harness"
      log="$work/$harness.log"
      echo "fuzz-check: $harness for $seconds s from $(corpus "$harness" || true) ..."
      if fuzz "$harness" "$work/$harness" $(corpus "$harness") -max_total_time="$seconds" > "$log" 2>&1; then
        result=ok
      else
        result="FAILED (exit $?)"
        status=1
        tail -n 60 "$log"
        # The CI machine is gone after the run: the input is printed so it can be replayed from the log alone
        # (`base64 -d > crash && .build-fuzz/release/<harness> crash`).
        for artifact in $(sed -n 's/.*Test unit written to \(Fuzz\/artifacts\/[^ ]*\).*/\1/p' "$log"); do
          echo "fuzz-check: $harness input $artifact ($(wc -c < "$artifact") bytes), base64:"
          head -c 8192 "$artifact" | base64 -w 100
        done
      fi
      # libFuzzer's final stats: executions, the last status line's coverage (cov: edges, ft: features) and the
      # corpus size.
      runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
      rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
      last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
      cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
      ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
      corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9A-Za-z]*\).*/\1/p' <<< "$last")
      new=$(find "$work/$harness" -type f | wc -l)
      line="$harness: $result, ${runs:-?} runs (${rate:-?}/s), cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, $new new"
      echo "fuzz-check: $line"
      summary+=("$line")
    done
    echo "fuzz-check: builds $((built - started)) s, fuzzing $(($(date +%s) - built)) s"
    printf '  %s\n' "${summary[@]}"
    if [[ $status != 0 ]]; then
      echo "fuzz-check: a harness failed; its input is in Fuzz/artifacts/ (and base64 above): fix the bug and keep" \
        "the input as a regression test (CONTRIBUTING.md, \"Fuzz\")"
    fi
    exit $status
    ;;

  merge)
    (($# > 0)) || set -- "${all_harnesses[@]}"
    for harness in "$@"; do
      build "$harness"
      merged=$(mktemp -d /tmp/gc-fuzz-merge.XXXXXX)
      mkdir -p "Fuzz/corpus-$harness"
      # A set cover of the features of every input given (libFuzzer's -merge=1 keeps about a third more bytes for
      # the same features).
      fuzz "$harness" "$merged" $(corpus "$harness") "Fuzz/corpus-$harness" -set_cover_merge=1
      rm -rf "Fuzz/corpora/$harness"
      mkdir -p Fuzz/corpora
      mv "$merged" "Fuzz/corpora/$harness"
      chmod 0755 "Fuzz/corpora/$harness"
      echo "merge: Fuzz/corpora/$harness: $(find "Fuzz/corpora/$harness" -type f | wc -l) inputs," \
        "$(cat "Fuzz/corpora/$harness"/* | wc -c) bytes"
    done
    ;;

  *)
    harness=$mode
    seconds="${1:-60}"
    shift || true
    build "$harness"
    mkdir -p "Fuzz/corpus-$harness"
    fuzz "$harness" "Fuzz/corpus-$harness" $(corpus "$harness") -max_total_time="$seconds" "$@"
    ;;
esac
