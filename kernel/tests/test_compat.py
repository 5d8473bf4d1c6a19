"""The tutorials' old spellings: config renames, notices, value origins, `config show`, imports."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from astuner import hookimpl
from astuner.cli import make_app
from astuner.config import load_config
from astuner.config_show import annotated_yaml
from astuner.errors import ConfigError, PluginError
from astuner.logs import configure_logging, forget_warnings
from astuner.plugins import Plugins, resolve_import_string

SEED_CONFIG = """\
astune:
  project_name: math_agent
  experiment_name: read_yaml_name
  rollout:
    agentscope_learn_protocol: tutorial.math_agent->ExampleMathLearn
    agentscope_disable_toolcalls: true
    use_agentscope_protocol: true
    temperature: 0.5
    max_num_seqs: 64
  trainer_common:
    save_freq: 5
    trinity_only__n_vllm_engine: 2
hydra:
  searchpath:
    - file://astuner/default_config
defaults:
  - _self_
trinity:
  algorithm:
    algorithm_type: multi_step_grpo
"""


def line_of(text: str, fragment: str) -> int:
    """1-based number of the one line of `text` that contains `fragment`."""
    (number,) = [i for i, line in enumerate(text.splitlines(), 1) if fragment in line]
    return number


@pytest.fixture(autouse=True)
def _logging_to_a_lasting_stream() -> Iterator[None]:
    """Each test's captured stderr is closed after it: leave the log on the process's own stderr."""
    yield
    with contextlib.redirect_stderr(sys.__stderr__):
        configure_logging()


def listen(capsys: pytest.CaptureFixture[str]) -> Callable[[], str]:
    """Notices on a fresh slate, logged to this test's captured stderr; call the result to read them.

    Call it in the test body: a fixture's captured stream is closed before the test runs.
    """
    configure_logging()
    capsys.readouterr()
    return lambda: capsys.readouterr().err


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------ root block


def test_astune_root_block_loads_as_astuner_with_one_notice(tmp_path: Path, capsys) -> None:
    notices = listen(capsys)
    path = write(tmp_path, "old.yaml", "astune:\n  project_name: p\n  rollout:\n    num_repeat: 3\n")
    config = load_config(path, environ={})
    assert config.project_name == "p"
    assert config.rollout.num_repeat == 3
    assert notices().count("'astune:' is the old name of the 'astuner:' block") == 1


def test_astune_and_astuner_blocks_together_are_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "both.yaml", "astune:\n  project_name: a\nastuner:\n  project_name: b\n")
    with pytest.raises(ConfigError, match=r"both an 'astune:' and an 'astuner:' block"):
        load_config(path, environ={})


# ------------------------------------------------------------------ key renames


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("astuner.task_judge.math_answer_as_judge->MathAnswerAsJudge", "math_answer"),
        ("astune.task_judge.math_answer_as_judge->MathAnswerAndLlmAsJudge", "math_answer_llm"),
        ("astune.task_judge.env_service_as_judge->EnvServiceJudge", "env_service"),
    ],
)
def test_tutorial_judge_import_strings_map_to_registered_names(write_config, old: str, new: str) -> None:
    config = load_config(write_config({"task_judge": {"judge_protocol": old}}), environ={})
    assert config.task_judge.judge_protocol == new
    assert config.origins.origin_of("task_judge.judge_protocol").endswith(f", alias of {old}")


def test_a_users_own_judge_import_string_is_left_alone(write_config) -> None:
    config = load_config(
        write_config({"task_judge": {"judge_protocol": "my_judges.mod->MyJudge"}}), environ={}
    )
    assert config.task_judge.judge_protocol == "my_judges.mod->MyJudge"
    assert "alias" not in config.origins.origin_of("task_judge.judge_protocol")


def test_old_rollout_keys_are_renamed_and_retired_ones_dropped(write_config) -> None:
    block = {
        "rollout": {
            "agentscope_learn_protocol": "tutorial.math->MathWorkflow",
            "agentscope_disable_toolcalls": True,
            "use_agentscope_protocol": True,
        }
    }
    config = load_config(write_config(block), environ={})
    assert config.rollout.agentscope_workflow == "tutorial.math->MathWorkflow"
    assert config.rollout.disable_toolcalls is True
    dumped = config.to_yaml_dict()["astuner"]["rollout"]
    for old in block["rollout"]:
        assert old not in dumped


def test_old_and_new_spelling_of_one_key(write_config) -> None:
    same = {"agentscope_disable_toolcalls": True, "disable_toolcalls": True}
    assert load_config(write_config({"rollout": same}), environ={}).rollout.disable_toolcalls is True
    differ = {"agentscope_learn_protocol": "a.b->A", "agentscope_workflow": "c.d->C"}
    with pytest.raises(ConfigError) as err:
        load_config(write_config({"rollout": differ}), environ={})
    assert "'rollout.agentscope_learn_protocol'" in str(err.value)
    assert "'rollout.agentscope_workflow'" in str(err.value)


def test_engine_only_key_is_read_on_its_backbone(tmp_path: Path) -> None:
    text = "astuner:\n  trainer_common:\n    trinity_only__n_vllm_engine: 2\n"
    path = write(tmp_path, "eng.yaml", text)
    config = load_config(path, environ={}, backbone="trinity")
    assert config.trinity["explorer"]["rollout_model"]["engine_num"] == 2
    line = line_of(text, "trinity_only__n_vllm_engine")
    assert config.origins.origin_of("trinity.explorer.rollout_model.engine_num") == (
        f"file eng.yaml:{line}, alias of trainer_common.trinity_only__n_vllm_engine"
    )

    verl_text = (
        "astuner:\n  trainer_common:\n    verl_only__save_freq: 7\n"
        "    verl_only__fsdp_config:\n      param_offload: false\n"
    )
    verl = load_config(write(tmp_path, "verl.yaml", verl_text), environ={}, backbone="verl")
    assert verl.trainer_common.save_freq == 7
    # routed to trainer_common.fsdp_config, whose home is verl's own block, key by key
    assert verl.verl == {"actor_rollout_ref": {"actor": {"fsdp_config": {"param_offload": False}}}}
    line = line_of(verl_text, "param_offload")
    assert verl.origins.origin_of("verl.actor_rollout_ref.actor.fsdp_config.param_offload") == (
        f"file verl.yaml:{line}, alias of trainer_common.verl_only__fsdp_config.param_offload"
    )


def test_engine_only_keys_of_the_tutorials_live_in_the_engines_block(tmp_path: Path) -> None:
    text = (
        "astuner:\n  rollout:\n    max_num_seqs: 40\n    n_vllm_engine: 2\n"
        "verl:\n  actor_rollout_ref:\n    rollout:\n      name: sglang\n"
    )
    config = load_config(write(tmp_path, "eng.yaml", text), environ={})
    assert config.verl["actor_rollout_ref"]["rollout"] == {"name": "sglang", "max_num_seqs": 40}
    assert config.trinity == {"explorer": {"rollout_model": {"engine_num": 2}}}
    both = text + "      max_num_seqs: 8\n"
    with pytest.raises(ConfigError, match=r"'rollout.max_num_seqs' \(40\) and 'verl.actor_rollout_ref"):
        load_config(write(tmp_path, "both.yaml", both), environ={})


@pytest.mark.parametrize(
    "key", ["rollout.mode", "rollout.multi_turn.max_sample_per_task", "debug.debug_vllm_port"]
)
def test_keys_nothing_reads_are_dropped_with_a_notice(write_config, capsys, key: str) -> None:
    notices = listen(capsys)
    section, *rest = key.split(".")
    block: dict = {section: {}}
    node = block[section]
    for part in rest[:-1]:
        node = node.setdefault(part, {})
    node[rest[-1]] = 1
    config = load_config(write_config(block), environ={})
    assert key not in config.origins.explicit_keys()
    assert notices().count(f"'{key}' has no effect any more") == 1


def test_engine_only_keys_are_dropped_elsewhere_with_a_notice(tmp_path: Path, capsys) -> None:
    notices = listen(capsys)
    text = (
        "astuner:\n  trainer_common:\n    trinity_only__n_vllm_engine: 2\n    verl_only__save_freq: 7\n"
        "    verl_only__fsdp_config:\n      param_offload: false\n"
    )
    config = load_config(write(tmp_path, "eng.yaml", text), environ={}, backbone="debug")
    assert config.trinity == {} and config.verl == {}
    assert config.trainer_common.save_freq == 20
    assert "trinity_only__n_vllm_engine" not in config.to_yaml_dict()["astuner"]["trainer_common"]
    err = notices()
    assert err.count("'trainer_common.trinity_only__n_vllm_engine' is for backbone 'trinity' only") == 1
    assert err.count("'trainer_common.verl_only__save_freq' is for backbone 'verl' only") == 1


def test_a_genuine_typo_is_still_an_error(write_config) -> None:
    with pytest.raises(ConfigError, match=r"Did you mean 'rollout\.temperature'"):
        load_config(write_config({"rollout": {"temprature": 0.5}}), environ={})


def test_read_yaml_name_is_the_file_stem(write_config) -> None:
    config = load_config(
        write_config({"experiment_name": "read_yaml_name"}, name="gsm8k_run.yaml"), environ={}
    )
    assert config.experiment_name == "gsm8k_run"
    assert "read_yaml_name" in config.origins.origin_of("experiment_name")


# ------------------------------------------------------------------ notices


def test_each_old_spelling_gives_one_notice_across_loads(tmp_path: Path, capsys) -> None:
    notices = listen(capsys)
    path = write(tmp_path, "seed.yaml", SEED_CONFIG)
    load_config(path, environ={})
    load_config(path, environ={})  # a run loads its config more than once
    err = notices()
    for text in (
        "'astune:' is the old name",
        "'rollout.agentscope_learn_protocol' is now 'rollout.agentscope_workflow'",
        "'rollout.agentscope_disable_toolcalls' is now 'rollout.disable_toolcalls'",
        "'rollout.use_agentscope_protocol' has no effect any more",
        "'trainer_common.trinity_only__n_vllm_engine' is for backbone 'trinity' only",
        "Hydra keys hydra, defaults are ignored",
        "Not used on backbone 'debug'",
    ):
        assert err.count(text) == 1, text
    assert "Traceback" not in err


def test_keys_the_backbone_never_reads_are_listed(tmp_path: Path, capsys) -> None:
    notices = listen(capsys)
    path = write(tmp_path, "seed.yaml", SEED_CONFIG)
    load_config(path, environ={}, backbone="debug")
    (debug,) = re.findall(r"Not used on backbone 'debug': (.*?)\.\s", notices())
    unused = debug.split(", ")
    for key in ("verl: block", "trinity: block", "trainer_common.save_freq"):
        assert key in unused
    for key in ("rollout.temperature", "project_name", "rollout.agentscope_workflow"):
        assert key not in unused

    load_config(path, environ={}, backbone="trinity")
    (trinity,) = re.findall(r"Not used on backbone 'trinity': (.*?)\.\s", notices())
    assert "trinity: block" not in trinity.split(", ")
    assert "verl: block" in trinity.split(", ")  # rollout.max_num_seqs, verl's own key today


# ------------------------------------------------------------------ origins and config show


def test_origin_of_each_source(tmp_path: Path) -> None:
    text = "astuner:\n  project_name: p\n  rollout:\n    top_p: 0.8\n    agentscope_learn_protocol: a.b->W\n"
    path = write(tmp_path, "orig.yaml", text)
    config = load_config(
        path,
        ["rollout.num_repeat=2"],
        environ={"ASTUNER__ROLLOUT__TEMPERATURE": "0.3"},
        backbone="debug",
    )
    origin = config.origins.origin_of
    assert origin("rollout.top_k") == "default"
    assert origin("rollout.top_p") == f"file orig.yaml:{line_of(text, 'top_p')}"
    assert origin("project_name") == f"file orig.yaml:{line_of(text, 'project_name')}"
    old_line = line_of(text, "agentscope_learn_protocol")
    assert origin("rollout.agentscope_workflow") == (
        f"file orig.yaml:{old_line}, alias of rollout.agentscope_learn_protocol"
    )
    assert origin("rollout.temperature") == "env ASTUNER__ROLLOUT__TEMPERATURE"
    assert origin("rollout.num_repeat") == "-o rollout.num_repeat"
    assert origin("backbone") == "--backbone"
    assert config.rollout.temperature == 0.3 and config.rollout.num_repeat == 2


def test_annotated_yaml_is_the_config_with_sources(tmp_path: Path) -> None:
    path = write(tmp_path, "seed.yaml", SEED_CONFIG)
    config = load_config(path, ["rollout.num_repeat=2"], environ={})
    text = annotated_yaml(config)
    assert yaml.safe_load(text) == config.to_yaml_dict()
    lines = text.splitlines()
    (temperature,) = [line for line in lines if line.strip().startswith("temperature: 0.5")]
    assert temperature.endswith(f"# file seed.yaml:{line_of(SEED_CONFIG, 'temperature')}")
    (workflow,) = [line for line in lines if line.strip().startswith("agentscope_workflow:")]
    assert "alias of rollout.agentscope_learn_protocol" in workflow
    (algorithm,) = [line for line in lines if line.strip().startswith("algorithm_type:")]
    assert algorithm.endswith(f"# file seed.yaml:{line_of(SEED_CONFIG, 'algorithm_type')}")
    (repeat,) = [line for line in lines if line.strip().startswith("num_repeat: 2")]
    assert repeat.endswith("# -o rollout.num_repeat")
    (top_k,) = [line for line in lines if line.strip().startswith("top_k:") and line.startswith("    top_k")]
    assert top_k.endswith("# default")


# ------------------------------------------------------------------ the CLI


@pytest.fixture
def recorder_plugins(plugins: Plugins) -> Plugins:
    """Kernel defaults plus a backbone that records its runs and trains nothing."""
    runs: list = []

    class Recorder:
        def run(self, ctx) -> None:
            runs.append(ctx)

    def register_backbones(register):
        register("recorder", Recorder)

    plugins.add(SimpleNamespace(register_backbones=hookimpl(register_backbones)), name="test_recorder")
    plugins.runs = runs  # type: ignore[attr-defined]
    return plugins


def test_cli_config_show_on_a_seed_config(plugins: Plugins, workdir: Path) -> None:
    configure_logging()  # on this test's stderr, not an earlier test's closed one
    path = write(workdir, "seed.yaml", SEED_CONFIG)
    result = CliRunner().invoke(make_app(plugins), ["config", "show", "--conf", str(path)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "alias of rollout.agentscope_learn_protocol" in result.stdout
    assert f"# file seed.yaml:{line_of(SEED_CONFIG, 'temperature')}" in result.stdout
    assert "# default" in result.stdout
    assert yaml.safe_load(result.stdout)["astuner"]["project_name"] == "math_agent"


def test_cli_run_accepts_the_seeds_db_flag(recorder_plugins: Plugins, workdir: Path) -> None:
    path = write(workdir, "run.yaml", "astune:\n  rollout:\n    agentscope_disable_toolcalls: true\n")
    configure_logging()
    app = make_app(recorder_plugins)
    args = ["run", "--conf", str(path), "--backbone", "recorder", "--db", "TAG1|TAG2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (ctx,) = recorder_plugins.runs  # type: ignore[attr-defined]
    assert ctx.config.rollout.disable_toolcalls is True


# ------------------------------------------------------------------ import strings


@pytest.fixture
def clean_imports(monkeypatch: pytest.MonkeyPatch):
    """Undo the sys.path entries and modules a resolution adds."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_seed_002_layout_resolves_from_the_working_directory(workdir: Path, clean_imports) -> None:
    write(workdir, "seedlayout_agent/seedlayout_agent.yaml", "astuner: {}\n")
    write(workdir, "seedlayout_agent/seedlayout_agent.py", "class MathAgentWorkflow:\n    where = 'nested'\n")
    cls = resolve_import_string(
        "seedlayout_agent.seedlayout_agent->MathAgentWorkflow", [workdir, workdir / "seedlayout_agent"]
    )
    assert cls.__name__ == "MathAgentWorkflow" and cls.where == "nested"
    assert Path(sys.modules["seedlayout_agent.seedlayout_agent"].__file__).resolve() == (
        (workdir / "seedlayout_agent" / "seedlayout_agent.py").resolve()
    )


