"""A throw-away virtual environment with TRL, shared by the benchmarks that compare astuner with TRL.

TRL is not a dependency of astuner. `trl_python()` builds (once) a venv under the system temp folder
that sees the project's .venv through a .pth file and adds `trl==1.16.0` there, pinned by the
project's constraints.txt (so pip keeps the local CPU torch); later calls reuse it and return its
python. Used by bench/bench_vs_trl.py and bench/bench_agentic.py.

`tool_model_dir(target)` builds the model folder both sides of bench/bench_agentic.py train: SmolLM2's
HF folder (`builtin:smollm2-135m-instruct`: weights and tokenizer) with its chat template replaced by
the Qwen2.5 tool template that TRL 1.16 ships (trl/chat_templates/qwen2_5.jinja). TRL accepts
`tools=` only for chat templates it recognises byte for byte, and SmolLM2's own ChatML template
renders no tools; SmolLM2 speaks ChatML like Qwen2.5, so this template fits it, and astuner's
`model.tool_format: auto` renders tools with it too: both systems feed the model the same tokens.

    .venv/bin/python bench/trl_env.py                 # build the venv, print its python
    .venv/bin/python bench/trl_env.py /tmp/smol-qwen  # also build the tool-template model folder
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TRL_VERSION = "1.16.0"


def trl_python(version: str = TRL_VERSION) -> Path:
    """A venv under the temp folder that sees this interpreter's packages plus TRL; its python."""
    venv = Path(tempfile.gettempdir()) / "astuner-bench-trl"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # The project's .venv (torch, transformers, astuner and its editable installs, whose own .pth
    # files only a site dir processes) is visible to the benchmark venv.
    dev_site = sysconfig.get_paths()["purelib"]
    (site / "astuner_dev.pth").write_text(f"import site; site.addsitedir({dev_site!r})\n", encoding="utf-8")
    check = subprocess.run([str(python), "-c", f"import trl; assert trl.__version__ == '{version}'"])
    if check.returncode != 0:
        constraints = REPO / "constraints.txt"
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-c", str(constraints), f"trl=={version}"],
            check=True,
        )
    return python


def trl_chat_template(name: str = "qwen2_5", python: Path | None = None) -> str:
    """The text of a chat template TRL ships (trl/chat_templates/<name>.jinja), read from the TRL venv."""
    python = python or trl_python()
    where = subprocess.run(
        [str(python), "-c", "import trl, pathlib; print(pathlib.Path(trl.__file__).parent)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return (Path(where) / "chat_templates" / f"{name}.jinja").read_text(encoding="utf-8")


def tool_model_dir(target: Path, python: Path | None = None) -> Path:
    """SmolLM2-135M-Instruct's HF folder with TRL's Qwen2.5 tool template as its chat template.

    The weights are linked, the small files copied; the template goes into chat_template.jinja (no
    tokenizer_config.json entry), byte-identical to TRL's, since TRL recognises templates by equality.
    """
    from astuner_backbone_torch.models import resolve_model_dir

    source = Path(resolve_model_dir("builtin:smollm2-135m-instruct"))
    template = trl_chat_template("qwen2_5", python)
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        dest = target / item.name
        if item.name == "chat_template.jinja" or dest.exists():
            continue
        if item.suffix in (".safetensors", ".bin"):
            dest.symlink_to(item.resolve())
        else:
            shutil.copy2(item, dest)
    config = json.loads((target / "tokenizer_config.json").read_text(encoding="utf-8"))
    if config.pop("chat_template", None) is not None:
        (target / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (target / "chat_template.jinja").write_text(template, encoding="utf-8")
    return target


def time_generate(model: Any) -> dict[str, float]:
    """Wrap `model.generate`; the returned dict's "gen" adds up the seconds spent in it (reset per step)."""
    timing = {"gen": 0.0}
    generate = model.generate

    def timed_generate(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            timing["gen"] += time.perf_counter() - began

    model.generate = timed_generate
    return timing


if __name__ == "__main__":
    print(trl_python())
    if len(sys.argv) > 1:
        print(tool_model_dir(Path(sys.argv[1])))
