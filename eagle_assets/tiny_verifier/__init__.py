"""The embedded verifiers: tiny reasoning models the project builds and caches itself.

tiny-qwen3 (the default) is a Qwen3 decoder; tiny-kimi has Kimi-K2.5's shape (a DeepSeek-V3 decoder
with MLA and experts, inside a ``kimi_k25`` wrapper, Kimi's chat markup). Both are built like this:

no model can be downloaded here, so the demo's verifier is built from scratch: a byte-level BPE
tokenizer trained on the task text, a chat template with ``<think>``/``</think>``, and a
few hundred CPU steps on step-by-step arithmetic (plus short fixed-style replies to any other prompt),
so that it really writes thinking, ``</think>``, an answer and ``<|im_end|>``.
"""
