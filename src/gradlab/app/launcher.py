"""hydra/launcher=slurm: Hydra's submitit SLURM launcher, with what goes wrong said in one line.

- A submission SLURM refuses (memory, CPUs, partition, GPUs) is one line naming the resource,
  what a node of the partition has (sinfo) and the override to use, exit 2; not submitit's
  traceback after sbatch's own lines.
- A job that ends without a result (scancel, killed over its memory, a lost node, a crash
  outside the run) is one line and a failed job of the sweep, whose other jobs are still
  summarized; not the end of the sweep.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _Slurm
from omegaconf import OmegaConf, open_dict

SUGGESTED = {"mem_gb": 2, "cpus_per_task": 1}  # conf/hydra/launcher/slurm.yaml's request
log = logging.getLogger(__name__)


class SlurmLauncher(_Slurm):
    """submitit's SLURM launcher (same config, same jobs) with one-line failures."""

    def _executor(self):
        """The submitit executor, set up from the launcher's parameters as the plugin does."""
        import submitit

        init = {"folder": self.params["submitit_folder"]}
        if "max_num_timeout" in self.params:
            init["slurm_max_num_timeout"] = self.params["max_num_timeout"]
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        skip = {"submitit_folder", "max_num_timeout"}
        executor.update_parameters(
            **{k if k in base else f"slurm_{k}": v for k, v in self.params.items() if k not in skip}
        )
        return executor

    def launch(self, job_overrides, initial_job_idx):
        from submitit.core.utils import FailedJobError

        executor = self._executor()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        params = [
            (list(o), "hydra.sweep.dir", initial_job_idx + i, f"job_id_for_{initial_job_idx + i}")
            for i, o in enumerate(job_overrides)
        ]
        for overrides, _, idx, _ in params:
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
        state = Singleton.get_state()
        try:  # sbatch's own error lines would come before the one line that says what to do
            with contextlib.redirect_stderr(io.StringIO()):
                jobs = executor.map_array(self, *zip(*[(*p, state) for p in params]))
        except FailedJobError as e:
            print(f"error: {refusal(str(e), self.params)}", file=sys.stderr)
            raise SystemExit(2) from None
        return [self._result(job, p[0], p[2]) for job, p in zip(jobs, params)]

    def _result(self, job, overrides: list[str], idx: int) -> JobReturn:
        """The job's JobReturn; for a job without a result, a failed job's (the sweeper gets
        the worst value, as for a run that failed) after one line saying why."""
        from submitit.core.utils import FailedJobError, UncompletedJobError

        try:
            return job.results()[0]
        except UncompletedJobError:
            why = f"SLURM job {job.job_id} ended {job.state} without a result"
        except FailedJobError as e:  # "...with trace:\n-----\n<trace>\n-----\n..."
            trace = str(e).split("-" * 22 + "\n")
            lines = (trace[1] if len(trace) > 1 else str(e)).strip().splitlines() or ["?"]
            why = f"SLURM job {job.job_id} raised {lines[-1]}"
        print(f"error: job #{idx}: {why}; log: {job.paths.stderr}", file=sys.stderr)
        ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
        ret.return_value = self._lost(overrides, idx, why)
        return ret

    def _lost(self, overrides: list[str], idx: int, why: str) -> float:
        """Mark the job's summary.json failed if the job never settled it; the worst value."""
        from gradlab.app.run import optimized_value
        from gradlab.training.record import RunSummary, read_summary, write_summary

        with contextlib.suppress(Exception):  # a dir it cannot name, or read, is left as it is
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
            with open_dict(cfg.hydra.job):
                cfg.hydra.job.num = idx
            path = Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir) / "summary.json"
            prior = RunSummary.from_dict(read_summary(path)) if path.exists() else RunSummary()
            if prior.status == "running":  # the run never settled it
                prior.update(status="failed", reason=why)
                path.parent.mkdir(parents=True, exist_ok=True)
                write_summary(path, prior)
        direction = OmegaConf.select(self.config, "hydra.sweeper.direction", default="minimize")
        return optimized_value(RunSummary(status="failed"), "loss_final", str(direction))


def node_capacity(partition: str | None) -> tuple[int, int, str] | None:
    """(CPUs, memory MB, GPUs as gres) of the partition's largest node, from sinfo; None
    without an answer."""
    cmd = ["sinfo", "-h", "-o", "%c %m %G"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout
        rows = [ln.split() for ln in out.splitlines() if len(ln.split()) == 3]
        cpus, mem, gres = max(rows, key=lambda r: (int(r[0]), int(r[1].rstrip("+"))))
        return int(cpus), int(mem.rstrip("+")), gres
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def partitions() -> list[str]:
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted(set(out.split()))


def refusal(message: str, params: dict) -> str:
    """One line for a submission SLURM refused: the resource, what a node has, the override."""
    text, key = " ".join(message.split()), "hydra.launcher."
    part = params.get("partition")
    if "partition" in text.lower():  # an unknown one, or none given and no default
        names = partitions()
        use = f"{key}partition={names[0]}" if len(names) == 1 else f"{key}partition=<one of: "
        use += ", ".join(names) + ">" if len(names) > 1 else ""
        what = f"{key}partition={part} does not exist" if part else "none given, no default"
        return f"SLURM refused the jobs: partition: {what}; use {use}"
    node, where = node_capacity(part), f"partition {part}" if part else "the default partition"
    if "gres" in text.lower() or (params.get("gpus_per_node") and "node configuration" in text):
        has = f"GPUs {node[2]}" if node and node[2] != "(null)" else "no GPUs"
        return (
            f"SLURM refused the jobs: GPUs: {key}gpus_per_node={params.get('gpus_per_node')} but "
            f"a node of {where} has {has}; use {key}gpus_per_node=null (and device=cpu)"
        )
    if "Memory specification" in text or "node configuration is not available" in text:
        gb = node[1] // 1024 if node else None
        use = max(1, min(SUGGESTED["mem_gb"], gb)) if gb else SUGGESTED["mem_gb"]
        has = f" ({gb} GB)" if gb is not None else ""
        return (
            f"SLURM refused the jobs: memory: {key}mem_gb={params.get('mem_gb')} is more than a "
            f"node of {where} has{has}; use e.g. {key}mem_gb={use}"
        )
    if "processors" in text.lower() or "cpu" in text.lower():
        has = f" ({node[0]})" if node else ""
        return (
            f"SLURM refused the jobs: CPUs: {key}cpus_per_task={params.get('cpus_per_task')} is "
            f"more than a node of {where} has{has}; use e.g. "
            f"{key}cpus_per_task={SUGGESTED['cpus_per_task']}"
        )
    errors = [ln for ln in message.splitlines() if "error:" in ln] or [text]
    return f"SLURM refused the jobs: {errors[-1].split('error:', 1)[-1].strip()}"
