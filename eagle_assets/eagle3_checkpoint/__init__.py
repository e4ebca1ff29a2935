"""The ``eagle3_checkpoint`` asset: an EAGLE-3 draft trained with speculators.

One job per module:

- :mod:`~eagle_assets.eagle3_checkpoint.training_data` lays out a speculators training folder from the
  ``token_sequences`` and ``hidden_states`` partitions (links to the tensors, never copies);
- :mod:`~eagle_assets.eagle3_checkpoint.vocab` builds the draft vocabulary from supervised-token counts;
- :mod:`~eagle_assets.eagle3_checkpoint.trainer_process.cpu` adapts speculators' trainer to a machine without an
  accelerator;
- :mod:`~eagle_assets.eagle3_checkpoint.trainer_process.launch` is the process entry point (``python -m`` or
  ``torchrun -m``);
- :mod:`~eagle_assets.eagle3_checkpoint.trainer` starts that process and streams its log;
- :mod:`~eagle_assets.eagle3_checkpoint.saved` keeps the best checkpoint and validates it against the verifier.

Random features in the storage layout, for tests and benchmarks of the training path, are test data:
``tests/helpers/synthetic.py`` writes them, outside the package.

Importing this package imports no torch: the Dagster code location stays light.
"""
