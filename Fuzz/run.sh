#!/usr/bin/env bash
# Builds a libFuzzer harness (ASan + coverage) and fuzzes it.
#
# Usage: Fuzz/run.sh [PropertyListFuzz|ContainerFilesFuzz|ImageHeadersFuzz] [seconds] [extra libFuzzer flags...]
#   PropertyListFuzz: the plist readers and writers (seeds: Fuzz/seeds/, and Fuzz/openstep-seeds/ for the
#   old-style text reader: the regression tests read every file of Fuzz/seeds/ as a binary or XML plist).
#   ContainerFilesFuzz: the defaults journal, presenter records, coordination messages, download and activity records,
#   suite images (seeds: Fuzz/container-seeds/).
#   ImageHeadersFuzz: the PNG/JPEG/GIF/WebP header parsers (seeds: the image test fixtures).
#   ThumbnailDecodeFuzz: the video widget's PNG/JPEG decoding through libpng/libjpeg-turbo and its C shim (seeds:
#   the image test fixtures: baseline and progressive JPEG, PNG, APNG).
#   Runs ONE fuzzing process for `seconds` (default 60) over a working corpus in Fuzz/corpus-<target>/.
#   Crashers are written to Fuzz/artifacts/; after fixing, add them to the tests as regressions.
#
# libFuzzer's own main (-sanitize=fuzzer with -parse-as-library) does not link from SwiftPM on
# this toolchain, so the harness has its own main and calls LLVMFuzzerRunDriver from
# libclang_rt.fuzzer_no_main.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${1:-PropertyListFuzz}"
shift || true
seconds="${1:-60}"
shift || true
case "$target" in
  PropertyListFuzz) seeds=Fuzz/seeds; extra=(Fuzz/openstep-seeds -dict=Fuzz/plist.dict -max_len=8192) ;;
  ContainerFilesFuzz) seeds=Fuzz/container-seeds; extra=(-max_len=4096) ;;
  ImageHeadersFuzz) seeds=Tests/ImageCacheTests/Fixtures; extra=(-max_len=4096) ;;
  DownloadHeadersFuzz) seeds=Fuzz/download-seeds; extra=(-max_len=1024) ;;
  # A harness of the Examples package (it needs the demo's kits and libpng/libjpeg): Examples/Fuzz/.
  ThumbnailDecodeFuzz) seeds=Tests/ImageCacheTests/Fixtures; extra=(-max_len=8192); package=Examples ;;
  *) echo "unknown fuzz target '$target'" >&2; exit 2 ;;
esac

swift_bin="$(command -v swift || echo /opt/swift/usr/bin/swift)"
toolchain_usr="$(cd "$(dirname "$(readlink -f "$swift_bin")")/.." && pwd)"
fuzzer_lib="$(ls "$toolchain_usr"/lib/clang/*/lib/linux/libclang_rt.fuzzer_no_main-x86_64.a | head -n 1)"
if [[ ! -f "$fuzzer_lib" ]]; then
    echo "libclang_rt.fuzzer_no_main-x86_64.a not found under $toolchain_usr/lib/clang" >&2
    exit 1
fi

# -enable-testing: ContainerFilesFuzz reaches the internal parsers with @testable import.
scratch="$PWD/.build-fuzz${package:+-$package}"
"$swift_bin" build -c release --product "$target" --package-path "${package:-.}" \
    -Xswiftc -DFUZZING -Xswiftc -enable-testing \
    -Xswiftc -sanitize=address \
    -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp \
    -Xcc -fsanitize=address \
    -Xcc -fsanitize-coverage=inline-8bit-counters,pc-table,trace-cmp \
    -Xlinker "$fuzzer_lib" -Xlinker -lstdc++ \
    --scratch-path "$scratch"

mkdir -p "Fuzz/corpus-$target" Fuzz/artifacts
# Let libFuzzer handle traps: Swift's own backtracer would take the signal first and can hang
# under ASan, so no crash artifact would ever be written.
export SWIFT_BACKTRACE=enable=no
exec "$scratch/release/$target" "Fuzz/corpus-$target" "$seeds" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 "${extra[@]}" \
    -artifact_prefix=Fuzz/artifacts/ -print_final_stats=1 "$@"
