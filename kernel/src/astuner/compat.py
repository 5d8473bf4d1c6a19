"""The tutorials' old spellings, mapped to today's, in one place.

Users arrive with configs written for the system's earlier names: a
top-level `astune:` block, `rollout.agentscope_learn_protocol`, judges named
`astune.task_judge.math_answer_as_judge->MathAnswerAsJudge`, engine-only keys
such as `trainer_common.trinity_only__n_vllm_engine`. They keep working:
`translate()` rewrites one layer of raw config (a file's `astuner:` block,
the environment, the `-o` overrides) before validation, and `emit_notices` says
once per run, in one short line each, what was rewritten. Nothing here is
ever an error, except two spellings of one key that disagree.

`unused_on_backbone()` lists the keys a user set that the chosen backbone
never reads (a `trinity:` block on `--backbone debug`, vLLM sizes on the
torch trainer), so a seed config runs everywhere and says what it ignored;
`notify_unused()` says so without the migration page: such keys are today's.
`switched_on_notifiers()` names the notifiers the seeds turn on from the
environment (`PHONE_NUMBERS`: `sms`, from the plugin astuner-notify).

The kernel spells only its own keys here. What concerns a plugin comes from
its registration (`astuner.hookspecs.Register`), gathered by
`astuner.declarations.declared()`:
which backbone reads which key, where a backbone's engine-only keys live,
the old names of judges and the like, the variables that turn notifiers on.

The tutorials' code forms are read where they are called (the workflow
loader, the judge adapter, the model handle); what they are handed comes
from here: `initial_messages()` for `agentscope_execute(init_messages, ...)`
and `judge_input_dictionary()` for `compute_reward(judge_input_dictionary)`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from astuner.declarations import CHOSEN_BY, declared, old_spelling
from astuner.errors import ConfigError
from astuner.import_strings import is_import_string
from astuner.logs import warn_once

if TYPE_CHECKING:
    from astuner.core.task import WorkflowOutput, WorkflowTask
    from astuner.declarations import Declared
    from astuner.plugins import Plugins

DOCS = "docs/coming-from-the-tutorials.md"

# The system's earlier names for the config's root block.
OLD_ROOTS = ("astune",)

# Old dotted key -> today's. One engine's own settings live in its verbatim block, under the
# engine's name for them (the backbone plugin gives them astuner's defaults and validates them).
KEY_ALIASES = {
    "rollout.agentscope_learn_protocol": "rollout.agentscope_workflow",
    "rollout.user_workflow": "rollout.agentscope_workflow",
    "rollout.agentscope_disable_toolcalls": "rollout.disable_toolcalls",
    "rollout.force_disable_toolcalls": "rollout.disable_toolcalls",
    "rollout.name": "verl.actor_rollout_ref.rollout.name",
    "rollout.max_num_seqs": "verl.actor_rollout_ref.rollout.max_num_seqs",
    "trainer_common.fsdp_config": "verl.actor_rollout_ref.actor.fsdp_config",
    "trainer_common.algorithm.use_kl_in_reward": "verl.algorithm.use_kl_in_reward",
    "rollout.n_vllm_engine": "trinity.explorer.rollout_model.engine_num",
}

# Keys that meant something once and mean nothing now: accepted, dropped, explained.
_NEVER_READ = "nothing reads it"
RETIRED_KEYS = {
    "rollout.use_agentscope_protocol": "every workflow runs through the AgentScope-compatible model handle",
    "task_judge.judge_type": "the judge is chosen by task_judge.judge_protocol alone",
    "rollout.mode": "rollouts are always asynchronous",
    "rollout.multi_turn.max_sample_per_task": "an episode's calls merge into as few samples as they can",
    "context_tracker.context_tracker_type": "the tracker is chosen by context_tracker.mode",
    "context_tracker.alien_llm_model": "a judge's model is an auxiliary model (auxiliary_models)",
    "context_tracker.alien_llm_response_length": "a judge's model is an auxiliary model (auxiliary_models)",
    "trainer_common.algorithm.task_norm_patch": _NEVER_READ,
    "debug.debug_vllm_port": "a debug run starts its vLLM server on a free port (rollout.engine: vllm)",
    "debug.debug_vllm_seed": _NEVER_READ,
    "debug.debug_tensor_parallel_size": "the vLLM server is sized by rollout.tensor_model_parallel_size",
}

# A kind's old packages: an old name that is an import string is read under each of them.
OLD_PACKAGES = {"judge": ("astune.task_judge.", "astuner.task_judge.", "ajet.task_judge.")}

# `<section>.<backbone>_only__<key>`: a key for one backbone only.
ONLY_MARK = "_only__"


@dataclass
class Translation:
    """One layer after translation: the data, what was renamed, what to tell the user."""

    data: dict[str, Any]
    renamed: dict[str, str] = field(default_factory=dict)  # today's dotted key -> the spelling used
    notices: list[str] = field(default_factory=list)


def translate_root(raw: Mapping[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """A config file's top level with `astune:` read as `astuner:`."""
    out = dict(raw)
    notices = []
    for old in OLD_ROOTS:
        if old not in out:
            continue
        block = out.pop(old)
        if "astuner" in out:
            raise ConfigError(
                f"{where} has both an '{old}:' and an 'astuner:' block; '{old}:' is the old name of "
                "'astuner:'. Keep one."
            )
        out["astuner"] = block
        notices.append(
            f"'{old}:' is the old name of the 'astuner:' block ({where}); it is read as 'astuner:'."
        )
    return out, notices


