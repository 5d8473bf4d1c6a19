"""Weight updates under asynchronous rollouts on a vLLM server (`VllmRollout`), against a scripted server:
an adapter stays loaded while a request sent to it runs, a reload of full weights waits for the requests in
flight and holds new ones back, and every answer records the version that sampled it."""

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

import astuner_backbone_torch.vllm_rollout as vllm_rollout
from astuner_backbone_torch.backbone import asynchronous_engine
from astuner_backbone_torch.vllm_rollout import PolicyServer, VllmRollout, server_flags

from astuner.api import AstunerError, Generation, SamplingParams

SAMPLING = SamplingParams(max_tokens=4)


class ScriptedServer:
    """A `PolicyServer` whose requests end when the test releases them; it fails the test where a
    weight change would reach a request in flight (an adapter unloaded under it, a reload during it)."""

    def __init__(self, name: str = "base") -> None:
        self.served_name = name
        self.policy_version: int | None = None
        self.attached = True
        self.loaded: set[str] = set()
        self.running: dict[int, tuple[str, asyncio.Event]] = {}
        self.reloads: list[str] = []
        self.events: list[str] = []

    def serve_as(self, name: str, version: int | None) -> None:
        self.served_name, self.policy_version = name, version

    async def generate(self, prompt_ids, sampling) -> Generation:
        name, version = self.served_name, self.policy_version
        release = asyncio.Event()
        self.running[prompt_ids[0]] = (name, release)
        await release.wait()
        del self.running[prompt_ids[0]]
        return Generation([1], [-0.5], "stop", version)

    def release(self, request: int) -> None:
        self.running[request][1].set()

    async def load_adapter(self, name: str, path) -> None:
        self.loaded.add(name)
        self.events.append(f"load {name}")

    async def unload_adapter(self, name: str) -> None:
        assert all(used != name for used, _ in self.running.values()), f"{name} unloaded under a request"
        if name not in self.loaded:  # as vLLM answers 404
            raise AstunerError(f"no adapter {name} loaded")
        self.loaded.remove(name)
        self.events.append(f"unload {name}")

    async def reload_weights(self, folder) -> None:
        assert not self.running, "reloaded with requests in flight"
        self.reloads.append(Path(folder).name)

    async def check_alive(self) -> None:
        return None

    async def aclose(self) -> None:
        self.events.append("close")


def rollout(tmp_path: Path, lora: bool, server: ScriptedServer) -> VllmRollout:
    model = SimpleNamespace(save_pretrained=lambda folder: Path(folder).mkdir(parents=True))
    policy = SimpleNamespace(lora=lora, model=model)
    assert isinstance(server, PolicyServer)
    server.serve_as(server.served_name, 0)
    return VllmRollout(server, policy, tmp_path / "vllm_weights", "tokenizer")  # type: ignore[arg-type]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_an_adapter_stays_loaded_until_its_last_request_ends(tmp_path: Path) -> None:
    server = ScriptedServer()
    engine = rollout(tmp_path, True, server)

    async def scenario() -> dict[int, int | None]:
        first = asyncio.ensure_future(engine.generate([1], SAMPLING))  # sent to the base model, version 0
        await settle()
        await engine.weights_updated(1)
        second = asyncio.ensure_future(engine.generate([2], SAMPLING))  # policy-v1
        await settle()
        assert engine.in_flight() == {("base", 0): 1, ("policy-v1", 1): 1}
        await engine.weights_updated(2)  # policy-v1 has a request in flight: kept
        assert server.loaded == {"policy-v1", "policy-v2"}
        third = asyncio.ensure_future(engine.generate([3], SAMPLING))  # policy-v2
        await settle()
        server.release(2)
        server.release(1)
        await settle()
        await engine.weights_updated(3)  # nothing uses policy-v1 now, policy-v2's request still runs
        assert server.loaded == {"policy-v2", "policy-v3"}
        assert not (engine.folder / "policy-v1").exists() and (engine.folder / "policy-v2").is_dir()
        server.release(3)
        versions = {1: (await first).policy_version, 2: (await second).policy_version}
        versions[3] = (await third).policy_version
        await engine.aclose()  # an attached server: what this run loaded is unloaded
        return versions

    assert asyncio.run(scenario()) == {1: 0, 2: 1, 3: 2}
    assert server.loaded == set() and server.events[-1] == "close"
    assert server.events.index("unload policy-v1") > server.events.index("load policy-v3")
    assert engine.held_seconds == 0.0


