"""The ``eagle3_eval`` asset: acceptance of an EAGLE-3 draft, measured by vLLM speculative decoding, and simulated
offline.

Both numbers use vLLM's convention, acceptance length τ = 1 + accepted draft tokens / drafts (the
verifier's own token at each step is the +1), so they compare directly:

* :mod:`~eagle_assets.eagle3_eval.metrics` — vLLM's spec-decode counters from ``/metrics``;
* :mod:`~eagle_assets.eagle3_eval.served` — greedy requests and the counter delta they cause;
* :mod:`~eagle_assets.eagle3_checkpoint.simulated` — the draft's chained proposals against the verifier's
  greedy tokens, from verifier hidden states through speculators' own forward;
* :mod:`~eagle_assets.eagle3_eval.evaluate` — one evaluation of a checkpoint (asset and benchmark);
* :mod:`~eagle_assets.eagle3_eval.numbers` — what it measured, as metadata keys per prompt set, and their readers.
"""
