"""A run as a SLURM job: which job it is, whether it is that job started again by SLURM, and
what a pre-empted job does.

One mechanism handles pre-emption: submitit's (hydra/launcher=slurm). Lightning's own
(SLURMEnvironment's auto_requeue) is off, since the Trainer is given a plain environment
(gradlab.app.job): it would save hpc_ckpt files, listen on SIGUSR1 (submitit uses USR2) and
requeue while submitit still recorded the job as done.

- SLURM requeues or pre-empts a job with SIGTERM (`scontrol requeue`, a pre-emption), and its
  time limit comes with submitit's signal (USR2, `signal_delay_s` ahead): either way the run
  stops at the next step boundary and saves checkpoints/interrupted.ckpt (gradlab.app.signals).
- Then the job returns no result, so the sweep goes on waiting for it: after SIGTERM it just
  exits (SLURM has requeued it already, or cancelled it); after submitit's signal, submitit's
  own handler resubmits the same job (the launcher's checkpoint()) and requeues it.
- SLURM starts it again with the same job id in the same job dir; `claim` sees that this job
  wrote the dir's summary.json in an earlier start, and the run resumes from the dir's newest
  checkpoint (last.ckpt after a SIGKILL), metrics.csv cut back to that step.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from gradlab.training.record import RunSummary, read_summary, write_summary


def job_id() -> str | None:
    """This SLURM job's id as submitit names it (array_task for a job array), or None."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID") or None


def restarts() -> int | None:
    """How often SLURM has restarted this job (SLURM_RESTART_COUNT), None outside SLURM."""
    if job_id() is None:
        return None
    return int(os.environ.get("SLURM_RESTART_COUNT") or 0)


def requeue_signal() -> int | None:
    """The signal submitit requeues a job on (SUBMITIT_PREEMPT_SIGNAL, default USR2), in a
    job that submitit started on SLURM; None elsewhere."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm" or job_id() is None:
        return None
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), None)


def requeue_handler():
    """submitit's handler of that signal (installed before the job's function runs), or None."""
    sig = requeue_signal()
    return signal.getsignal(sig) if sig is not None else None


def _prior(run_dir: Path) -> RunSummary | None:
    try:
        return RunSummary.from_dict(read_summary(run_dir / "summary.json"))
    except (OSError, ValueError, TypeError):
        return None


def is_restart(run_dir: Path) -> bool:
    """Whether run_dir's summary.json was written by this SLURM job in an earlier start and
    that run did not complete: then it is resumed, not refused."""
    prior, me = _prior(run_dir), job_id()
    return (
        prior is not None
        and me is not None
        and prior.job_id == me
        and (restarts() or 0) > (prior.job_restarts or 0)
        and prior.status != "completed"
    )


@dataclass
class Restart:
    checkpoint: Path | None  # the dir's newest checkpoint, or None: start from step 0 again
    step: int


def claim(run_dir: Path) -> Restart | None:
    """None for a dir that holds no run; this job's earlier start when SLURM restarted it (see
    is_restart), with metrics.csv cut back to the rows before the step it resumes at; RunFailed
    for any other run (a run never overwrites another)."""
    from gradlab.app.checkpoints import newest
    from gradlab.app.job import RunFailed

    if not (run_dir / "summary.json").exists():
        return None
    if not is_restart(run_dir):
        raise RunFailed(f"{run_dir} already holds a run (summary.json); choose a new output dir")
    found = newest(run_dir)
    restart = Restart(*found) if found else Restart(None, 0)
    _keep_rows_before(run_dir / "metrics.csv", restart.step)
    return restart


def _keep_rows_before(path: Path, step: int) -> None:
    """metrics.csv with its header and the whole rows of steps before `step` only."""
    from gradlab.app.checkpoints import replace_atomically

    if not path.exists():
        return

    def before(line: str) -> bool:
        head = line.split(",", 1)[0]
        return line.endswith("\n") and head.isdigit() and int(head) < step

    lines = path.read_text().splitlines(keepends=True)
    rows = [ln for ln in lines[1:] if before(ln)]
    replace_atomically(path, lambda tmp: tmp.write_text("".join(lines[:1] + rows)))


def hand_over(summary: RunSummary, handler) -> None:
    """In a submitit job, a run interrupted by SIGTERM or by submitit's signal returns no
    result (SystemExit): after submitit's signal, its `handler` resubmits and requeues the job
    first. Anywhere else, and for any other ending, this returns at once."""
    sig = requeue_signal()
    if sig is None or summary.status != "interrupted":
        return
    if summary.reason.startswith(f"{signal.Signals(sig).name} received") and callable(handler):
        from submitit.core.utils import UncompletedJobError

        try:
            handler(sig, None)  # submitit: resubmit, `scontrol requeue`, then exit
        except UncompletedJobError as e:  # timed out more often than max_num_timeout allows
            summary.reason += f"; not requeued: {e}"
            write_summary(Path(summary.output_dir) / "summary.json", summary)
            return
    elif not summary.reason.startswith("SIGTERM received"):  # e.g. scancel --signal=INT
        return
    raise SystemExit(128 + signal.SIGTERM)
