"""The ``reasoning_samples`` asset: the verifier's own reasoning and answers, captured from an
OpenAI-compatible vLLM server with the exact tokens.

* :mod:`.capture_partition` is the stage: which prompts (turns) still need a sample, and capturing them;
* :mod:`.recipe` names what decides a sample (verifier, template, parser, sampling, variants, turns), and
  :mod:`.sample_sets` keeps one sample set per recipe and says which one a materialization continues;
* :mod:`.engine` sends :mod:`.requests` with bounded concurrency over one or more base URLs (:mod:`.chat_http`);
* :mod:`.parsing` turns one chat-completion response into a sample row, :mod:`.quality` classifies it;
* :mod:`.turns` says which assistant turns are asked, in what context (``turns: last | all``);
* :mod:`.variants` assigns each prompt its sampling variant;
* :mod:`.store` keeps the rows in append-only Parquet shards (resumable, exactly-once);
* :mod:`.progress` reports counts and rates every few seconds, :mod:`.summary` the partition's counts.
"""
