"""The pure parts of astuner_tools: limits, which folders are hidden, the sandboxes' command lines."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from astuner_tools import Limits, backends
from astuner_tools.backends import View, bwrap_command, unshare_command
from astuner_tools.paths import hidden_folders, interpreter_paths, is_inside, kept_paths, project_folder
from sandbox_parts import REPO


def test_the_models_timeout_is_cut_to_the_ceiling() -> None:
    limits = Limits(max_timeout=10)
    assert limits.effective_timeout(3) == 3
    assert limits.effective_timeout(300) == 10
    for nonsense in (0, -5, float("nan"), float("inf"), "soon", None):
        assert limits.effective_timeout(nonsense) == 10
    assert limits.rlimits(2.5)["cpu_s"] == 4
    assert Limits(memory_mb=0).rlimits(1)["as_bytes"] is None


def hidden_with_its_folder(path: Path) -> bool:
    """Whether `path` is hidden: listed, or inside a listed folder (a clone in the home folder)."""
    hidden = hidden_folders()
    return str(path.resolve()) in hidden or is_inside(str(path.resolve()), hidden)


def test_the_project_is_the_git_work_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    assert project_folder(str(REPO / "kernel" / "src")) == str(REPO.resolve())
    monkeypatch.chdir(REPO / "kernel")
    assert hidden_with_its_folder(REPO)


def test_a_project_under_tmp_is_hidden_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clone = tmp_path / "nc" / "main"  # a newcomer's `git clone ... /tmp/nc/main`
    (clone / ".git").mkdir(parents=True)
    (clone / "kernel").mkdir()
    monkeypatch.chdir(clone / "kernel")
    assert str(clone.resolve()) in hidden_folders()


def test_hidden_folders_never_include_the_system(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/")  # service accounts have such homes
    monkeypatch.chdir("/usr")
    hidden = hidden_folders(["/etc", "/", "relative/path", "/tmp/scratch"])
    assert not {"/", "/etc", "/usr", "relative/path", "/tmp/scratch"} & set(hidden)
    assert "/run" in hidden or not Path("/run").is_dir()  # service sockets: docker.sock, D-Bus, ...


def test_the_interpreter_is_shown_again_inside_hidden_folders() -> None:
    prefix = os.path.realpath(sys.prefix)
    hide = [str(Path(prefix).parent)]
    kept = kept_paths(hide)
    assert any(prefix == path or prefix.startswith(path + "/") for path in kept)
    assert all(path.startswith(hide[0] + "/") for path in kept)
    assert os.path.realpath(sys.executable) in interpreter_paths()


VIEW = View(
    workdir="/tmp/astuner-python-x/work",
    hide=("/home/me", "/srv/project"),
    keep=("/home/me/.local/python",),
    tmp_mb=64,
    disk_mb=32,
    network=False,
)


@pytest.mark.parametrize("root", [True, False])
def test_bwrap_command(monkeypatch: pytest.MonkeyPatch, root: bool) -> None:
    monkeypatch.setattr(backends, "running_as_root", lambda: root)
    args = bwrap_command(VIEW, ["python", "-c", "pass"])
    text = " ".join(args)
    assert "--ro-bind / /" in text and "--dev /dev" in text and "--proc /proc" in text
    assert "--size 1048576 --tmpfs /home/me" in text and "--remount-ro /srv/project" in text
    keep = "/home/me/.local/python"
    assert f"--perms 0755 --dir /home/me/.local --ro-bind {keep} {keep}" in text
    assert f"--perms 0777 --size {32 << 20} --tmpfs /tmp/astuner-python-x/work" in text
    assert "--die-with-parent" in args and "--share-net" not in args
    assert args[-4:] == ["--", "python", "-c", "pass"]
    if root:  # no user namespace (it would map the code to the real root); the launcher drops to nobody
        assert "--unshare-all" not in args and "--unshare-net" in args and "--cap-drop" in args
    else:
        assert "--unshare-all" in args
    network = bwrap_command(View(**{**VIEW.__dict__, "network": True}), ["python"])
    assert "--share-net" in network


def test_bwrap_makes_the_way_to_the_interpreter_searchable_by_all() -> None:
    # bwrap makes a bind's missing parents 0700: `nobody` could not reach a venv under /tmp
    view = View(
        workdir="/tmp/astuner-python-x/work",
        hide=("/root", "/tmp/nc/main"),
        keep=("/root/.pyenv/versions/3.11.7", "/tmp/nc/main/.venv"),
        tmp_mb=64,
        disk_mb=32,
        network=False,
    )
    text = " ".join(bwrap_command(view, ["python"]))
    searchable = "--perms 0755 --dir"
    assert f"{searchable} /root/.pyenv {searchable} /root/.pyenv/versions --ro-bind /root/.pyenv/" in text
    assert f"{searchable} /tmp/nc {searchable} /tmp/nc/main --ro-bind /tmp/nc/main/.venv" in text
    assert f"{searchable} /tmp/astuner-python-x --perms 0777 --size {32 << 20} --tmpfs /tmp/astuner" in text
    # the project under /tmp is hidden by the fresh /tmp: no tmpfs of its own to remount
    assert "--tmpfs /tmp/nc/main" not in text and "--remount-ro /tmp/nc/main" not in text


@pytest.mark.parametrize("root", [True, False])
def test_unshare_command(monkeypatch: pytest.MonkeyPatch, root: bool) -> None:
    monkeypatch.setattr(backends, "running_as_root", lambda: root)
    args = unshare_command(VIEW, ["python"])
    for flag in ("--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--net"):
        assert flag in args
    assert ("--map-root-user" in args) is not root
    assert "--net" not in unshare_command(View(**{**VIEW.__dict__, "network": True}), ["python"])


def test_auto_takes_the_best_sandbox_that_works(monkeypatch: pytest.MonkeyPatch) -> None:
    reasons = {"bwrap": "bwrap is not installed", "unshare": None, "none": None}
    monkeypatch.setattr(backends, "probe", reasons.get)
    assert backends.choose("auto") == ("unshare", {"bwrap": "bwrap is not installed"})
    with pytest.raises(RuntimeError, match="bwrap is not installed"):
        backends.choose("bwrap")