def test_a_resumed_run_reloads_an_adapter_a_killed_run_left_on_an_attached_server(tmp_path: Path) -> None:
    """A SIGKILLed run unloads nothing: its `policy-v2` is still on the server when the resumed run loads
    its own `policy-v2` (vLLM refuses a name it holds); one that fails to unload is tried again at close."""
    server = ScriptedServer()
    server.loaded = {"policy-v2"}
    engine = rollout(tmp_path, True, server)

    async def scenario() -> None:
        await engine.weights_updated(2)
        assert server.events == ["unload policy-v2", "load policy-v2"]
        await engine.weights_updated(3)
        assert server.loaded == {"policy-v3"}

        async def failing(name: str) -> None:
            raise AstunerError("server busy")

        server.unload_adapter, kept = failing, server.unload_adapter  # type: ignore[method-assign]
        with pytest.raises(AstunerError, match="busy"):
            await engine.weights_updated(4)  # policy-v3 is retired but not unloaded
        server.unload_adapter = kept  # type: ignore[method-assign]
        await engine.aclose()

    asyncio.run(scenario())
    assert server.loaded == set()  # policy-v3 unloaded at close after all, and policy-v4


def full_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ScriptedServer, VllmRollout]:
    """A scripted server and its `VllmRollout` reloading full weights (saved as empty folders)."""
    monkeypatch.setattr(vllm_rollout, "save_for_vllm", lambda model, folder: folder.mkdir(parents=True))
    server = ScriptedServer()
    return server, rollout(tmp_path, False, server)


def test_a_full_weights_reload_waits_for_the_requests_in_flight_and_holds_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, engine = full_weights(tmp_path, monkeypatch)

    async def scenario() -> dict[int, int | None]:
        early = asyncio.ensure_future(engine.generate([1], SAMPLING))
        await settle()
        update = asyncio.ensure_future(engine.weights_updated(1))
        for _ in range(1000):  # the weights are saved (in a thread): the reload waits for request 1
            if not engine._admitting.is_set():
                break
            await asyncio.sleep(0.005)
        late = asyncio.ensure_future(engine.generate([2], SAMPLING))  # arrives while the reload waits
        await settle()
        assert not update.done() and server.reloads == []
        assert set(server.running) == {1}  # the late request is held back, not sent
        await asyncio.sleep(0.05)
        server.release(1)
        await update
        assert server.reloads == ["weights-v1"]
        await settle()
        server.release(2)
        return {1: (await early).policy_version, 2: (await late).policy_version}

    assert asyncio.run(scenario()) == {1: 0, 2: 1}
    assert engine.held_seconds >= 0.05
    assert engine.in_flight() == {}


def test_a_reload_with_nothing_in_flight_holds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The synchronous loop (max_staleness 0) syncs between batches: no wait, as before."""
    server, engine = full_weights(tmp_path, monkeypatch)
    asyncio.run(engine.weights_updated(1))
    assert server.reloads == ["weights-v1"] and server.policy_version == 1
    assert engine.held_seconds < 0.01


def test_the_server_holds_an_adapter_per_version_in_flight() -> None:
    assert server_flags(True, 8)[0][-2:] == ["--max-loras", "2"]  # synchronous: as before
    args, env = server_flags(True, 5, max_staleness=3)
    assert args == ["--enable-lora", "--max-lora-rank", "8", "--max-loras", "5"]
    assert env == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    assert server_flags(False, 0, max_staleness=3) == ([], {"VLLM_SERVER_DEV_MODE": "1"})


def test_asynchronous_rollouts_run_on_the_vllm_engine(tmp_path: Path) -> None:
    engine = rollout(tmp_path, True, ScriptedServer())
    assert asynchronous_engine(engine, 0) is None
    assert asynchronous_engine(engine, 2) is engine
