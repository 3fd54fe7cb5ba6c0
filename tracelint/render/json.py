"""The JSON report (``--format json``): a stable contract for scripts and CI.

Version 1. Every key below is always present; a value that does not apply is ``null``. Non-finite numbers
(NaN, ±inf, which traces do contain) are written as ``null``. New keys may be added within version 1; a key is
never removed or changed in meaning without raising ``version``.

Whatever a trace or a file name holds, the report is valid JSON that every parser reads back exactly: an integer
beyond ±(2**53 − 1) (a device id or rank a trace made up, in metrics, details or locations) is written as its
decimal string, and a file name's bytes that are not UTF-8 as U+FFFD; DEL, C1 and bidi control characters are
``\\uXXXX`` escapes (tracelint.engine.escape).

::

    {
      "version": 1,
      "files_checked": int,            # source files read
      "fixed": int,                    # fixes written with --fix
      "findings": [{
        "code": "TL101",
        "name": "item-in-loop",        # the rule's name in the catalog
        "severity": "info" | "warning" | "error",
        "message": str,
        "origin": "source" | "trace",
        "path": str,                   # the source file, or the trace file for a trace finding
        "line": int | null,            # 1-based; null for a trace finding
        "column": int | null,          # 1-based, as the text output shows it; null for a trace finding
        "end_line": int | null,
        "end_column": int | null,      # 1-based, exclusive
        "cell": int | null,            # notebook cell (1-based, counting all cells); line/column count within it
        "fingerprint": str,            # stable when lines move and across runs: code + path + message for a
                                       # source finding; code + source line + event (step numbers as N, a job
                                       # finding's rank) for a trace one, not the trace file's name
        "fix": {"title": str, "safe": bool} | null,
        "source": {"path": str, "line": int} | null,   # trace finding whose Python stack gives a source line
        "trace": {"rank": int | null, "step": int | null, "start_us": float | null, "end_us": float | null,
                  "event": str | null} | null,         # trace findings only
        "details": {str: any},         # measured facts of the finding (may be empty)
        "estimate": {                  # what fixing it buys (issue #38; null: no fix or no basis): a trace finding's
          "speedup": float | null,     # step / (step - saved); null where the fix saves the whole step
          "saved_ms_per_step": float, "step_ms": float,  # the step: unprofiled when the trace has it
          "basis": str                 # how it was estimated, in words (docs/estimates.md)
        } | null,
        "evidence": {                  # `tracelint run` only (null otherwise): what each half saw of the finding
          "source": finding | null,    # the lint finding (this shape, its evidence null); null: a trace finding
                                       # no lint finding was paired with
          "trace": finding | null,     # the trace finding of the same family paired with it; null: not seen in
                                       # the profiled steps
          "cost_pct_of_step": float | null,  # the share of the step the trace measured (tracelint.run.merge.COST)
          "match": str | null,         # how they were paired: "same line", "the loop over `loader`", ...
          "in_profiled_steps": bool    # "trace" is not null
        } | null
      }],
      "traces": [{                     # one per trace file and rank
        "path": str, "rank": int | null,
        "verdict": str,                # input-bound | cpu-bound | gpu-bound | comm-bound | pipeline-bound | unknown
        "evidence": str,               # one sentence with the numbers behind the verdict
        "metrics": {str: any},         # snake_case names carrying their unit: gpu_busy_pct, peak_memory_bytes, ...;
                                       # a rank of a job has comm_groups, a record per process group (kind, ranks,
                                       # comm_us, exposed_us, wait_us, waits_for): tracelint.engine.metrics
        "warnings": [str],
        "profiler": {                  # what the profiler recorded (null on a job summary)
          "with_stack": bool | null, "record_shapes": bool | null, "profile_memory": bool | null,
          "with_flops": bool | null, "with_modules": bool | null,
          "inferred": [str],           # settings read from the events, not from the trace's keys
          "unprofiled_step_ms": float | null, "unprofiled_steps": int | null,  # tracelint.profile's record
          "source": str | null,
          "distributed": {             # tracelint.profile under torch.distributed (tracelint/profile/waits.py), or null
            "rank": int, "world_size": int, "backend": str,
            "method": str,             # flight_recorder_timing (NCCL durations) | flight_recorder_arrival (CPU
                                       # backends: arrival times) | both joined by "+"
            "steps": int,              # the unprofiled steps the figures are the mean of
            "step_ms": float,          # this rank's mean unprofiled step
            "wait_ms": float,          # its mean wait per step in collectives and send/recv: own duration minus
                                       # the group's shortest, summed (groups too), at most the step
            "wait_ms_lower": float,    # the longest single group's wait (groups' waits can overlap)
            "comm_ms": float | null,   # its collectives' GPU time per step (null without durations)
            "collectives_per_step": float | null, "untimed": int, "unmatched": int,
            "gather_ms": float,        # the once-per-cycle dump and exchange, outside the timed steps
            "by_kind": {str: {"per_step": float, "comm_ms": float | null, "wait_ms": float | null}},
            "groups": {str: {"desc": str, "ranks": [int], "per_step": float, "comm_ms": float | null,
                             "wait_ms": float | null}},
            "notes": [str]} | null} | null
        "roofline": {                  # achieved TFLOP/s of the work the ops' shapes give (tracelint.trace.roofline);
                                       # null without record_shapes or without their kernels in the steps
          "device": str | null, "peak_tflops": {str: float} | null,   # the device's dense peaks by dtype
          "bandwidth_gbs": float | null, "source": str | null,         # its memory bandwidth; where both come from
          "note": str | null,          # why there is no % of peak (a device the table does not hold)
          "families": [{"family": "gemm" | "convolution" | "attention", "dtype": str | null,  # null: all dtypes
                        "calls_per_step": float, "flop_per_step": int, "bytes_per_step": int,
                        "kernel_ms_per_step": float, "tflops": float | null, "peak_pct": float | null,
                        "flop_per_byte": float | null}],                   # arithmetic intensity
          "top_ops": [{"name": str, "shape": str, "dtype": str, "family": str,
                       "recomputed": bool, ...}],  # the ten op shapes with the most kernel time, keys as families'
          "untimed_ops": int,          # counted ops that launched no kernel in the steps (left out)
          "memory_bound": {"gbps": null, "why": str}} | null  # no GB/s: the trace keeps no shapes for those ops
      }],
      "errors": [{"path": str, "message": str, "line": int | null}],  # inputs that could not be read
      "baseline": {                    # --baseline (or the config's `baseline`); null when the run used none
        "path": str,                   # the baseline file
        "hidden": int,                 # findings of this run the baseline holds: not in `findings`
        "stale": int                   # its entries for the files and rules checked that matched no finding
      } | null,
      "statistics": [{"code": str, "name": str, "count": int, "fixable": bool}],  # --statistics only: the count
                                       # per rule, most frequent first (fixable: a safe fix exists)
      "run": {...},                    # `tracelint run` reports only (absent otherwise), see below
      "verify": [{...}]                # `tracelint verify` reports only (absent otherwise): one entry per target,
                                       # its settings, baseline runs and variants (under --trace each with its
                                       # trace_change, the verdict before → after), the legend of the statuses;
                                       # each measured finding carries the same measurement in
                                       # details.verification
    }

A ``tracelint run`` report is the document above, its findings in the order of their measured cost (the costliest
first, then trace findings without a cost, then the lint findings the trace did not see), each with its
``evidence`` (null for a lint finding where no trace could have seen it: nothing recorded, or no GPU work); a
merged finding (a lint and a trace evidence) sits at the lint finding's line, with its message, its fix and the
trace finding's severity, and under ``--verify`` carries ``details.verification`` as a ``tracelint
verify`` report's findings do. ``run`` says what ran::

      "run": {
        "target": str,                 # train.py | -m pkg.train | torchrun --nproc_per_node 2 train.py
        "kind": "script" | "module" | "torchrun", "argv": [str],      # the script's own arguments
        "out": str, "traces": [str],   # the folder the traces landed in, and the traces analyzed
        "settings": "minimal" | "stacks" | "full",
        "schedule": {"wait": int, "warmup": int, "active": int},
        "plan": {"settle": int, "wait": int, "warmup": int, "active": int, "note": str | null},  # what ran: the
                                       # warm-up detection's most steps, the schedule --max-steps left room for
        "max_steps": int | null, "step_function": str | null,
        "steps": {str: int},           # optimizer steps (or step-function calls) per process
        "unprofiled": {"first_step": int | null, "steps": int,  # the steps timed without the profiler (rank 0's;
                       "profiler_started_after": int | null,   # counted as the script's steps, the first is 1)
                       "warmup": {"first_step": int, "steps_ms": [float], "settled": bool, ...} | null} | null,
        "recorded": {"first_step": int, "last_step": int, "complete": bool,  # the steps the trace holds (rank 0's);
                     "profiler_steps": [int, int]} | null,  # complete false: the script ended during the last
        "clock": "optimizer" | "function" | null,      # what a step was; null: none came
        "window": bool,                # no step came in time: a time window was profiled instead
        "ended": [str],                # per process: returned | exit | max-steps | exception | not-started
        "failure": str | null,         # the script's exception or exit ('ZeroDivisionError: ...'); exit code 2
        "exit_code": int,              # the script's (torchrun's) exit code
        "files_linted": int,           # the script and the project files it imported
        "notes": [str],
        "summary": [str],              # the lines the text report opens with
        "verify": {"min_pct": float, "device_type": str, "selected": [str],  # --verify only: "TL101:47"
                   "note": str | null, ...} | null
      }

A ``tracelint diff BASE NEW`` report is a document of its own (the numbers are defined in tracelint.diff.compare)::

    {
      "version": 1,
      "diffs": [{                      # one per pair: two traces, or one rank of two job folders
        "base": str, "new": str, "rank": int | null,
        "runs": {"base": [str], "new": [str]},         # the traces of each side (several: runs of one config)
        "step_ms": measure,            # step time, as below
        "gpu_ms": measure | null,      # GPU time per step (kernels, copies, memsets launched in the step, NCCL left
                                       # out); null: a side without ProfilerStep
        "mfu": {"base": float | null, "new": float | null,     # mfu_pct of each side (null: none)
                "change_pts": float | null, "change_pct": float | null,
                "basis": {"base": str | null, "new": str | null},  # mfu_basis: what it divides by, or why none
                "model_flop_per_step": {"base": int | null, "new": int | null, "change_pct": float | null},
                "noise_pct": float | null,     # the MFU drop the step time's noise makes: 100·n / (100 + n)
                "drop_limit_pct": float,       # the MFU drop a max_regression_pct slower step makes
                "dropped": bool,               # lower by more than both (it fails the gate when gate.measure is mfu)
                "comparable": bool,            # both have one, same kind of step, same peak, same FLOPs (±3 %)
                "gateable": bool,              # comparable, or all that but the FLOPs (gate-measure = "mfu")
                "why": str | null},            # why not comparable
        "steps": {"base": int, "new": int,             # profiled steps per trace the means are over
                  "few": bool},                        # under 5 on a side: the per-step band is not trusted
        "verdict": {"base": str, "new": str},
        "metrics": [{"name": str, "base": any, "new": any, "delta": float | null, "delta_pct": float | null,
                     "moved": bool}],  # every metric of both traces; moved: beyond the noise
        "kernels": [{"name": str, "class": str, "base_us_per_step": float | null,  # null: not run on that side
                     "new_us_per_step": float | null, "delta_us_per_step": float}],  # the 30 that moved most
        "kernel_classes": [{"name": str, "class": str, "base_us_per_step": float | null,
                            "new_us_per_step": float | null, "delta_us_per_step": float}],
        "kernel_names": {"both": int, "appeared": int, "vanished": int},
        "findings": {"new": [finding], "fixed": [finding]},   # findings as above, matched by rule and place
        "regression": bool,            # the gate failed for this pair (exit code 1)
        "gate": {
          "max_regression_pct": float,
          "measure": "step_time" | "gpu_time" | "mfu",  # gpu_time when both verdicts are gpu-bound; mfu with
                                       # gate-measure = "mfu" where MFU is gateable
          "note": str | null,          # why gate-measure = "mfu" was not followed (then: the time measure)
          "slower": bool,              # that measure is over the limit and over its noise
          "thresholds_crossed": [str],
          "fail_on_new_findings": bool, "fail_on": "info" | "warning" | "error",
          "new_findings": [str]        # NEW's new findings at fail_on or above, "TL101 item-in-loop at train.py:54";
                                       # they fail the gate when fail_on_new_findings
        },
        "summary": str                 # the failing new findings, the change and its causes in one line
      }],
      "errors": [{"path": str, "message": str, "line": int | null}]
    }

where a ``measure`` is ``{"base": float, "new": float (ms, means), "change_pct": float | null, "noise_pct": float |
null, "noise_source": "runs" | "steps" | "floor" | null, "band_pct": float | null}``: ``noise_pct`` is what the
gate holds the change against, from several runs' means ("runs"), the per-step band of one trace a side ("steps",
5 steps or more and wider than the floor) or ``noise-floor-pct`` ("floor"); ``band_pct`` is the per-step 95 % band
(one trace a side; null with several runs or under three steps in all).
"""
from __future__ import annotations

