"""EnvService support for astuner: environment tasks over HTTP.

- `client.EnvServiceClient`: the async protocol client (retries, timeouts).
- `gym.EnvServiceGym`: one environment instance as a gym env for workflows.
- `reader.EnvServiceReader`: task ids from `/get_env_profile`; its
  `gym_env_factory()` is what the rollout stack asks for.
- `judge.EnvServiceJudge`: the reward from `/evaluate`.
- `server`: a reference EnvService with text games (`astuner envservice serve`).
"""
