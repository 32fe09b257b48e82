#!/usr/bin/env bash
# The two commands of the README: `bash run.sh demo` (the main job) and `bash run.sh test`.
# Both install what the project needs on a fresh machine first (as root: network namespaces,
# veth devices and per-socket congestion control need it).
set -euo pipefail
cd "$(dirname "$0")"

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "lowtide builds network namespaces and veth devices: run this as root (sudo bash run.sh $1)" >&2
    exit 2
  fi
}

install_system_packages() {
  # ip (namespaces, veth), ping for `lowtide netem shell`, a font for the reports' PNG copies,
  # curl and python3 (http.server) for the BWSS tests: unmodified programs under the
  # LD_PRELOAD library; iptables for the RDC agent's NFQUEUE rules.
  local missing=()
  command -v ip >/dev/null || missing+=(iproute2)
  command -v ping >/dev/null || missing+=(iputils-ping)
  command -v curl >/dev/null || missing+=(curl)
  command -v python3 >/dev/null || missing+=(python3)
  command -v iptables >/dev/null || missing+=(iptables)
  # cc and pkg-config build the C API's examples against liblowtide_c (crates/lowtide-ffi).
  command -v cc >/dev/null || missing+=(gcc libc6-dev)
  command -v pkg-config >/dev/null || missing+=(pkgconf)
  [ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
  # ffmpeg and ffprobe decode the encoded-video tests' gated streams (lowtide-media).
  command -v ffmpeg >/dev/null || missing+=(ffmpeg)
  # Headless Chromium (Debian's build decodes H.264 with WebCodecs) is the browser viewer of
  # `lowtide serve`'s player page: the serve tests and the lab's browser viewers
  # (crates/lowtide-lab/src/chromium.rs).
  command -v chromium >/dev/null || missing+=(chromium)
  # GStreamer 1.22 (Debian 12) for the plugin crates/lowtide-gst: the -dev packages to build
  # it (the workspace does not build without them), the tools (gst-inspect-1.0) and the
  # encoders, parsers and decoders its element tests run (x264enc, vp8enc, avdec_h264, ...).
  local pkg
  for pkg in gstreamer1.0-tools libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev \
    gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad \
    gstreamer1.0-plugins-ugly gstreamer1.0-libav; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]} (apt-get)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt >/dev/null 2>&1 || true
}

