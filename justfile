set shell := ["bash", "-euo", "pipefail", "-c"]

# Every cargo build of the workspace shares one target dir.
export CARGO_TARGET_DIR := justfile_directory() / "target"

# CI builds everything once from a clean clone on a disk it shares: no incremental state and
# no debug info there, which halves the target dir (about 6 GB of test binaries otherwise).
# Developers keep line tables for backtraces and incremental rebuilds.
export CARGO_PROFILE_DEV_DEBUG := if env("CI", "") == "" { "line-tables-only" } else { "false" }
export CARGO_PROFILE_DEV_INCREMENTAL := if env("CI", "") == "" { "true" } else { "false" }

# List the recipes.
default:
    @just --list

# The demo: workers contending for one lock on the embedded memory backend (no server needed).
# `just demo --workers 8 --seconds 5`, or `--backend redis://127.0.0.1:6379`.
demo *args:
    cargo run --quiet -p dlock-cli -- demo {{args}}

# The dlock CLI: `just dlock status --backend redis://… NAME`.
dlock *args:
    cargo run --quiet -p dlock-cli -- {{args}}

# The proofs (`just proofs`: CPU only) are built first and then run niced in the background
# while the tests against real servers, which mostly wait on them, run in front: the two
# overlap instead of adding up. So does the build of the release artefacts, less niced, which
# the packages' tests after the servers' need. Each one's output is printed when it is done.
# Every test. Installs what is missing first.
test: setup
    #!/usr/bin/env bash
    set -euxo pipefail
    just core-is-sans-io
    cargo build -p dlock-core --target wasm32-wasip2
    just wasm
    # With the dlock crate's metrics feature on (its test checks that the facade gets what the
    # engine counts), so that one build serves every Rust test; the bindings build without it.
    cargo clippy --workspace --exclude dlock-component --all-targets --features dlock/metrics -- -D warnings
    cargo clippy -p dlock-core --features plants --all-targets -- -D warnings
    cargo clippy -p dlock-component --target wasm32-unknown-unknown -- -D warnings
    # dlock-component is a Wasm guest: it is built (and tested through dlock-wasmtime) for wasm32 only.
    cargo test --workspace --exclude dlock-component --features dlock/metrics --no-run
    just proofs --no-run
    # Its own process group (job control), so that a failure in front stops it whole — but
    # not its own session: with the kernel's autogroup scheduling, a new session (setsid)
    # would get half the CPU whatever its nice value.
    set -m
    nice -n 19 just proofs > target/proofs.log 2>&1 &
    proofs=$!
    # The release artefacts of this machine's target: wheel, sdist, npm packages, crates, the
    # component. The aarch64 and musl ones (three times as long again) are `just dist`'s. Its
    # release builds lock target/<triple>/dist, not the tests' target/debug (only the crates'
    # check, a minute at the end, shares that); niced, it takes the CPU the tests leave, and
    # the proofs what it leaves.
    nice -n 10 just dist --target x86_64-unknown-linux-gnu > target/dist.log 2>&1 &
    dist=$!
    set +m
    trap 'kill -- -$proofs -$dist 2>/dev/null || true' EXIT
    # The simulation and the model checker are the proofs'.
    cargo test --workspace --exclude dlock-component --features dlock/metrics --no-fail-fast -- --skip simulation --skip model_check
    # The same features and packages as the line above, so that its test binaries are reused as built.
    DLOCK_TEST_ENGINE=wasm cargo test --workspace --exclude dlock-component --features dlock/metrics --test redis --test zookeeper --test cluster --test redlock --test sql --test redisson --test election
    built=0
    wait "$dist" || built=$?
    cat target/dist.log
    if [ "$built" != 0 ]; then echo "dist: exit $built"; exit "$built"; fi
    just dist-check --target x86_64-unknown-linux-gnu
    # The packages just built, tested as installed: a second `just dist node` would compile
    # the addon again (napi's CLI forces the first build of a type-def cache by an
    # environment variable whose change reruns the crate's build script), about 40 s.
    just _python-test
    just _node-test
    just interop
    status=0
    wait "$proofs" || status=$?
    trap - EXIT
    cat target/proofs.log
    echo "proofs: exit $status"
    exit "$status"

