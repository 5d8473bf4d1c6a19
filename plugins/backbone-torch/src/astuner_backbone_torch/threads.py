"""How many CPU threads torch computes with: the cores other processes leave free.

torch's default is one thread per physical core. Beside another process that keeps
the cores busy (a training run), OpenMP's threads spin waiting for each
other at every operation and decoding collapses: on 2 cores beside a
SmolLM2 training run, the quick start's debug look ran at 3 tok/s with 2
threads and 14 tok/s with 1 (21 tok/s with 2 on the quiet machine). So
where the user did not choose (a `num_threads` setting, or
`OMP_NUM_THREADS` in the environment), a process measures once how many of
its cores other processes keep busy and takes the rest, one at least and
never more than torch's default (logical cores count as cores in the load,
but a second thread per physical core slows torch's matrix products), and
says so in one line at the start.

The count is measured when the first model loads and kept for the process:
a run that started on a quiet machine keeps all cores when another starts
beside it (that one takes what is left). Thread counts change the order of
floating-point sums, so bit-for-bit repeatable runs fix `num_threads`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from astuner.api import get_logger

PROC_STAT = Path("/proc/stat")
# Long enough to see a busy neighbour through its short pauses (a step's
# bookkeeping), short enough to go unnoticed at start-up.
SAMPLE_SECONDS = 0.5


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count a process computes with, and where it came from.

    `source`: "setting" (a `num_threads` key), "OMP_NUM_THREADS" (the
    environment, which torch reads itself) or "measured". `busy_cores`: how
    many of this process's cores other processes kept busy while measured
    (None where nothing was measured).
    """

    threads: int
    cores: int
    source: str
    busy_cores: float | None = None

    def sentence(self, key: str) -> str:
        """The start-up line: what is used and, on a busy machine, what to change."""
        of = f"threads: {self.threads} of {self.cores} cores"
        if self.source == "setting":
            return f"{of} ({key})"
        if self.source == "OMP_NUM_THREADS":
            return f"{of} (OMP_NUM_THREADS; {key} overrides it)"
        if self.busy_cores is None:
            return f"{of} (torch's default; could not read the machine's load)"
        if free_threads(self.cores, self.busy_cores) < self.cores:  # the load took cores away
            return (
                f"{of}: other processes kept {self.busy_cores:.1f} cores busy at start, and threads "
                f"competing for a core spin and stall. Set {key} to choose (e.g. the same count for "
                "every run sharing this machine)."
            )
        return f"{of} (the machine was free at start; beside another busy run set {key}: 1)"


def _cpu_times(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks of `cpus` since boot, from /proc/stat; None where unreadable."""
    try:
        lines = PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    busy = total = 0
    seen = False
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[:8])
        # Steal is time another virtual machine took from this one: busy for our purposes.
        busy += user + nice + system + irq + softirq + steal
        total += user + nice + system + idle + iowait + irq + softirq + steal
        seen = True
    return (busy, total) if seen else None


def busy_cores(cpus: set[int], seconds: float = SAMPLE_SECONDS) -> float | None:
    """How many of `cpus` processes other than this one kept busy over `seconds` (None: unknown).

    This process's own CPU time over the sample (all its threads; a model
    loading in the background counts as ours) is taken out, so a process
    never reads itself as the load.
    """
    before = _cpu_times(cpus)
    own_before = os.times()
    start = time.monotonic()
    time.sleep(seconds)
    after = _cpu_times(cpus)
    own_after = os.times()
    wall = time.monotonic() - start
    if before is None or after is None or wall <= 0:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    all_busy = (after[0] - before[0]) / ticks
    own = (own_after.user - own_before.user) + (own_after.system - own_before.system)
    return max(0.0, min(float(len(cpus)), (all_busy - own) / wall))


def free_threads(cores: int, busy: float) -> int:
    """The cores `busy` leaves free, to the nearest whole core, and one at least."""
    return max(1, min(cores, int(cores - busy + 0.5)))


_measured: ThreadChoice | None = None


def measured_choice(default: int) -> ThreadChoice:
    """The free cores, at least one and at most `default` (torch's own count), measured once per
    process."""
    global _measured
    if _measured is None:
        cpus = os.sched_getaffinity(0)
        cores = len(cpus)
        busy = busy_cores(cpus)
        threads = default if busy is None else min(default, free_threads(cores, busy))
        _measured = ThreadChoice(threads, cores, "measured", busy)
    return _measured


_announced: ThreadChoice | None = None
# torch's thread count before this module set one: one per physical core, or MKL_NUM_THREADS's.
_torch_default: int | None = None


def use_threads(setting: int | None, key: str) -> ThreadChoice:
    """Set torch's thread count for this process and say it once; `key` names the setting to change.

    `setting` (a `num_threads` key) wins; else `OMP_NUM_THREADS`, which torch
    has already applied; else what another key of this process set; else the
    measured free cores.
    """
    global _announced, _torch_default
    import torch

    if _torch_default is None:
        _torch_default = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0))
    if setting:
        choice = ThreadChoice(setting, cores, "setting")
    elif os.environ.get("OMP_NUM_THREADS"):
        choice = ThreadChoice(torch.get_num_threads(), cores, "OMP_NUM_THREADS")
    elif _announced is not None and _announced.source == "setting":
        # Another key of this process chose (torch.num_threads, then the engine built in the same
        # process): torch's count is one per process, and a key left unset does not undo a choice.
        choice = _announced
    else:
        choice = measured_choice(_torch_default)
    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)
    if choice != _announced:
        get_logger().info(choice.sentence(key))
        _announced = choice
    return choice
