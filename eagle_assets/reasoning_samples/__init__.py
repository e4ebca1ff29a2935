"""The ``reasoning_samples`` asset: capturing the verifier's own reasoning and answers from an OpenAI-compatible
vLLM server.

* :mod:`.parsing` turns one chat-completion response into a sample row;
* :mod:`.engine` sends prompts with bounded concurrency over one or more base URLs;
* :mod:`.turns` says which assistant turns are asked, in what context (``turns: last | all``);
* :mod:`.store` keeps the rows in append-only Parquet shards (resumable, exactly-once);
* :mod:`.progress` reports counts and rates every few seconds.
"""
