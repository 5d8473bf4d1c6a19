"""astuner-engine-vllm: engine `vllm`, a vLLM OpenAI-compatible server prompted with token ids.

`from astuner_engine_vllm import VllmEngine, VllmEngineSettings` builds one
by hand (tests, benchmarks); a run builds it from `rollout.engine: vllm`.
`server` starts, watches and stops a server this run owns.
"""

from astuner_engine_vllm.engine import VllmEngine, VllmEngineSettings

__all__ = ["VllmEngine", "VllmEngineSettings"]
