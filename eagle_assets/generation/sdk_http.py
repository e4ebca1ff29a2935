"""The HTTP library under the installed OpenAI SDK: ``httpx2`` from openai 3 on, ``httpx`` before.

Transports, limits and event hooks handed to the SDK must come from the library it was built on.
"""

import openai

if int(openai.__version__.split(".")[0]) >= 3:
    import httpx2 as httpx
else:  # pragma: no cover - older SDKs
    import httpx

__all__ = ["httpx"]