# In release builds on every core: 20,000 simulation seeds (a bug that one seed in 5,000 shows
# is found with 98% probability per run; the ZooKeeper parents hang showed on 6 of 30,000),
# the model checker, and the planted bugs each must catch. `--no-run` builds them only.
# The proofs `just test` runs.
proofs *args:
    DLOCK_SIM_SEEDS=20000 cargo test --release -p dlock-core --test simulation {{args}} -- --nocapture
    cargo test --release -p dlock-core --test model_check {{args}} -- --nocapture
    just plants {{args}}

# No test may depend on an idle machine: the hogs are started here and stopped by pid.
# `just test` with two CPU hogs keeping both cores busy, as on a shared CI machine.
test-under-load:
    #!/usr/bin/env bash
    set -euo pipefail
    yes > /dev/null & hog1=$!
    yes > /dev/null & hog2=$!
    trap 'kill $hog1 $hog2 2>/dev/null || true' EXIT
    start=$(date +%s)
    status=0
    just test || status=$?
    echo "test-under-load: exit $status after $(( $(date +%s) - start )) s with two CPU hogs"
    exit "$status"

# Install the x86_64 wheel of dist/ (built by `just dist`, as users get it) into target/venv,
# and run pytest against the installed package.
python-test: (dist "python" "--target" "x86_64-unknown-linux-gnu") _python-test

# python-test on the wheel dist/ has, without building it (as `just test` runs it).
_python-test:
    #!/usr/bin/env bash
    set -euo pipefail
    venv=target/venv
    [ -x $venv/bin/python ] || python3 -m venv $venv
    $venv/bin/python -m pip install --quiet --disable-pip-version-check pytest mypy redis "psycopg[binary]" pymysql kazoo prometheus_client
    $venv/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps dist/python/dlock-*-manylinux2014_x86_64.*.whl
    status=0
    $venv/bin/python -m pytest -q python/tests || status=$?
    if [ "$status" = 5 ]; then echo "pytest collected no tests: python/tests is broken"; fi
    exit "$status"

# Install the npm packages of dist/ (dlock and dlock-linux-x64-gnu, as users get them) into a
# fresh project, and run node --test there.
node-test: (dist "node" "--target" "x86_64-unknown-linux-gnu") _node-test

