# The two commands of the README: `make demo` and `make test`. `make bench` runs the benchmarks.
SWIFT ?= swift

.PHONY: deps build test demo bench fuzz

# libinotifytools (Debian: libinotifytools0-dev) is the one system library the package links.
deps:
	@if [ ! -f /usr/include/inotifytools/inotifytools.h ] || ! command -v curl >/dev/null 2>&1; then \
	  echo "installing libinotifytools0-dev and curl"; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libinotifytools0-dev curl; \
	fi

build: deps
	$(SWIFT) build

# MALLOC_MMAP_THRESHOLD_: Foundation's Process.run copies the whole 256-byte d_name of each /proc/self/fd entry,
# reading past the end of glibc's DIR buffer; in a test process with over ~1,360 descriptors the last entry of a
# full buffer sits at its end, and when the buffer ends at the edge of a thread heap the read faults (crashes seen
# in whole-suite runs). With the threshold under the buffer's 32 KiB the buffer is mmapped with slack behind it.
# Three runs. The download suites (which start agents and HTTP servers) run in a process of their own: in one process
# with the rest, agents and servers started late in the run stalled for minutes (not diagnosed yet: see the issue
# notes). The memory-pressure suites run alone too: the whole suite's load makes the system's PSI trigger fire,
# and a system warning landing in their cgroup scenario broke its expected sequence.
TEST_ENV = MALLOC_MMAP_THRESHOLD_=16384
DOWNLOAD_SUITES = BackgroundDownloadsTests|ExamplesTests
PRESSURE_SUITES = ImageCachePressureTests|MemoryPressureTests
test: deps
	$(SWIFT) build --build-tests
	$(TEST_ENV) $(SWIFT) test --skip-build --disable-xctest --skip 'BackgroundDownloadsTests' --skip 'ExamplesTests' \
	  --skip 'ImageCachePressureTests' --skip 'MemoryPressureTests'
	$(TEST_ENV) $(SWIFT) test --skip-build --disable-xctest --filter '$(PRESSURE_SUITES)'
	$(TEST_ENV) $(SWIFT) test --skip-build --disable-xctest --filter '$(DOWNLOAD_SUITES)'


# Two tmux panes when tmux is there (installed here when we may); otherwise one terminal with prefixes.
# DEMO_HEADLESS=1 runs the scripted scenario and checks every step.
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
