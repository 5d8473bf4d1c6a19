"""A small server speaking the subset of vLLM's OpenAI API that engine `vllm` uses.

Its "model" answers deterministically: the last three prompt tokens in
reverse, then token 2 (its end-of-turn), each with log-prob -0.5. Run as a
script it takes the arguments of vLLM's OpenAI server, so tests can point
`serve_command` at it and exercise the launch-and-stop path.
"""

from __future__ import annotations

import argparse
from typing import Any

from fastapi import FastAPI, HTTPException

END = 2


def make_app(requests: list[dict[str, Any]] | None = None, logprobs: str = "all") -> FastAPI:
    """`logprobs`: "all" (one per token), "none" (`"logprobs": null`, as a server that drops them) or
    "short" (one fewer than the tokens)."""
    app = FastAPI()
    seen = requests if requests is not None else []

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/completions")
    def completions(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body)
        prompt = body["prompt"]
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            raise HTTPException(400, "prompt must be a list of token ids here")
        tokens = [*prompt[-3:][::-1], END]
        finish = "stop"
        if len(tokens) > body["max_tokens"]:
            tokens, finish = tokens[: body["max_tokens"]], "length"
        choice: dict[str, Any] = {
            "index": 0,
            "text": "",
            "finish_reason": finish,
            "logprobs": {"token_logprobs": [-0.5] * len(tokens), "tokens": [f"token_id:{t}" for t in tokens]},
        }
        if logprobs == "none":
            choice["logprobs"] = None
        elif logprobs == "short":
            choice["logprobs"]["token_logprobs"].pop()
        if body.get("return_token_ids"):
            choice["token_ids"] = tokens
        return {"id": "cmpl-1", "object": "text_completion", "model": body["model"], "choices": [choice]}

    return app


def serve(host: str, port: int) -> None:
    """Serve until stopped. SIGUSR1 makes it die the slow way a killed big server does: its
    socket closes at once, its process exits (code 9) two seconds later."""
    import os
    import signal
    import time

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(make_app(), host=host, port=port, log_level="warning"))
    dying = []

    def die(*_: object) -> None:
        dying.append(True)
        server.should_exit = True

    signal.signal(signal.SIGUSR1, die)
    server.run()
    if dying:
        time.sleep(2)
        os._exit(9)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    serve(args.host, args.port)
