"""A config file whose name is not UTF-8 runs to its end, where stdout is strict about what it prints.

The run folder is named after the file (`experiment_name: read_yaml_name`),
so its path holds bytes Python keeps as lone surrogates; a stdout that is
strict (every UTF-8 locale but C.UTF-8) refuses those.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from astuner.run_status import read_status

CHILD = textwrap.dedent(
    """
    import sys
    from types import SimpleNamespace

    from astuner import hookimpl
    from astuner.cli import make_app
    from astuner.logs import configure_logging
    from astuner.plugins import Plugins
    from astuner.testing.backbones import EndingBackbone, EndSettings


    def register_backbones(register):
        register("ending", EndingBackbone, settings=EndSettings)


    plugins = Plugins(load_entry_points=False)
    plugins.add(SimpleNamespace(register_backbones=hookimpl(register_backbones)), name="ending")
    configure_logging()
    make_app(plugins)(args=["run", "--conf", sys.argv[1], "--backbone", "ending"], prog_name="astuner")
    """
)


def test_a_run_named_after_a_config_file_that_is_not_utf8_ends_cleanly(tmp_path: Path) -> None:
    conf = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.yaml"))
    conf.write_text(f"astuner:\n  experiment_dir: {tmp_path / 'launcher_record'}\n", encoding="utf-8")
    child = tmp_path / "child.py"
    child.write_text(CHILD, encoding="utf-8")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    result = subprocess.run(
        [sys.executable, str(child), str(conf)], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    (run,) = Path(os.fsdecode(bytes(tmp_path) + b"/launcher_record/caf\xe9")).iterdir()
    assert read_status(run).state == "finished"
    closing = result.stdout.strip().splitlines()
    assert closing[-4].startswith("run finished after "), result.stdout
    assert (
        closing[-3] == f"  checkpoint:  {tmp_path}/launcher_record/caf\\udce9/{run.name}/checkpoints/step_2"
    )