from tracelint.engine.catalog import rule_name
from tracelint.engine.records import baseline_dict, finding_dict
from tracelint.engine.result import RunResult
from tracelint.render._common import dumps, rule_counts, trace_summary_dict

VERSION = 1


def render(result: RunResult, statistics: bool = False) -> str:
    doc = document(result)
    if statistics:  # --statistics: the count per rule beside the findings (ruff's JSON statistics, as a key)
        doc["statistics"] = [{"code": code, "name": rule_name(code), "count": n, "fixable": fixable}
                             for code, n, fixable in rule_counts(result.findings)]
    return dumps(doc) + "\n"


def document(result: RunResult) -> dict:
    """The report as plain data (what ``render`` serializes)."""
    errors = [{"path": e.path, "message": e.message, "line": e.line} for e in result.errors]
    if result.diffs is not None:
        return {"version": VERSION, "diffs": result.diffs, "errors": errors}
    doc = {
        "version": VERSION,
        "files_checked": result.files_checked,
        "fixed": result.fixed,
        "findings": [finding_dict(f) for f in result.findings],
        "traces": [trace_summary_dict(s) for s in result.traces],
        "errors": errors,
        "baseline": baseline_dict(result.baseline),
    }
    if result.run is not None:
        doc["run"] = result.run
    if result.verifications:
        doc["verify"] = result.verifications
    return doc
