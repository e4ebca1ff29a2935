"""The ``hidden_states`` asset: the verifier's auxiliary and final hidden states per training row, in
safetensors files named by content (:mod:`.files`), extracted by the backend on one or more devices
(:mod:`.parallel`) or through vLLM's ``extract_hidden_states`` (:mod:`.vllm_engine` and the KV
connector in :mod:`.vllm_connector`)."""
