"""The model handle's OpenAI-client concern: reaching the rollout over HTTP, as OpenAI-SDK agents do.

The runner's gateway serves each rollout (and each agent in it) at its own
OpenAI-compatible base URL; a call there is recorded in that rollout
exactly as `ModelTuner.chat()` would record it. `OpenAIClients` makes
`openai.AsyncOpenAI` clients for such a URL and closes the HTTP clients it
made for them when the rollout ends.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx

from astuner.errors import AstunerError


def openai_base_url(gateway_url: str | None, rollout_id: str, agent_name: str) -> str:
    """The base URL of one agent of one rollout on the gateway at `gateway_url`."""
    if gateway_url is None:
        raise AstunerError("This model handle has no gateway; the runner starts one per run.")
    return f"{gateway_url}/rollout/{rollout_id}/{agent_name}/v1"


class OpenAIClients:
    """The `openai.AsyncOpenAI` clients of one rollout, and the HTTP clients made for them."""

    def __init__(self) -> None:
        self._http_clients: list[httpx.AsyncClient] = []

    def client(self, base_url: str, **kwargs: Any) -> Any:
        """An `openai.AsyncOpenAI` client at `base_url` (needs `astuner[openai]`); `kwargs` go to it."""
        try:
            from openai import AsyncOpenAI
        except ImportError as exc:
            raise AstunerError(
                "openai_client() needs the openai package: pip install 'astuner[openai]'."
            ) from exc
        if "http_client" not in kwargs:
            kwargs["http_client"] = httpx.AsyncClient(verify=_loopback_ssl_context(), timeout=None)
            self._http_clients.append(kwargs["http_client"])
        return AsyncOpenAI(base_url=base_url, api_key="astuner", **kwargs)

    async def aclose(self) -> None:
        """Close the HTTP clients `client()` made; a client handed in by the caller stays the caller's."""
        while self._http_clients:
            await self._http_clients.pop().aclose()


@functools.cache
def _loopback_ssl_context() -> ssl.SSLContext:
    # The gateway is plain HTTP on loopback; building a default SSL context per
    # client (loading the CA bundle) costs ~30 ms, so every client shares one.
    return ssl.create_default_context()
