#!/usr/bin/env bash
# Every measurement behind benchmarks/RESULTS.md and the README, in the order they were run
# (one after another, on a machine doing nothing else). Outputs go to benchmarks/out/ and the
# commands' logs to benchmarks/out/logs/; results worth keeping are copied to benchmarks/results/.
#
#   bash benchmarks/reproduce.sh            # everything (about an hour on 2 cores, 30 GB of disk)
#   bash benchmarks/reproduce.sh headline   # one section: headline before rss suite engine codecs chunks
#                                           #   compensated dist cli overview simulations accuracy limits verify adversarial tests
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/out
LOGS=$OUT/logs
mkdir -p "$LOGS"
run() {  # run NAME COMMAND...: log the command, its output and its GNU time report
  local name=$1
  shift
  echo "== $name: $*" | tee -a "$LOGS/commands.txt"
  "$@" 2>&1 | tee "$LOGS/$name.log"
}

headline() {
  for i in 1 2; do
    run "headline-$i" python benchmarks/headline.py --size '2**32' --out /tmp/streamacc-headline.zarr
  done
}

before() {  # the same runs on the release before the buffer pool and ChunkWriter (commit fa2e11d)
  git worktree add -f /tmp/streamacc-before fa2e11d
  for n in 28 30; do
    PYTHONPATH=/tmp/streamacc-before run "before-2p$n" /usr/bin/time -v python -m streamacc write \
      /tmp/streamacc-before.zarr --size "2**$n" --no-progress --overwrite
  done
  rm -rf /tmp/streamacc-before.zarr
  git worktree remove --force /tmp/streamacc-before
}

rss() {  # peak RSS and page faults against the length, the default CLI run
  for n in 24 26 28 30; do
    run "rss-2p$n" /usr/bin/time -v python -m streamacc write /tmp/streamacc-rss.zarr --size "2**$n" \
      --no-progress --overwrite
  done
  rm -rf /tmp/streamacc-rss.zarr
}

suite() {
  run suite python benchmarks/bench_suite.py --size 2**20 2**22 2**24 2**26 2**28 2**30 --repeat 1 --out $OUT/suite
  run suite30 python benchmarks/bench_suite.py --size 2**30 --repeat 3 \
    --approaches streamacc-api streamacc-cli numpy-loop dask-cumprod floor --out $OUT/suite30
}

engine() {
  run engine-throughput python benchmarks/bench_engine.py --mode throughput --compare-recycling
  run engine-memory python benchmarks/bench_engine.py --mode memory --lengths 2**24,2**26,2**28,2**30
}

codecs() {  # the write-path settings behind the defaults
  run codecs python benchmarks/bench_codecs.py --size '2**28' --repeat 3 --block '2**22' \
    --sections codec durable inflight --out $OUT/codecs28
}

chunks() {
  run chunks python benchmarks/bench_chunks.py --size '2**28' --read --repeat 3 --out $OUT/chunks
  run checksum python benchmarks/bench_checksum.py --repeat 30
}

compensated() {
  run compensated-2p32 python benchmarks/headline.py --size '2**32' --compensated --out /tmp/streamacc-compensated.zarr
  run compensated-28 python benchmarks/bench_compensated_cost.py --sizes 2**28 --repeat 3 --out $OUT/compensated28
  run compensated-30 python benchmarks/bench_compensated_cost.py --sizes 2**30 --recipes gp --repeat 3 \
    --out $OUT/compensated30
}

dist() {
  run dist-parts python benchmarks/bench_dist.py parts --size 2**27 --block 2**22
  run dist-runs python benchmarks/bench_dist.py runs --size 2**28 --block 2**22
  run dist-pinned python benchmarks/bench_dist.py pinned --size 2**28 --block 2**22
  run dist-s3 python benchmarks/bench_dist.py runs --size 2**26 --block 2**22 --s3
  run dist-model python benchmarks/bench_dist.py model
}

cli() {
  run cli-startup python benchmarks/bench_cli.py startup --repeat 20
  run cli-recipes python benchmarks/bench_cli.py recipes --size '2**22' --repeat 3
}

overview() {  # what summaries cost on the headline, and a picture of it from them against one from the data
  run overview python benchmarks/bench_overview.py --size '2**32' --dir /tmp/streamacc-overview --pairs 2 \
    --png benchmarks/results/overview_2p32.png --json benchmarks/results/overview_2p32.json
}

accuracy() {  # deterministic: the same numbers on any machine with the same versions
  run accuracy python benchmarks/bench_accuracy.py
}

simulations() {  # states of many values: the chunk layouts, the heat equation (twice), an ensemble, Lorenz-63
  run sim-chunks python benchmarks/bench_simulations.py chunks --dir /tmp/streamacc-sim
  for i in 1 2; do
    run "sim-heat-$i" python benchmarks/bench_simulations.py heat --dir /tmp/streamacc-sim
  done
  run sim-ensemble python benchmarks/bench_simulations.py ensemble --dir /tmp/streamacc-sim
  run sim-lorenz python benchmarks/bench_simulations.py lorenz --dir /tmp/streamacc-sim
}

limits() {  # a write of 2**62 steps against one of 2**30: memory, Ctrl-C, info/open/verify (about 2 min, 15 GB)
  run limits python benchmarks/bench_limits.py --seconds 30 --dir /tmp/streamacc-limits --json $OUT/limits_2p62.json
}

verify() {  # verify of a whole output against its write, each 3 times (2**31: 2 times); about 25 minutes, 6 GB
  run verify-2p28 python benchmarks/bench_verify.py --sizes 2**28 --repeat 3 --dir /tmp/streamacc-verify \
    --json $OUT/verify_2p28.json
  run verify-2p31 python benchmarks/bench_verify.py --sizes 2**31 --repeat 2 --dir /tmp/streamacc-verify \
    --json $OUT/verify_2p31.json
}

adversarial() {  # kill chains, S3 pauses, stalls and data loss, tampering, signals, deletions: counts
  run adversarial /usr/bin/time -v python tests/chaos.py --trials 10 --json benchmarks/results/adversarial.json
}

tests() {  # the test suite twice under GNU time, with the CPU of each test (about 10 minutes)
  run tests python benchmarks/bench_tests.py --repeat 2 --json benchmarks/results/tests_cpu.json
}

sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(headline before rss suite engine codecs chunks compensated dist cli overview simulations
  accuracy limits verify adversarial tests)
for section in "${sections[@]}"; do
  "$section"
done
