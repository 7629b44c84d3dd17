# The two commands of the README: `make demo` and `make test`. `make bench` runs the benchmarks.
SWIFT ?= swift

.PHONY: deps build test test-long test-under-load doc-check lint demo bench static-programs bench-check \
  bench-thresholds fuzz fuzz-check fuzz-merge

# libinotifytools (Debian: libinotifytools0-dev) is the one system library the package's libraries link; libpng and
# libjpeg-turbo (libpng-dev, libjpeg62-turbo-dev) decode the video widget example's thumbnails (the Examples package
# only: the root builds without them); curl and tmux are for tests (the file server's comparisons, the interactive
# demo's test) and the demo.
deps:
	@if [ ! -f /usr/include/inotifytools/inotifytools.h ] || [ ! -f /usr/include/png.h ] \
	  || [ ! -f /usr/include/jpeglib.h ] || ! command -v curl >/dev/null 2>&1 \
	  || ! command -v tmux >/dev/null 2>&1; then \
	  echo "installing libinotifytools0-dev, libpng-dev, libjpeg62-turbo-dev, curl and tmux"; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libinotifytools0-dev libpng-dev libjpeg62-turbo-dev \
	    curl tmux; \
	fi

# The root, then the demo apps and README programs: a package of their own in Examples/ (depending on the root by
# path), so their target names never reach a dependent's graph.
build: deps
	$(SWIFT) build
	$(SWIFT) build --package-path Examples

# The tests need the test hooks (fault and pause points, the system-call recorder: the `TestHooks` trait of
# Package.swift), which no dependent's build has. Every step that builds the root here passes it, so the tests never
# run on binaries built without it.
TEST_TRAITS = --traits TestHooks

# Each run gets its own temp directory (TMPDIR: every test root, tool output and child lives there), removed at the
# end (0711: the group-trust tests run as other users beneath it); a process of the run still alive afterwards fails
# the run (and is killed). The memory-pressure suites run in
# a process of their own: the rest of the suite's memory use makes the system-wide PSI warning fire inside their
# cgroup scenarios.
PRESSURE_SUITES = ImageCachePressureTests|MemoryPressureTests
# The kill storm, the I/O-error loops and the hostile-container generator start hundreds of processes: run beside the
# rest, they made its timing-sensitive tests fail on a 2-core CI machine (three fresh-clone runs of session 26), so
# they run after it, alone.
HEAVY_SUITES = KillStormTests|IOErrorInjectionTests|HostileContainerTests
test: deps
	$(SWIFT) build --build-tests $(TEST_TRAITS)
	$(SWIFT) build --package-path Examples --build-tests
	$(MAKE) lint
	$(MAKE) doc-check
	@run=$$(mktemp -d /tmp/gc-test-run.XXXXXX); chmod 0711 "$$run"; status=0; \
	  export TMPDIR=$$run GC_TEST_TIMES=$$run/times; \
	  $(SWIFT) test --skip-build $(TEST_TRAITS) --disable-xctest --skip '$(PRESSURE_SUITES)|$(HEAVY_SUITES)' || status=1; \
	  $(SWIFT) test --skip-build $(TEST_TRAITS) --disable-xctest --filter '$(PRESSURE_SUITES)' || status=1; \
	  $(SWIFT) test --skip-build $(TEST_TRAITS) --disable-xctest --filter '$(HEAVY_SUITES)' || status=1; \
	  $(SWIFT) test --package-path Examples --skip-build --disable-xctest || status=1; \
	  echo "slowest tests (seconds in their run slot):"; sort -rn $$run/times 2>/dev/null | head -10 | sed 's/^/  /'; \
	  bash scripts/test-leftovers.sh "$$run" || status=1; \
	  exit $$status