def translate(
    layer: Mapping[str, Any],
    backbone: str,
    where: str,
    known: Declared,
    verbatim: Iterable[str] = (),
) -> Translation:
    """Today's spelling of one raw layer of the `astuner:` block (mappings are copied, not changed).

    `known` is what the loaded plugins declare; the top-level `verbatim` blocks
    (an engine's own settings) are passed on as written.
    """
    result = Translation(_copy(layer))
    data = result.data
    homes = known.key_homes.get(backbone, {})
    _route_engine_keys(data, backbone, where, result, homes, set(verbatim), prefix="")
    for old, new in KEY_ALIASES.items():
        if not _has(data, old):
            continue
        spelled = result.renamed.pop(old, old)
        for suffix, value in _leaves(_pop(data, old)):
            _alias(data, old + suffix, new + suffix, value, where)
            result.renamed[new + suffix] = spelled + suffix
        result.notices.append(f"'{old}' is now '{new}' ({where}).")
    for old, why in RETIRED_KEYS.items():
        if _has(data, old):
            _pop(data, old)
            result.notices.append(f"'{old}' has no effect any more ({where}): {why}.")
    for kind, aliases in known.old_names.items():
        key = CHOSEN_BY[kind]
        value = _get(data, key) if _has(data, key) else None
        new = _old_name(value, kind, aliases) if isinstance(value, str) else None
        if new is not None:
            _set(data, key, new)
            result.renamed[key] = f"{key}: {value}"
            result.notices.append(f"{key} '{value}' is the built-in '{new}' today ({where}).")
    return result


def unused_on_backbone(
    keys: Iterable[str], backbone: str, known: Declared, engine: str = "auto"
) -> list[str]:
    """Of the dotted `keys` a user set, those `backbone` never reads, sorted.

    Only a backbone that declared what it reads is judged; a key in another
    backbone's own block is named by its block (`trinity: block`).
    """
    if backbone not in known.judged:
        return []
    unused = set()
    for key in keys:
        readers = _readers(key, known.read_by)
        if key == "rollout.tensor_model_parallel_size" and engine == "vllm":
            continue  # the vLLM server astuner starts for any backbone is sized by it
        if readers is not None and backbone not in readers:
            top = key.split(".", 1)[0]
            unused.add(f"{top}: block" if top in known.backbones else key)
    return sorted(unused)


def notify_unused(keys: Iterable[str], backbone: str, known: Declared, engine: str = "auto") -> None:
    """Say once which of the `keys` a user set `backbone` never reads (see `unused_on_backbone`).

    Such a key is no old spelling (a `debug:` block on a torch run is the debug
    backbone's today), so the line does not send the user to the migration page.
    """
    unused = unused_on_backbone(keys, backbone, known, engine)
    if unused:
        text = f"Not used on backbone '{backbone}': {', '.join(unused)}."
        warn_once(text, text)


def switched_on_notifiers(notify: Mapping[str, Any], plugins: Plugins) -> dict[str, str]:
    """Notifier -> the seeds' variable that turns it on, for each variable set whose notifier has no block.

    The variables are those the loaded notifiers declare, and those of this
    repository's notifiers when not installed (`astuner.declarations.MOVED_OUT_SWITCHES`).
    """
    switches = declared(plugins).switches
    return {name: var for var, name in switches.items() if os.environ.get(var) and name not in notify}


# ------------------------------------------------------------------ code forms
# The first tutorials' workflow and judge code (astune era) runs as written; these
# are the pieces of that world the runner and judges hand to it.

JUDGE_INPUT_NOTICE = (
    "model_tuner.update_judge_input_dictionary(...) is the first tutorials' way to hand values to the "
    "judge; it works. Today's: return WorkflowOutput(metadata={...})."
)
FIRST_FORM_NOTICE = (
    "{name}.agentscope_execute(init_messages, astune_proxy, config) is the first tutorials' workflow "
    "form; it runs as written. Today's form is async execute(self, workflow_task, model_tuner) -> "
    "WorkflowOutput."
)


