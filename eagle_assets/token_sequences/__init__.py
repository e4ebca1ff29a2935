"""The ``token_sequences`` asset: exact token sequences with loss masks (prompt 0, thinking and answer
1) from the captured samples, and the drift check that re-renders them with the chat template."""
