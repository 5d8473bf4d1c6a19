"""astuner-engine-openai: engine `openai`, any OpenAI-compatible chat endpoint (text only, untrainable).

`from astuner_engine_openai import OpenAIChatEngine, OpenAIEngineSettings`
builds one by hand (tests); a run builds it from `rollout.engine: openai` or
an auxiliary model's `engine: openai`.
"""

from astuner_engine_openai.engine import OpenAIChatEngine, OpenAIEngineSettings

__all__ = ["OpenAIChatEngine", "OpenAIEngineSettings"]