# node-test on the packages dist/ has, without building them (as `just test` runs it).
_node-test:
    #!/usr/bin/env bash
    set -euo pipefail
    version=$(node -p "require('./node/package.json').version")
    packages=("$PWD/dist/node/dlock-$version.tgz" "$PWD/dist/node/dlock-linux-x64-gnu-$version.tgz")
    project="$(mktemp -d)/project"
    mkdir -p "$project"
    cp -r node/test "$project/"
    cp README.md "$project/"
    cd "$project"
    npm init -y >/dev/null
    npm install --no-audit --no-fund --loglevel=error "${packages[@]}" typescript@5.9.3 @types/node@20 ioredis@5.8.2 pg@8.23.1 mysql2@3.24.6 prom-client@15.1.3
    DLOCK_VECTORS="{{justfile_directory()}}/tests/vectors" node --test test/*.test.mjs
    rm -rf "$(dirname "$project")"

# Live mixed-language contention on Redis, then ZooKeeper: Rust, Rust+Wasm, Python and Node
# workers share one lock (needs the wheel python-test installs and the addon `just dist node`
# builds into node/);
# then Java workers on Curator share a lock and a read-write lock with them on ZooKeeper (the
# JVM worker is built here, with Maven).
interop:
    (cd contract/java && mvn -q -B package > ../../target/interop-maven.log 2>&1) || { cat target/interop-maven.log; exit 1; }
    # One backend pair at a time: eight workers and their servers each, on a shared machine.
    # The packages and features of `just test`'s build, whose test binary this is (alone, the
    # crate would unify other features and build dlock and itself again).
    cargo test --workspace --exclude dlock-component --features dlock/metrics --test contention -- --ignored --nocapture --test-threads=1

# Planted bugs (core/src/plant.rs), each switched on in turn in a test build of the core: the
# simulation must catch each of its plants within CI's 20,000 seeds (it prints the seed and the
# check), the differential test its Lua plant against redis-server.
plants *args:
    cargo test --release -p dlock-core --features plants --test simulation --test differential plants {{args}} -- --ignored --nocapture --test-threads=1

# The fault suite in full (tests/faults): every scenario, or those named, for ROUNDS rounds;
# prints the table and writes tests/faults/results/latest.md. `just test` runs one round.
faults rounds="5" *scenarios:
    cargo build --quiet -p dlock-faults --bins
    "$CARGO_TARGET_DIR/debug/dlock-faults" {{rounds}} {{scenarios}}

# Rewrite tests/vectors/*.json from the native engine (then review the diff and commit it).
vectors:
    cargo run --quiet -p dlock-contract --bin generate

# The engine as a WebAssembly component with no imports: target/dlock.wasm.
wasm:
    cargo build --quiet -p dlock-component --target wasm32-unknown-unknown --profile wasm-release
    cargo run --quiet -p dlock-componentize -- target/wasm32-unknown-unknown/wasm-release/dlock_component.wasm target/dlock.wasm

# The release artefacts in dist/: wheels, sdist, npm packages, crates, dlock.wasm, SHA256SUMS
# (scripts/dist). `just dist python --target x86_64-unknown-linux-gnu` builds only those.
dist *args: wasm
    scripts/dist {{args}}

# The artefacts of dist/ installed and run as a user would, with no Rust toolchain on PATH
# (scripts/dist-check): every target's, or `just dist-check --target TRIPLE` those named.
dist-check *args:
    scripts/dist-check {{args}}

# Install the toolchain pieces and services the tests need.
setup:
    scripts/setup

# Set the one version of every package (Cargo.toml, the npm package; the wheel reads Cargo's).
set-version version:
    scripts/set-version {{version}}

# dlock-core's normal dependency tree is itself alone: no I/O, clock or RNG crates.
core-is-sans-io:
    #!/usr/bin/env bash
    set -euo pipefail
    deps=$(cargo tree -p dlock-core -e normal --prefix none --quiet | sort -u)
    if [ "$(echo "$deps" | wc -l)" != 1 ]; then
      echo "dlock-core must have no normal dependencies, found:"; echo "$deps"; exit 1
    fi
    echo "dlock-core is sans-IO: no normal dependencies"

# Long fuzzing runs (release build): `just fuzz 1000000` inputs per target. `just test` runs a
# smoke of each (core/tests/fuzz.rs: engine inputs and reply decoding; bindings/rust/tests/fuzz_json.rs).
fuzz execs="300000":
    DLOCK_FUZZ_EXECS={{execs}} cargo test --release -p dlock-core --test fuzz -- --nocapture
    DLOCK_FUZZ_EXECS={{execs}} cargo test --release -p dlock --test fuzz_json -- --nocapture

# The bounded model checker, deeper than `just test` runs it: every path may fire `more` more
# timers (core/tests/model_check.rs).
model-check more="1":
    DLOCK_MC_MORE_TICKS={{more}} cargo test --release -p dlock-core --test model_check -- --nocapture

# A long simulation run: `just simulate 20000` runs 20,000 seeds.
simulate seeds="2000":
    DLOCK_SIM_SEEDS={{seeds}} cargo test --release -p dlock-core --test simulation -- --nocapture

# One client holding N locks (default 100,000): renewal traffic, client memory per held lock,
# and acquire latency with none vs N held. Writes bench/results/many.md.
bench-many n="100000":
    cargo run --quiet --release -p dlock-bench --bin many -- {{n}}

# Where a dlock cycle's time on the Redis server goes: dlock's functions next to yardstick
# functions and rslock's commands, pipelined, timed by INFO commandstats, then the server's
# instructions per cycle under callgrind where valgrind is installed (writes
# bench/results/scripts.md). Needs Redis 7.
bench-scripts:
    cargo run --quiet --release -p dlock-bench --bin scripts

# Acquire + release latency on Redlock over 3 and 5 redis-servers next to one Redis.
bench-redlock:
    cargo run --quiet --release -p dlock-bench --bin redlock

# `just bench` on PostgreSQL and MariaDB only: dlock from Rust, Python and Node next to
# JdbcLockRegistry, ShedLock, pg_advisory_lock and GET_LOCK (writes bench/results/postgres-mariadb.md).
bench-sql seconds="3" cycles="2000":
    just bench {{seconds}} {{cycles}} "" postgres,mariadb

# Throughput of one hot lock, fair next to non-fair (writes bench/results/fairness.md).
bench-fairness:
    cargo run --quiet --release -p dlock-bench --bin fairness

# The client's CPU per uncontended acquire + release on Redis, counted in instructions under
# valgrind's callgrind (exact from run to run, where timings on a shared machine are not):
# dlock from Rust (native, Wasm) and Python next to rslock, redis-py Lock and
# python-redis-lock. Writes bench/results/instructions.md. Needs valgrind.
bench-instructions: (bench-build "python")
    #!/usr/bin/env bash
    set -euo pipefail
    command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
    target/bench-venv/bin/python bench/instructions.py --python target/bench-venv/bin/python

# What the benchmarks run, as users install it: the wheel (and with "node" the addon, which
# also lands in node/) of `just dist` in target/bench-venv beside the Python peers, the Wasm
# component and the Rust worker (release builds).
bench-build *parts:
    #!/usr/bin/env bash
    set -euo pipefail
    venv=target/bench-venv
    [ -x $venv/bin/python ] || python3 -m venv $venv
    $venv/bin/python -m pip install --quiet --disable-pip-version-check pytest redis python-redis-lock pottery kazoo matplotlib
    just dist {{parts}} --target x86_64-unknown-linux-gnu
    $venv/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps dist/python/dlock-*-manylinux2014_x86_64.*.whl
    just wasm
    cargo build --release --quiet -p dlock-bench --bin worker

# Every library side by side against one redis-server, one ZooKeeper, one PostgreSQL and one
# MariaDB it starts (release builds): dlock from Rust, Wasm, Python and Node next to redis-py,
# python-redis-lock, pottery, node-redlock, rslock, Redisson, kazoo, Curator,
# JdbcLockRegistry, ShedLock and the databases' session locks. Peers go into target/bench-venv,
# bench/node/node_modules and Maven's cache, never into the project. Writes
# bench/results/latest.md and latest.svg and the README's table. `just bench 3 2000 kazoo`
# runs only the libraries whose label matches the third argument (README untouched).
bench seconds="3" cycles="2000" only="" backends="redis,zk,postgres,mariadb": (bench-build "python" "node")
    #!/usr/bin/env bash
    set -euo pipefail
    venv=target/bench-venv
    (cd bench/node && npm install --no-audit --no-fund --loglevel=error)
    rm -f bench/java/target/worker.jar
    if ! command -v mvn >/dev/null; then
      echo "Maven is not installed: the JVM peers are skipped"
    elif ! (cd bench/java && mvn -q -B package > ../../target/bench-maven.log 2>&1); then
      echo "Maven could not build the JVM worker (target/bench-maven.log): the JVM peers are skipped"
    fi
    $venv/bin/python bench/bench.py --seconds {{seconds}} --cycles {{cycles}} --only "{{only}}" --backends "{{backends}}"
