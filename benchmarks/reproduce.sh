#!/usr/bin/env bash
# Every measurement on the benchmark pages, at the sizes they show, through the harness
# (python -m pytest benchmarks): each section saves its run to benchmarks/results/ (pytest-benchmark's
# storage, one file per run, in the schema of benchmarks/schema.json), and the site's pages show
# it the next time they are built. Run it on a machine doing nothing else; the commands' output
# goes to benchmarks/out/logs/.
#
#   bash benchmarks/reproduce.sh            # everything (hours on 2 cores, 30 GB of disk)
#   bash benchmarks/reproduce.sh headline   # one section: headline floor profile suite peers summaries condition overview
#                                           #   plot startup reading input virtual limits verify codecs chunks compensated
#                                           #   accuracy dist simulations wide heat mcmc adversarial tests
#   NOTE='what changed' bash benchmarks/reproduce.sh summaries   # a note saved with the run
#   REF=/tmp/v100 bash benchmarks/reproduce.sh startup   # beside another checkout's code (git archive b895ae4 | tar -x -C /tmp/v100)
set -euo pipefail
cd "$(dirname "$0")/.."
LOGS=benchmarks/out/logs
mkdir -p "$LOGS"
bench() {  # bench NAME PYTEST-ARGS...: one run of the harness, saved to its storage
  local name=$1
  shift
  local note=()
  [ -z "${NOTE:-}" ] || note=(--note "$NOTE")
  echo "== $name: python -m pytest $* --benchmark-autosave" | tee -a "$LOGS/commands.txt"
  python -m pytest "$@" --benchmark-autosave "${note[@]}" 2>&1 | tee "$LOGS/$name.log"
}
T=benchmarks/test_scripts.py

headline() { bench headline "$T::test_headline" --size '2**32'; }
floor() { bench floor "$T::test_headline_floor" --size '2**32'; }
profile() { bench profile "$T::test_profile" --size '2**32' && bench summaries-profile "$T::test_summaries_profile" --size '2**30'; }
suite() { bench suite "$T::test_suite" --size '2**20' --size '2**22' --size '2**24' --size '2**26' --size '2**28' --size '2**30'; }
peers() { bench peers "$T::test_peers" --size '2**30' --repeat 2; }
summaries() {
  bench summaries benchmarks/test_summaries.py::test_summaries_cost --size '2**30' --repeat 3
  bench summaries-slices benchmarks/test_summaries.py::test_summaries_slices
}
condition() { bench until benchmarks/test_summaries.py::test_until_cost --size '2**30' --repeat 3; }
reading() { bench reading benchmarks/test_reading.py --size '2**28' ${REF:+--ref "$REF"}; }  # REF: 1.1.0's code
overview() { bench overview "$T::test_overview" --size '2**32' --repeat 2; }
plot() { bench plot "$T::test_plot_cold" --size '2**30' --repeat 4; }  # --ref OTHER_CHECKOUT: the code before
startup() {  # REF: the release whose start-up a plain write and the readers are held to (1.0.0's code)
  bench start-up benchmarks/test_startup.py::test_start_up --size '2**10' --size '2**24' --repeat 5 ${REF:+--ref "$REF"}
  bench readers-cold benchmarks/test_startup.py::test_readers_cold --size '2**20' --repeat 5 ${REF:+--ref "$REF"}
}
input() { bench input benchmarks/test_input.py --size '2**26' --size '2**28' --repeat 3; }
virtual() {
  bench virtual benchmarks/test_virtual.py -k 'write or slices' --size '2**34' --repeat 2
  bench virtual-read benchmarks/test_virtual.py::test_virtual_read --size '2**30' --repeat 2
}
limits() { bench limits "$T::test_limits" --size '2**30'; }
verify() { bench verify "$T::test_verify" --size '2**28' --repeat 3 && bench verify-31 "$T::test_verify" --size '2**31' --repeat 2; }
codecs() { bench codecs "$T::test_codecs" --size '2**28' --repeat 3; }
chunks() { bench chunks "$T::test_chunks" --size '2**28' --repeat 3; }
compensated() { bench compensated "$T::test_compensated_cost" --size '2**28' --repeat 3; }
accuracy() {  # deterministic: the same numbers on any machine with the same versions
  bench accuracy "$T::test_accuracy" --size '2**20' --size '2**22' --size '2**24' --size '2**26' --size '2**28' --size '2**30'
}
dist() { bench dist "$T::test_scale_out" --size '2**28'; }
simulations() { bench simulations "$T::test_simulations" --size default; }
wide() { bench wide benchmarks/test_wide.py::test_wide --size 512 --repeat 2; }
heat() { bench heat "$T::test_heat_alternating" --size '2**17' --repeat 2; }
mcmc() {
  bench mcmc benchmarks/test_mcmc.py::test_mcmc_memory --size '2**22' --repeat 1
  bench mcmc-arviz benchmarks/test_mcmc.py::test_mcmc_arviz --size '2**20' --repeat 2
}
adversarial() { bench adversarial "$T::test_adversarial" -m long --repeat 10; }
tests() { bench tests "$T::test_tests_cpu" -m long --repeat 2; }

sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(headline floor profile suite peers summaries condition overview plot startup reading input virtual
  limits verify codecs chunks compensated accuracy dist simulations wide heat mcmc adversarial tests)
for section in "${sections[@]}"; do
  "$section"
done
