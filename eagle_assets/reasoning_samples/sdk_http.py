"""The HTTP library under the installed OpenAI SDK: ``httpx2`` from openai 3 on, ``httpx`` before.

The capture's optional test transports, its server probes (model identity, think markers) and its TLS context
come from the library the SDK was built on, so one name (``httpx``) serves whichever is installed.
"""

import openai

if int(openai.__version__.split(".")[0]) >= 3:
    import httpx2 as httpx
else:  # pragma: no cover - older SDKs
    import httpx

__all__ = ["httpx"]
