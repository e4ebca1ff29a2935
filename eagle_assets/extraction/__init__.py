"""Hidden-state extraction through vLLM: the KV connector that writes a request's captured layers to
disk on CPU and GPU alike, and the offline engine that drives it (``vllm_engine``)."""