# The kill storm of issue #36 for 10 minutes (STORM_SECONDS to change; `make test` runs it for 40 s as
# KillStormTests): writers of every module at once, randomly SIGKILLed and SIGSTOPped, then a history checker. Its
# last line: ops= kills= stops= lost= torn= hung=. Then the hostile-container generator over every place × kind
# pair (HOSTILE_COMBOS to change; `make test` runs 40 of them; GC_HOSTILE_SEED replays a run's choice), and the
# storm over a container with hostile files planted before and during it for PLANT_STORM_SECONDS (`make test`: 20 s,
# PlantedKillStormTests). In a temp directory of its own, which must be left with no process.
STORM_SECONDS ?= 600
HOSTILE_COMBOS ?= all
PLANT_STORM_SECONDS ?= 180
test-long: deps
	$(SWIFT) build --build-tests $(TEST_TRAITS)
	@run=$$(mktemp -d /tmp/gc-test-long.XXXXXX); chmod 0711 "$$run"; status=0; \
	  bin=$$($(SWIFT) build $(TEST_TRAITS) --show-bin-path); \
	  TMPDIR=$$run "$$bin/groupctl" stress storm group.com.example.storm --root "$$run" \
	    --seconds $(STORM_SECONDS) || status=1; \
	  TMPDIR=$$run GC_HOSTILE_COMBOS=$(HOSTILE_COMBOS) $(SWIFT) test --skip-build $(TEST_TRAITS) --disable-xctest \
	    --filter HostileContainerTests || status=1; \
	  TMPDIR=$$run GC_STORM_PLANT_SECONDS=$(PLANT_STORM_SECONDS) $(SWIFT) test --skip-build $(TEST_TRAITS) \
	    --disable-xctest --filter PlantedKillStormTests || status=1; \
	  bash scripts/test-leftovers.sh "$$run" || status=1; \
	  exit $$status

# `make test` while four CPU-bound processes keep the machine busy (started and stopped by pid here), as on a
# laptop mid-build or a shared CI runner. LOAD_RUNS runs in a row (default 1).
LOAD_RUNS ?= 1
test-under-load: deps
	$(SWIFT) build --build-tests $(TEST_TRAITS)
	$(SWIFT) build --package-path Examples --build-tests
	@pids=""; for i in 1 2 3 4; do yes > /dev/null & pids="$$pids $$!"; done; \
	  trap 'kill $$pids 2>/dev/null' EXIT; status=0; \
	  for n in $$(seq 1 $(LOAD_RUNS)); do \
	    start=$$(date +%s); $(MAKE) --no-print-directory test > /tmp/gc-test-under-load.$$n.log 2>&1 || status=1; \
	    echo "run $$n: $$(grep -o 'Test run with.*' /tmp/gc-test-under-load.$$n.log | tr '\n' ';') \
	      wall $$(( $$(date +%s) - start )) s, load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	  done; exit $$status

# The repository's own style (.swift-format, the toolchain's swift-format): no warning in any Swift file of the three
# packages, the fuzz harnesses and the scripts (`swift format format --in-place --recursive <dirs>` fixes most).
LINT_PATHS = Sources Tests Benchmarks Examples Fuzz Package.swift scripts
lint:
	$(SWIFT) format lint --strict --recursive $(LINT_PATHS)

# Every public declaration of the libraries has a doc comment (issue #12), and the documentation builds without a
# warning (issue #35: broken symbol links, undocumented parameters): the symbol graphs, then a checker that lists the
# undocumented declarations and fails above zero, then DocC on each library product (its catalog
# Sources/<Module>/Documentation.docc when it has one) with the module's graphs and --warnings-as-errors. A step of its
# own, outside `swift test`: a test running `swift` would wait on the build lock that `swift test` holds. DOCC: the
# toolchain's docc, beside `swift`.
DOCC ?= $(dir $(realpath $(shell command -v $(SWIFT))))docc
DOC_MODULES = GroupContainer GroupContainerCore Messaging FileCoordination AppLaunching SharedDefaults PropertyList MemoryWarnings ImageCache BackgroundDownloads \
  DownloadAgent AppIntents WidgetKit LiveActivities
