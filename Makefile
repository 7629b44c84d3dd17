# The two commands of the README: `make demo` and `make test`. `make bench` runs the benchmarks.
SWIFT ?= swift

.PHONY: deps build test doc-check demo bench fuzz

# libinotifytools (Debian: libinotifytools0-dev) is the one system library the package's libraries link; libpng and
# libjpeg-turbo (libpng-dev, libjpeg62-turbo-dev) decode the video widget example's thumbnails; curl and tmux are
# for tests (the file server's comparisons, the interactive demo's test) and the demo.
deps:
	@if [ ! -f /usr/include/inotifytools/inotifytools.h ] || [ ! -f /usr/include/png.h ] \
	  || [ ! -f /usr/include/jpeglib.h ] || ! command -v curl >/dev/null 2>&1 \
	  || ! command -v tmux >/dev/null 2>&1; then \
	  echo "installing libinotifytools0-dev, libpng-dev, libjpeg62-turbo-dev, curl and tmux"; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libinotifytools0-dev libpng-dev libjpeg62-turbo-dev \
	    curl tmux; \
	fi

build: deps
	$(SWIFT) build

# The main test process runs at most 4 tests at a time (SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH, read by
# Swift Testing 6.3).
# Unbounded, Swift Testing starts every test at once and each test's time limit runs from its start; the tests
# share the cooperative pool, two threads on two cores, and long synchronous tests (PathSafetyTests'
# 2 x 20,000 writes, the property-list fuzz loops) held both threads for about two minutes: ~110-180 tests that
# had started, trivial ones too, exceeded their minute before they ran (the "stall" of agents and servers started
# late; 148 s runs with 116-205 issues). With the width bounded, a test's clock starts when it gets a slot.
# Two test processes: the memory-pressure suites run alone, unbounded. Their reason is not the stall: the whole
# suite's load makes the system's PSI trigger fire, and a system warning landing in their cgroup scenario breaks
# its expected sequence (aCacheInAMemoryLimitedCgroupGivesMemoryBack failed so in two of three single-process
# runs). Bounded to 4 they failed 3 runs in 3 (a system warning reached aChildGrowingPastItsBudgetGetsAWarning,
# one cgroup scenario's reclaim landing in the next test); unbounded, all at once, they passed 3 in 3.
# MALLOC_MMAP_THRESHOLD_: Foundation's Process.run (tests that start their own Process) copies the whole 256-byte
# d_name of each /proc/self/fd entry, reading past the end of glibc's DIR buffer; in a test process with over
# ~1,360 descriptors the last entry of a full buffer sits at its end, and when the buffer ends at the edge of a
# thread heap the read faults. With the threshold under the buffer's 32 KiB the buffer is mmapped with slack behind
# it. The test process still reaches ~2,600 descriptors: the library keeps each container's coordination space
# (5 descriptors) for the process's life, and the suite opens ~430 containers. Since then every child of the tests
# and of the library starts with posix_spawn (`runToEnd`, `SpawnedProcess`, `ProcessSpawn.Reaped`): the crash still
# came about one CI run in ten. The setting stays for the pressure suites' children, which inherit it (their
# released chunks are mmapped, so freeing them lowers the resident size the tests measure).
TEST_ENV = MALLOC_MMAP_THRESHOLD_=16384
PRESSURE_SUITES = ImageCachePressureTests|MemoryPressureTests
test: deps
	$(SWIFT) build --build-tests
	$(MAKE) doc-check
	$(TEST_ENV) SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=4 $(SWIFT) test --skip-build --disable-xctest \
	  --skip 'ImageCachePressureTests' --skip 'MemoryPressureTests'
	$(TEST_ENV) $(SWIFT) test --skip-build --disable-xctest --filter '$(PRESSURE_SUITES)'

# Every public declaration of the libraries has a doc comment (issue #12): the symbol graphs, then a checker that
# lists the undocumented ones and fails above zero. A step of its own, outside `swift test`: a test running
# `swift` would wait on the build lock that `swift test` holds.
doc-check:
	@dir=$$($(SWIFT) package dump-symbol-graph --minimum-access-level public --skip-synthesized-members --skip-inherited-docs \
	  | sed -n 's/^Files written to //p'); \
	  test -n "$$dir" || { echo "swift package dump-symbol-graph wrote no symbol graphs"; exit 1; }; \
	  $(SWIFT) scripts/check-doc-comments.swift "$$dir" "$(CURDIR)"

# Two tmux panes when tmux is there (installed here when we may; inside tmux, a new window); otherwise one terminal
# with prefixes. Each run gets a fresh container (DEMO_KEEP=1 keeps it, DEMO_ROOT=dir chooses one); q or Ctrl-C
# stops every process the demo started. DEMO_HEADLESS=1 runs the scripted scenario and checks its steps and their
# order. See the header of scripts/demo.sh.
demo: build
	@if [ "$${DEMO_HEADLESS:-0}" != 1 ] && [ -t 1 ] && ! command -v tmux >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  apt-get install -y -qq tmux >/dev/null 2>&1 || true; \
	fi
	bash scripts/demo.sh

bench: deps
	cd Benchmarks && $(SWIFT) package --allow-writing-to-package-directory benchmark

# Five minutes on each libFuzzer harness (FUZZ_SECONDS to change).
FUZZ_SECONDS ?= 300
fuzz: deps
	bash Fuzz/run.sh PropertyListFuzz $(FUZZ_SECONDS)
	bash Fuzz/run.sh ContainerFilesFuzz $(FUZZ_SECONDS)
	bash Fuzz/run.sh ImageHeadersFuzz $(FUZZ_SECONDS)
	bash Fuzz/run.sh DownloadHeadersFuzz $(FUZZ_SECONDS)
	bash Fuzz/run.sh ThumbnailDecodeFuzz $(FUZZ_SECONDS)
