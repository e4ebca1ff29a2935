"""EAGLE-3 draft training with speculators, as the ``eagle3_checkpoint`` asset uses it.

One job per module:

- :mod:`~eagle_assets.training.data_dir` lays out a speculators training folder from the
  ``token_sequences`` and ``hidden_states`` partitions (links to the tensors, never copies);
- :mod:`~eagle_assets.training.vocab` builds the draft vocabulary from supervised-token counts;
- :mod:`~eagle_assets.training.cpu` adapts speculators' trainer to a machine without an accelerator;
- :mod:`~eagle_assets.training.launch` is the process entry point (``python -m`` or ``torchrun -m``);
- :mod:`~eagle_assets.training.runner` starts that process and streams its log;
- :mod:`~eagle_assets.training.checkpoint` keeps the best checkpoint and validates it against the verifier;
- :mod:`~eagle_assets.training.synthetic` writes random features in the storage layout (tests, benchmarks).

Importing this package imports no torch: the Dagster code location stays light.
"""