def test_a_module_beside_the_config_resolves_from_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_imports
) -> None:
    conf_dir = tmp_path / "experiment"
    write(conf_dir, "x.yaml", "astuner: {}\n")
    write(conf_dir, "compat_workflow_x.py", "class Flow:\n    pass\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cls = resolve_import_string("compat_workflow_x->Flow", [Path.cwd(), conf_dir])
    assert cls.__name__ == "Flow"
    assert sys.path[0] == str(conf_dir.resolve())
    assert str(elsewhere.resolve()) not in sys.path  # a folder without the module is not added


def test_the_working_directory_is_searched_before_the_config_folder(workdir: Path, clean_imports) -> None:
    conf_dir = workdir / "conf"
    write(workdir, "compat_order_mod.py", "WHERE = 'cwd'\n")
    write(conf_dir, "compat_order_mod.py", "WHERE = 'config folder'\n")
    assert resolve_import_string("compat_order_mod->WHERE", [workdir, conf_dir]) == "cwd"


def test_a_missing_module_names_every_place_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_imports
) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PluginError) as err:
        resolve_import_string("compat_no_such_module->Flow", [tmp_path, conf_dir])
    message = str(err.value)
    assert "Cannot import module 'compat_no_such_module'" in message
    assert f"{tmp_path.resolve()}; {conf_dir.resolve()}; the installed packages" in message


