"""The `task_reader.env_service` settings block, shared by the reader, the gym envs and the judge."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class EnvServiceSettings(BaseModel):
    """Where the EnvService is and how to talk to it."""

    model_config = ConfigDict(extra="forbid")

    env_url: str = Field("http://127.0.0.1:8080", description="Base URL of the EnvService.")
    env_type: str = Field("appworld", description="The environment, e.g. appworld, guess_number, countdown.")
    training_split: str = Field("train", description="`params.split` of /get_env_profile for training tasks.")
    validation_split: str = Field("dev", description="`params.split` for validation tasks.")
    timeout: float = Field(30.0, gt=0, description="Seconds to wait for one answer.")
    tries: int = Field(3, ge=1, description="Attempts per call on connection errors and 5xx answers.")
    backoff: float = Field(1.0, ge=0, description="Seconds before the first retry; doubles, with jitter.")
    max_connections: int = Field(256, ge=1, description="Open HTTP connections to the service at most.")
    create_params: dict[str, Any] = Field(default_factory=dict, description="`params` of every /create.")
    step_params: dict[str, Any] = Field(default_factory=dict, description="`params` of every /step.")