def initial_messages(workflow_task: WorkflowTask) -> list[dict[str, Any]]:
    """The conversation a task starts with: the environment's first messages, or the task's query."""
    gym_env = workflow_task.gym_env
    if gym_env is not None and getattr(gym_env, "initial_messages", None):
        return [dict(m) for m in gym_env.initial_messages]
    task = workflow_task.task
    if task.metadata.get("init_messages"):
        return [dict(m) for m in task.metadata["init_messages"]]
    return [{"role": "user", "content": task.main_query}]


def judge_input_dictionary(workflow_task: WorkflowTask, output: WorkflowOutput) -> dict[str, Any]:
    """What a first-tutorials judge reads from `judge_input_dictionary`.

    `env`: the task's environment client (None without an environment service);
    `task_core_arg`: the `WorkflowTask` (`.task.main_query`, `.task.metadata['answer']`);
    `grouped_steps`: each model call as its message list, the reply last;
    plus everything the workflow handed over (`final_answer`, ...) and its output's metadata.
    """
    tuner = workflow_task.model_tuner
    steps = [
        [*call.messages, {"role": "assistant", "content": call.text}]
        for call in (tuner.calls if tuner is not None else [])
    ]
    return {
        "env": workflow_task.gym_env,
        "task_core_arg": workflow_task,
        "grouped_steps": steps,
        "workflow_output": output,
        **output.metadata,
    }


def emit_notices(notices: Iterable[str]) -> None:
    """Warn about each old-spelling notice once per process (a run loads its config more than once),
    pointing to the page of the tutorials' spellings."""
    for text in notices:
        warn_once(text, f"{text} See {DOCS}.")


def _alias(data: dict[str, Any], old: str, new: str, value: Any, where: str) -> None:
    """Set `new` to the `value` read from `old`; the same key set to another value both ways is an error."""
    if _has(data, new) and _get(data, new) != value:
        raise ConfigError(
            f"{where} sets both '{old}' ({value!r}) and '{new}' ({_get(data, new)!r}); '{old}' is the "
            f"old spelling of '{new}'. Keep one."
        )
    _set(data, new, value)


def _leaves(value: Any, suffix: str = "") -> list[tuple[str, Any]]:
    """(".a.b", leaf) for every leaf of a mapping value, so it merges into today's block key by key."""
    if not isinstance(value, Mapping) or not value:
        return [(suffix, value)]
    return [pair for key, child in value.items() for pair in _leaves(child, f"{suffix}.{key}")]


def _old_name(value: str, kind: str, aliases: Mapping[str, str]) -> str | None:
    """Today's name for the `kind` named `value`: a plain old name as written, an import string
    under one of the kind's old packages.

    Any other import string (`my_judges.mod->MyJudge`) is the user's own and never renamed.
    """
    if not is_import_string(value):
        return aliases.get(value)
    for package in OLD_PACKAGES.get(kind, ()):
        if value.startswith(package):
            return aliases.get(old_spelling(value[len(package) :]))
    return None


def _route_engine_keys(
    node: dict[str, Any],
    backbone: str,
    where: str,
    result: Translation,
    homes: Mapping[str, str],
    verbatim: set[str],
    prefix: str,
) -> None:
    """Move `<section>.<engine>_only__<key>` to its home on that engine's backbone; drop it elsewhere."""
    for name in list(node):
        value = node[name]
        dotted = f"{prefix}{name}"
        engine, mark, key = name.partition(ONLY_MARK) if isinstance(name, str) else ("", "", "")
        if not (mark and engine.isidentifier() and key):
            if isinstance(value, dict) and dotted not in verbatim:
                _route_engine_keys(value, backbone, where, result, homes, verbatim, prefix=f"{dotted}.")
            continue
        del node[name]
        home = homes.get(key, f"{prefix}{key}")
        if backbone != engine:
            result.notices.append(
                f"'{dotted}' is for backbone '{engine}' only; not used on '{backbone}' ({where})."
            )
            continue
        _set(result.data, home, value)
        result.renamed[home] = dotted
        result.notices.append(f"'{dotted}' is read as '{home}' on backbone '{engine}' ({where}).")


def _readers(key: str, read_by: Mapping[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        found = read_by.get(".".join(parts[:n]))
        if found is not None:
            return found
    return None


def _copy(node: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) if isinstance(v, Mapping) else v for k, v in node.items()}


def _has(data: Mapping[str, Any], dotted: str) -> bool:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _get(data: Mapping[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        node = node[part]
    return node


def _pop(data: dict[str, Any], dotted: str) -> Any:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node[part]
    return node.pop(leaf)


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value
