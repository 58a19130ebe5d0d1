"""Hydra takes launchers only from the hydra_plugins package: this is where it finds gradlab's
SLURM launcher (gradlab.app.launcher), the target of conf/hydra/launcher/slurm.yaml."""

try:
    from gradlab.app.launcher import SlurmLauncher as _SlurmLauncher
except ImportError:  # hydra-submitit-launcher (the sweeps extra) is not installed
    _SlurmLauncher = None

if _SlurmLauncher is not None:

    class SlurmLauncher(_SlurmLauncher):
        """gradlab.app.launcher.SlurmLauncher, registered with Hydra."""