# ------------------------------------------------------------------ what the "not used" notice is for


def test_commands_that_run_no_backbone_say_nothing_of_unused_keys(workdir: Path, capsys) -> None:
    """`data preview` and `config show` of the config `init` writes run nothing: no "Not used" notice.

    Every installed plugin: the training backbones declare what they read.
    """
    app = make_app(Plugins())
    assert CliRunner().invoke(app, ["init", "demo"]).exit_code == 0
    configure_logging()  # on the runner's stderr while it runs
    conf = ["--conf", "demo/demo.yaml"]
    for args in (["data", "preview", *conf], ["config", "show", *conf]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "Not used on backbone" not in result.stderr, args
    forget_warnings()
    asked = CliRunner().invoke(app, ["config", "show", *conf, "--backbone", "debug"])
    assert "Not used on backbone 'debug': data.train_batch_size" in asked.stderr  # a backbone asked for


def test_keys_another_backbone_reads_are_no_old_spelling(tmp_path: Path, capsys) -> None:
    """A `debug:` block on a torch run is named, but not sent to the page of the tutorials' spellings."""
    notices = listen(capsys)
    path = write(tmp_path, "both.yaml", "astuner:\n  debug:\n    debug_first_n_tasks: 4\n")
    load_config(path, environ={}, backbone="torch")
    (line,) = [text for text in notices().splitlines() if "Not used on backbone" in text]
    assert "Not used on backbone 'torch': debug: block." in line
    assert "coming-from-the-tutorials" not in line


def test_a_workflow_whose_optional_library_is_missing_names_the_extra(
    workdir: Path, clean_imports, monkeypatch
) -> None:
    """A module found but importing a library astuner offers as an extra: the install line, not spelling."""
    write(workdir, "needs_agentscope_mod.py", "import agentscope\n\ndef run(): ...\n")
    monkeypatch.setitem(sys.modules, "agentscope", None)  # importing it raises ModuleNotFoundError
    with pytest.raises(PluginError) as caught:
        resolve_import_string("needs_agentscope_mod->run", [workdir])
    message = str(caught.value)
    assert "needs_agentscope_mod" in message and "'agentscope', which is not installed" in message
    assert 'pip install "astuner[agentscope]"' in message
    assert "Check the spelling" not in message
