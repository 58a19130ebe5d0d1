"""The application layer: Hydra config schema, run assembly, loggers and sweep callbacks.

Nothing else in gradlab imports from here: the library stays usable without Hydra or W&B.
"""