case "${1:-}" in
  demo)
    need_root demo
    install_system_packages
    # The GStreamer plugin too: the live-video lab runs gst-launch-1.0 with it.
    cargo build --release --locked -p lowtide-cli -p lowtide-gst
    shift
    exec ./target/release/lowtide demo "$@"
    ;;
  test)
    need_root test
    install_system_packages
    # One build from clean: incremental compilation's caches would only take disk.
    export CARGO_INCREMENTAL=0
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --locked -- -D warnings
    # The API documentation builds without a warning (broken links, private items).
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
    # The LD_PRELOAD library's tests run programs under the .so, which `cargo test` does not
    # build for them; the C API's library is built too (its test links the examples with cc),
    # and the GStreamer plugin (the live-video lab test runs gst-launch-1.0 with it).
    cargo build --locked -p lowtide-bwss-preload -p lowtide-ffi -p lowtide-gst
    # Emulator tests build namespaces and measure timing: one test binary at a time, each
    # test serialised inside its binary by a lock, so two cores are not oversubscribed.
    cargo test --workspace --locked -- --test-threads=2
    ;;
  fuzz)
    # Coverage-guided fuzzing of every parser of outside bytes (cargo-fuzz, libFuzzer, built
    # with AddressSanitizer, which also reports leaks): each target until it has run RUNS
    # inputs or SECONDS have passed, whichever comes first. Not part of `test`: its result
    # depends on time, not on the code alone. New inputs go to a scratch corpus (the committed
    # seeds in fuzz/corpus/ are read, not written); a crash stops the target and is kept in
    # fuzz/artifacts/. Ends with one line per target: executions, executions per second,
    # coverage (libFuzzer's `cov`: edges reached) and peak memory.
    seconds="${2:-60}"
    runs="${3:-10000000}"
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    # cargo-fuzz needs a nightly compiler's -Z flags: nightly when rustup has it, else the
    # stable compiler with RUSTC_BOOTSTRAP (the same flags, without the nightly label).
    if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
      fuzz=(cargo +nightly fuzz)
    else
      export RUSTC_BOOTSTRAP=1
      fuzz=(cargo fuzz)
    fi
    # -O: optimised as shipped, without debug assertions (the corpus replay in `test` runs
    # every input with overflow checks on).
    "${fuzz[@]}" build -O
    scratch="$(mktemp -d /tmp/lowtide-fuzz.XXXXXX)"
    summary="$scratch/summary"
    touch "$summary"
    # The table also when a target fails to build or the run is interrupted.
    trap 'printf "%-20s %12s %10s %8s %8s  %s\n" target executions "execs/s" edges "peak MB" result;
          cat "$summary"; rm -rf "$scratch"' EXIT
    failed=0
    for target in $("${fuzz[@]}" list); do
      echo "fuzzing $target: up to $runs inputs or $seconds s" >&2
      mkdir -p "$scratch/corpus/$target"
      log="$scratch/$target.log"
      if "${fuzz[@]}" run -O "$target" "$scratch/corpus/$target" "fuzz/corpus/$target" -- \
          -runs="$runs" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 \
          >"$log" 2>&1; then
        verdict=ok
      else
        verdict=FAILED
        failed=1
        tail -40 "$log" >&2
      fi
      # A target that did not build or start has none of these lines: "?" then.
      execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
      rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1 || true)
      rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1 || true)
      cov=$({ grep -o 'cov: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
      printf '%-20s %12s %10s %8s %8s  %s\n' "$target" "${execs:-?}" "${rate:-?}" \
        "${cov:-?}" "${rss:-?}" "$verdict" >>"$summary"
    done
    exit "$failed"
    ;;
  miri)
    # Miri (rustc's interpreter that detects undefined behaviour: out-of-bounds or misaligned
    # access, use after free, data races) on the pure logic next to lowtide's unsafe code: the
    # BWSS shared-memory layout (crates/lowtide-bwss/src/shm.rs, on an ordinary allocation:
    # Miri cannot map a memfd) and the C API's handle table (crates/lowtide-ffi/src/handles.rs).
    # Not part of `test`: it interprets, and building the dependencies for it takes minutes.
    # lowtide-bwss without its default feature (the lowtide channel: tokio, rustls) and
    # without the dev-dependencies its unit tests do not need (Cargo.toml: cfg(not(miri))):
    # 31 crates to build for Miri instead of 252.
    rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^miri' ||
      rustup component add --toolchain nightly miri rust-src
    cargo +nightly miri setup
    cargo +nightly miri test --locked -p lowtide-bwss --no-default-features --lib shm::tests
    cargo +nightly miri test --locked -p lowtide-ffi --lib handles::tests
    ;;
  asan)
    # AddressSanitizer (out-of-bounds access, use after free, double free; LeakSanitizer when
    # each process exits) on the code that runs inside other people's programs:
    # - the C API (crates/lowtide-ffi): its unit tests, its bad-input tests, and its C
    #   examples, compiled with `cc -fsanitize=address` (LOWTIDE_TEST_CFLAGS) against a
    #   liblowtide_c.so built with the sanitizer, sending and receiving over loopback;
    # - the LD_PRELOAD library (crates/lowtide-bwss-preload): its tests, with the daemon a
    #   thread of the test process: real curl fetching from `python3 -m http.server` under the
    #   library (curl, not built with the sanitizer, loads gcc's ASan runtime first:
    #   LOWTIDE_TEST_ASAN_RUNTIME), and the `scenario` example (epoll, poll, fork, dup, UDP).
    # The Rust code, the standard library included (-Zbuild-std), is built with nightly's
    # -Zsanitizer=address in a target directory of its own (target/asan). A finding ends the
    # process that made it with an error, and its test fails.
    # Leak checks (detect_leaks=1) that mean something: the C examples free every handle and
    # the test processes drop what they made, so a leak there is lowtide's; curl's report
    # covers curl and libcurl as well as the library (python's http.server does not run
    # under the library or the sanitizer).
    # Not part of `test`: nightly, and a second build of everything these crates use.
    asan_missing=()
    command -v curl >/dev/null || asan_missing+=(curl)
    command -v python3 >/dev/null || asan_missing+=(python3)
    command -v cc >/dev/null || asan_missing+=(gcc libc6-dev)
    command -v pkg-config >/dev/null || asan_missing+=(pkgconf)
    if [ ${#asan_missing[@]} -gt 0 ]; then
      echo "installing ${asan_missing[*]} (apt-get)" >&2
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${asan_missing[@]}" >/dev/null
    fi
    rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src' ||
      rustup component add --toolchain nightly rust-src
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/asan"
    # --export-dynamic: a Rust executable (the `scenario` example) links the ASan runtime
    # statically and must export it to the instrumented .so preloaded into it (without it:
    # "undefined symbol: __asan_option_detect_stack_use_after_return").
    export RUSTFLAGS="-Zsanitizer=address -Cforce-frame-pointers=yes -Clink-arg=-Wl,--export-dynamic"
    export ASAN_OPTIONS="detect_leaks=1"
    export LOWTIDE_TEST_CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g"
    LOWTIDE_TEST_ASAN_RUNTIME="$(cc -print-file-name=libasan.so)"
    export LOWTIDE_TEST_ASAN_RUNTIME
    asan=(-Zbuild-std --target x86_64-unknown-linux-gnu --locked -p lowtide-ffi -p lowtide-bwss-preload)
    # The libraries and the scenario example first (`cargo test` builds neither cdylib for
    # the tests that load it); then the tests, without doctests (rustdoc would link them
    # against the instrumented crates without the sanitizer's runtime).
    cargo +nightly build "${asan[@]}" --lib --examples
    cargo +nightly test "${asan[@]}" --lib --tests -- --test-threads=1
    ;;
  *)
    echo "usage: bash run.sh demo | test | fuzz [SECONDS [RUNS]] | miri | asan" >&2
    exit 2
    ;;
esac