doc-check:
	@dir=$$($(SWIFT) package $(TEST_TRAITS) dump-symbol-graph --minimum-access-level public --skip-synthesized-members \
	  --skip-inherited-docs --emit-extension-block-symbols | sed -n 's/^Files written to //p'); \
	  test -n "$$dir" || { echo "swift package dump-symbol-graph wrote no symbol graphs"; exit 1; }; \
	  $(SWIFT) scripts/check-doc-comments.swift "$$dir" "$(CURDIR)" || exit 1; \
	  out=$$(mktemp -d /tmp/gc-doc-check.XXXXXX); status=0; \
	  for module in $(DOC_MODULES); do \
	    catalog=Sources/$$module/Documentation.docc; test -d "$$catalog" || catalog=; mkdir -p "$$out/$$module.graphs"; \
	    cp "$$dir/$$module.symbols.json" "$$out/$$module.graphs/" || status=1; \
	    cp "$$dir/$$module"@*.symbols.json "$$out/$$module.graphs/" 2>/dev/null; \
	    "$(DOCC)" convert $$catalog --additional-symbol-graph-dir "$$out/$$module.graphs" \
	      --fallback-display-name "$$module" --fallback-bundle-identifier "$$module" \
	      --output-dir "$$out/$$module.doccarchive" --warnings-as-errors > "$$out/$$module.log" 2>&1 \
	      || { cat "$$out/$$module.log"; echo "DocC: $$module has warnings (above)"; status=1; }; \
	  done; \
	  for catalog in Sources/*/Documentation.docc; do module=$$(basename $$(dirname $$catalog)); \
	    case " $(DOC_MODULES) " in *" $$module "*) ;; *) echo "DocC: $$catalog is not in DOC_MODULES"; status=1;; esac; \
	  done; \
	  rm -rf "$$out"; \
	  test $$status = 0 && echo "DocC: the documentation of $(words $(DOC_MODULES)) modules builds without a warning"; \
	  exit $$status

# Two tmux panes when tmux is there (installed here when we may; inside tmux, a new window); otherwise one terminal
# with prefixes. Each run gets a fresh container (DEMO_KEEP=1 keeps it, DEMO_ROOT=dir chooses one); q or Ctrl-C
# stops every process the demo started. DEMO_HEADLESS=1 runs the scripted scenario and checks its steps and their
# order. See the header of scripts/demo.sh.
demo: build
	@if [ "$${DEMO_HEADLESS:-0}" != 1 ] && [ -t 1 ] && ! command -v tmux >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  apt-get install -y -qq tmux >/dev/null 2>&1 || true; \
	fi
	bash scripts/demo.sh

# aria2 is the download benchmarks' peer (`aria2c -j16`).
bench: deps static-programs
	@command -v aria2c >/dev/null 2>&1 || { SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; $$SUDO apt-get install -y -qq aria2; }
	cd Benchmarks && $(SWIFT) package --allow-writing-to-package-directory benchmark

# The memory rows' programs of DefaultsBenchmarks (`gc-bench-defaults-reader`, an app of shared defaults only, and
# `gc-bench-idle-widget`, an idle widget-like process) linked fully static, in their own build directory: what such
# an app pays without the shared libraries' pages (see ThePressurePolicy). The benchmark executables themselves
# cannot be linked so (package-benchmark's malloc interposer is a shared object). A release build of the libraries:
# several minutes from clean.
static-programs: deps
	cd Benchmarks && for product in gc-bench-defaults-reader gc-bench-idle-widget; do \
	  $(SWIFT) build -c release --static-swift-stdlib -Xswiftc -static-executable \
	    --product $$product --scratch-path .build/static || exit 1; \
	done

# Allocations per operation (issue #37 item 7; system calls per operation are checked in `make test` by
# SyscallThresholdsTests): Benchmarks/AllocationBenchmarks against the p90 thresholds in Benchmarks/Thresholds/
# (package-benchmark's `thresholds check`, as swift-nio keeps its allocation thresholds beside its benchmarks).
# malloc calls are counted by package-benchmark's malloc interposer (LD_PRELOADed by the plugin; on Swift 6.3 no
# jemalloc, no system package). More allocations and fewer (the thresholds must then be lowered, so a later
# regression is not absorbed) both fail; `swift package` exits 1 for either, so the plugin's verdict line is read.
# Not part of `make test`: it needs a release build of the Benchmarks package that shares nothing with the tests'
# debug build — from a clean checkout 10 min 45 s on the shared 2-core machine (load 8–14; 9 of them building the
# libraries and package-benchmark in release), under 1 min once built — so a developer's every `make test` would pay
# it. CI runs it after `make test` (.ci/run; the run took ~25 of its 90 minutes). The target depends on the libraries
# only, not on groupctl or the download agent, so its build leaves out SwiftNIO and BoringSSL. After an intended
# change: `make bench-thresholds`, then commit Benchmarks/Thresholds/.
# The plugin's thresholds command, run in Benchmarks/ by bench-check (once more after a toolchain crash) and
# bench-thresholds.
BENCH_THRESHOLDS = $(SWIFT) package --allow-writing-to-package-directory benchmark thresholds
bench-check: deps
	@cd Benchmarks && log=$$(mktemp /tmp/gc-bench-check.XXXXXX); status=0; \
	  $(BENCH_THRESHOLDS) check --target AllocationBenchmarks --no-progress 2>&1 | tee "$$log" || status=1; \
	  if grep -q 'Thread 0 "swift-package"' "$$log" && grep -q "_dispatch_event_loop_drain" "$$log"; then \
	    echo "bench-check: swift-package itself crashed running the plugin (libdispatch's event loop, a toolchain" \
	      "race on Linux, not the benchmarks): running it once more"; status=0; \
	    $(BENCH_THRESHOLDS) check --target AllocationBenchmarks --no-progress 2>&1 | tee "$$log" || status=1; \
	  fi; \
	  if grep -q "is EQUAL to the defined thresholds" "$$log"; then \
	    echo "bench-check: allocations per operation at their thresholds (Benchmarks/Thresholds/)"; \
	  elif grep -q "is WORSE than the defined thresholds" "$$log"; then \
	    echo "bench-check: more allocations per operation than Benchmarks/Thresholds/ allows (table above); if the" \
	      "change is intended: make bench-thresholds, commit Benchmarks/Thresholds/ and say why"; status=1; \
	  elif grep -q "is BETTER than the defined thresholds" "$$log"; then \
	    echo "bench-check: fewer allocations per operation than Benchmarks/Thresholds/ says (table above): lower" \
	      "them with make bench-thresholds and commit Benchmarks/Thresholds/"; status=1; \
	  else echo "bench-check: the benchmark run failed (above)"; status=1; fi; \
	  rm -f "$$log"; exit $$status

# Rewrites Benchmarks/Thresholds/AllocationBenchmarks.*.p90.json from a run (the release build first).
bench-thresholds: deps
	cd Benchmarks && $(BENCH_THRESHOLDS) update --target AllocationBenchmarks --no-progress

# The libFuzzer harnesses (the list and what each covers: Fuzz/run.sh). `make fuzz`: five minutes on each
# (FUZZ_SECONDS to change), over working corpora kept in Fuzz/corpus-<harness>/ between runs.
fuzz: deps
	bash Fuzz/run.sh all $(or $(FUZZ_SECONDS),300)

# Every harness for 30 s (FUZZ_SECONDS to change) from the corpus committed in Fuzz/corpora/, failing on a crash, a
# leak or a timeout, with each harness's runs and coverage. CI runs it after `make test` (.ci/run); `make test`
# does not: its build (debug, TestHooks) cannot serve the harnesses (release, ASan, coverage), so the check's builds
# would lengthen a developer's every `make test` while sharing nothing with it. A clean check took about 17 minutes
# on a shared 2-core machine (14 of them building: the root's libraries once for its four harnesses, the Examples
# package's ImageCache and thumbnail decoder for the fifth), a check after a change to one harness 4 to 5.
fuzz-check: deps
	bash Fuzz/run.sh check $(or $(FUZZ_SECONDS),30)

# Minimizes each committed corpus (Fuzz/corpora/<harness>/) with its seeds and what `make fuzz` found; commit the
# result when it grew coverage.
fuzz-merge: deps
	bash Fuzz/run.sh merge
